"""The tier registry: a tier's name to its declaration and, imported on first use, its
implementation (the package's docstring, :mod:`iomatrix.tiers`, tells how tiers are found)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

from iomatrix.plugins import PluginError, load_entry_points, load_object
from iomatrix.tiers.declaration import TierDeclaration

if TYPE_CHECKING:
    from iomatrix.domain.cell import Cell
    from iomatrix.domain.workload import Workload

# The entry-point group an installed package declares its tiers in: `name =
# "module:DeclarationClass"`.
ENTRY_POINT_GROUP = "iomatrix.tiers"
DECLARED_PACKAGE = "iomatrix.tiers.declared"

_DECLARATIONS: dict[str, type[TierDeclaration]] = {}
# Implementations (iomatrix.tiers.base.Tier subclasses of their declarations), loaded on first use.
_IMPLEMENTATIONS: dict[str, type[TierDeclaration]] = {}
_discovered = False
T = TypeVar("T", bound=type[TierDeclaration])


def register(cls: T) -> T:
    """Make a tier known by its `name`: a declaration, or a whole tier (a class that is its own
    implementation, `implementation` empty)."""
    _DECLARATIONS[cls.name] = cls
    if not cls.implementation:
        _IMPLEMENTATIONS[cls.name] = cls
    return cls


@contextlib.contextmanager
def registered(*classes: type[TierDeclaration]) -> Iterator[None]:
    """Make `classes` known by their names for the duration of the block only (a test's scripted
    tier): the plan model, the matrix and the runner then find them like any tier. A name already
    taken is refused."""
    registry = _discover()
    taken = [c.name for c in classes if c.name in registry]
    if taken or len({c.name for c in classes}) != len(classes):
        raise ValueError(
            f"tier name(s) already registered or repeated: {', '.join(taken) or 'repeated'}"
        )
    for cls in classes:
        registry[cls.name] = cls
        _IMPLEMENTATIONS[cls.name] = cls
    try:
        yield
    finally:
        for cls in classes:
            registry.pop(cls.name, None)
            _IMPLEMENTATIONS.pop(cls.name, None)


def _declarations_in(module_name: str) -> list[type[TierDeclaration]]:
    """The tier declarations a module defines (not the ones it imports)."""
    module = importlib.import_module(module_name)
    return [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, TierDeclaration)
        and obj is not TierDeclaration
        and obj.__module__ == module_name
    ]


def _discover() -> dict[str, type[TierDeclaration]]:
    global _discovered
    if not _discovered:
        _discovered = True
        package = importlib.import_module(DECLARED_PACKAGE)
        for mod in pkgutil.iter_modules(package.__path__):
            for decl in _declarations_in(f"{DECLARED_PACKAGE}.{mod.name}"):
                _DECLARATIONS.setdefault(decl.name, decl)
        for entry_name, decl in load_entry_points(ENTRY_POINT_GROUP):
            if not (isinstance(decl, type) and issubclass(decl, TierDeclaration)):
                raise PluginError(
                    f"entry point {ENTRY_POINT_GROUP}:{entry_name} is no TierDeclaration subclass "
                    f"({decl!r}); fix or uninstall the package that declares it"
                )
            if decl.name in _DECLARATIONS and _DECLARATIONS[decl.name] is not decl:
                raise PluginError(
                    f"entry point {ENTRY_POINT_GROUP}:{entry_name} declares tier "
                    f"'{decl.name}', a name "
                    "already taken; rename the tier or uninstall the package that declares it"
                )
            register(decl)
    return _DECLARATIONS


def declaration(name: str) -> type[TierDeclaration]:
    """The declaration of the tier named `name` (no implementation imported)."""
    try:
        return _discover()[name]
    except KeyError:
        raise KeyError(f"no tier named '{name}'; known: {', '.join(tier_names())}") from None


def tier_class(name: str) -> type[TierDeclaration]:
    """The implementation of the tier named `name`, imported on first use: a subclass of its
    declaration (what a sweep instantiates: `iomatrix.tiers.base.tier_implementation` gives it as
    the Tier it is)."""
    decl = declaration(name)
    impl = _IMPLEMENTATIONS.get(name)
    if impl is None:
        if not decl.implementation:
            raise TypeError(
                f"tier '{name}' ({decl.__module__}.{decl.__name__}) names no implementation"
            )
        impl = load_object(decl.implementation)
        if not (isinstance(impl, type) and issubclass(impl, decl)):
            raise TypeError(
                f"tier '{name}': {decl.implementation} is no subclass of its declaration "
                f"{decl.__name__}"
            )
        _IMPLEMENTATIONS[name] = impl
    return impl


def tier_classes() -> list[type[TierDeclaration]]:
    """Registered tiers' declarations, reference tier first (the order reports list them in)."""
    return sorted(_discover().values(), key=lambda c: (c.order, c.name))


declarations = tier_classes


def tier_names() -> list[str]:
    """Registered tier names, reference tier first."""
    return [c.name for c in tier_classes()]


def known_tier(name: str) -> type[TierDeclaration] | None:
    """The tier named `name`, or None for a name this version does not know (an old database's
    tier)."""
    return _discover().get(name)


def reference_tier() -> type[TierDeclaration]:
    """The tier other tiers' cells are divided by (bare metal)."""
    return next(c for c in tier_classes() if c.is_reference)


def workload_owner(workload: Workload) -> type[TierDeclaration] | None:
    """The tier whose own workload this is (its kind is the tier's `workload_kind`), or None for a
    workload the tiers share."""
    return next(
        (
            c
            for c in tier_classes()
            if c.workload_kind is not None and c.workload_kind == workload.kind
        ),
        None,
    )


def tier_workload(name: str) -> Workload | None:
    """The workload named `name` that a tier makes as its own (its declaration's `workload_named`),
    or None."""
    return next((w for c in tier_classes() if (w := c.workload_named(name)) is not None), None)


def listed_tier_workloads() -> dict[str, Workload]:
    """The tiers' own workloads their declarations list (`own_workloads`), by name; not those made
    from a name (tiles-N)."""
    return {w.name: w for c in tier_classes() for w in c.own_workloads}


def workload_prune_reason(cell: Cell, workload: Workload) -> str | None:
    """Why the cell's tier does not run `workload` (its own rules, and workloads owned by another
    tier)."""
    owner = workload_owner(workload)
    return declaration(cell.tier).workload_prune_reason(
        cell, workload, owner.name if owner else None
    )


def tier_order(name: str) -> int:
    """Sort key for reports; unknown names (an old database's tier) sort last."""
    cls = _discover().get(name)
    return cls.order if cls else 1000


def is_reference(name: str) -> bool:
    cls = _discover().get(name)
    return bool(cls and cls.is_reference)


def page_cache_method(w: Workload, *, tier: str, cache: str, caches_dropped: bool) -> str:
    """How the page cache was kept out of a read measurement (recorded per run); the tier words its
    part (Tier.page_cache_wording)."""
    if not w.reads:
        return "n/a (no reads measured)"
    dropped = "host caches dropped before the run" if caches_dropped else "host caches NOT dropped"
    return f"{declaration(tier).page_cache_wording(cache)}; {dropped}"
