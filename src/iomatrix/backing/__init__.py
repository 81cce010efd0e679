"""Host storage backings: specs (`spec`), provisioning (`provision`) and leftovers (`leftovers`)."""

from iomatrix.backing.leftovers import clean, forget, register_temp_path
from iomatrix.backing.provision import BackingHandle, provision
from iomatrix.backing.spec import (
    BACKING_TYPES,
    BackingSpec,
    BlockdevBacking,
    DirBacking,
    LoopfsBacking,
    LvmBacking,
    TmpfsBacking,
    ZfsBacking,
    parse_backing,
    parse_size,
)

__all__ = [
    "BACKING_TYPES",
    "BackingHandle",
    "BackingSpec",
    "BlockdevBacking",
    "DirBacking",
    "LoopfsBacking",
    "LvmBacking",
    "TmpfsBacking",
    "ZfsBacking",
    "clean",
    "forget",
    "parse_backing",
    "parse_size",
    "provision",
    "register_temp_path",
]
