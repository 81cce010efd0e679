"""A package's re-exported names, each imported from its submodule when first asked (PEP 562).

A package whose ``__init__`` imports every submodule makes each reader of one of them pay for all:
`iomatrix.backing.spec` (what a plan names) loaded provisioning, the leftovers ledger and every
network backing; `iomatrix.plan.current_cell` the plan loader and with it every backing
(issue 52: `recommend` on a 100-host store spent most of its CPU importing). `iomatrix.stats` does
the same by hand."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for `package`: name → the module that defines it (relative to
    `package`, or a whole name starting with "iomatrix."). A name is imported on first access and
    kept in the package's namespace, so the next access is an ordinary attribute."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if module.startswith("iomatrix.") else f"{package}.{module}"
        value = getattr(importlib.import_module(full), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(where)

    return getattr_, dir_
