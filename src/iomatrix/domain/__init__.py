"""The disk-configuration vocabulary, re-exported from the modules that define it:

- :mod:`iomatrix.domain.values`: every axis value and what it means (cache modes' semantics, buses);
- :mod:`iomatrix.domain.rules`: the rules between axis values, and a refused value's wording;
- :mod:`iomatrix.domain.tool_spellings`: how libvirt, virt-install, Proxmox and Nova spell them;
- :mod:`iomatrix.domain.baselines`: the defaults an answer is compared with.

The axis registry (:mod:`iomatrix.domain.axes`), a cell (:mod:`iomatrix.domain.cell`) and a
workload (:mod:`iomatrix.domain.workload`) are imported from their own modules."""

# Star imports re-export each module's __all__: callers keep `from iomatrix.domain import CACHE`.
from iomatrix.domain.baselines import *  # noqa: F403
from iomatrix.domain.rules import *  # noqa: F403
from iomatrix.domain.tool_spellings import *  # noqa: F403
from iomatrix.domain.values import *  # noqa: F403
