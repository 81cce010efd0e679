"""Pure statistics over stored samples (lists of floats): no I/O, no database, no printing.

See docs/statistics.md for every definition and convention.  Names are loaded
lazily (PEP 562) so that importing ``iomatrix.stats`` — which the runner and
the CLI do — does not import scipy until a statistic is actually computed.
"""

from __future__ import annotations

import importlib
from typing import Any

from iomatrix.stats.public_names import WHERE as _WHERE

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'iomatrix.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"iomatrix.stats.{mod}"), name)
    globals()[name] = value  # cache: the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return __all__
