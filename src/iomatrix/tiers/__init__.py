"""Tiers issue I/O: bare metal (fio on the host), guest (fio inside QEMU), and whatever else is registered.

Every module in this package that defines a :class:`~iomatrix.tiers.base.Tier` subclass registers it with
:func:`register`; the plan model, the matrix, the runner, the reports and the CLI find tiers only through
:func:`tier_class` and :func:`tier_names`, so adding a tier is writing one module.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from iomatrix.tiers.base import Tier
    from iomatrix.workloads import Workload

_REGISTRY: dict[str, type[Tier]] = {}
_discovered = False
T = TypeVar("T", bound="type[Tier]")


def register(cls: T) -> T:
    """Class decorator: make a tier known by its `name`."""
    _REGISTRY[cls.name] = cls
    return cls


@contextlib.contextmanager
def registered(*classes: type[Tier]) -> Iterator[None]:
    """Make `classes` known by their names for the duration of the block only (a test's scripted tier):
    the plan model, the matrix and the runner then find them like any tier. A name already taken is refused."""
    registry = _discover()
    taken = [c.name for c in classes if c.name in registry]
    if taken or len({c.name for c in classes}) != len(classes):
        raise ValueError(f"tier name(s) already registered or repeated: {', '.join(taken) or 'repeated'}")
    for cls in classes:
        registry[cls.name] = cls
    try:
        yield
    finally:
        for cls in classes:
            registry.pop(cls.name, None)


def _discover() -> dict[str, type[Tier]]:
    global _discovered
    if not _discovered:
        for mod in pkgutil.iter_modules(__path__):
            if mod.name != "base":
                importlib.import_module(f"{__name__}.{mod.name}")
        _discovered = True
    return _REGISTRY


def tier_classes() -> list[type[Tier]]:
    """Registered tiers, reference tier first (the order reports list them in)."""
    return sorted(_discover().values(), key=lambda c: (c.order, c.name))


def tier_names() -> list[str]:
    """Registered tier names, reference tier first."""
    return [c.name for c in tier_classes()]


def known_tier(name: str) -> type[Tier] | None:
    """The tier named `name`, or None for a name this version does not know (an old database's tier)."""
    return _discover().get(name)


def reference_tier() -> type[Tier]:
    """The tier other tiers' cells are divided by (bare metal)."""
    return next(c for c in tier_classes() if c.is_reference)


def workload_owner(workload: Workload) -> type[Tier] | None:
    """The tier whose own workload this is (its kind is the tier's `workload_kind`), or None for a workload
    the tiers share."""
    return next((c for c in tier_classes() if c.workload_kind is not None and c.workload_kind == workload.kind), None)


def tier_class(name: str) -> type[Tier]:
    try:
        return _discover()[name]
    except KeyError:
        raise KeyError(f"no tier named '{name}'; known: {', '.join(tier_names())}") from None


def tier_order(name: str) -> int:
    """Sort key for reports; unknown names (an old database's tier) sort last."""
    cls = _discover().get(name)
    return cls.order if cls else 1000


def is_reference(name: str) -> bool:
    cls = _discover().get(name)
    return bool(cls and cls.is_reference)
