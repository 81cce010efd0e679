"""Host storage backings: specs (`spec`), provisioning (`provision`) and leftovers (`leftovers`).

The names below are imported when first asked (`iomatrix.lazy_names`): a report that reads a
backing's spec through the plan does not import provisioning, the leftovers ledger and every network
backing with it. The function `provision` is imported from `iomatrix.backing.provision`: here that
name is the submodule."""

from __future__ import annotations

from iomatrix.lazy_names import lazy_names

_WHERE = {
    "clean": "leftovers",
    "forget": "leftovers",
    "register_temp_path": "leftovers",
    "BackingHandle": "provision",
    "BACKING_TYPES": "spec",
    "BackingSpec": "spec",
    "BlockdevBacking": "spec",
    "DirBacking": "spec",
    "LoopfsBacking": "spec",
    "LvmBacking": "spec",
    "TmpfsBacking": "spec",
    "ZfsBacking": "spec",
    "parse_backing": "spec",
    "parse_size": "spec",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
