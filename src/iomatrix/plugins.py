"""Extension points: what installed packages add to iomatrix through entry points.

A package adds tiers (group ``iomatrix.tiers``) or axes (group ``iomatrix.axes``) by naming them in
its
metadata, as pyperf's hooks and asv's plugins do::

    [project.entry-points."iomatrix.tiers"]
    mytier = "mypackage.tier:MyTierDeclaration"

    [project.entry-points."iomatrix.axes"]
    locking = "mypackage.axes:LOCKING"

The registry of each kind calls :func:`load_entry_points` once, when it is first asked, and checks
what it gets (``iomatrix.axes``: an :class:`iomatrix.domain.axes.Axis` or an iterable of them; see
docs/design.md). A name given as ``"module:attribute"`` elsewhere (a tier declaration naming its
implementation) is loaded by :func:`load_object`: only then is that module imported."""

from __future__ import annotations

import importlib
from typing import Any

from iomatrix.errors import UserError


class PluginError(UserError, ImportError):
    """An entry point that cannot be loaded: the message names it and the package that declares it.
    A mistake the user can fix (reinstall or uninstall that package), so the CLI prints it as one
    line, not as an internal error with a crash log."""


def load_entry_points(group: str) -> list[tuple[str, Any]]:
    """(entry point name, loaded object) for every installed entry point of `group`, sorted by name
    (the order does not depend on the order packages were installed in). A package whose object
    cannot be imported is reported by a PluginError naming it, not as a traceback."""
    # Imported here, not at the top: importlib.metadata costs ~0.05-0.09 s, and only a registry's
    # first use needs it (never `iomatrix --help`).
    from importlib.metadata import entry_points

    found = []
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        try:
            found.append((ep.name, ep.load()))
        # an installed package's import error: named, with where it comes from
        except Exception as err:
            dist = ep.dist.name if ep.dist is not None else "an installed package"
            # iomatrix's own refusal (an axis the package registers writes another's key) says what
            # is wrong.
            why = err.one_line() if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
            raise PluginError(
                f"entry point {group}:{ep.name} = {ep.value} (from {dist}) cannot be loaded: "
                f"{why}; reinstall or uninstall that package"
            ) from None
    return found


def load_object(reference: str) -> Any:
    """The object named ``"package.module:attribute"`` (an entry point's value syntax), importing
    the module."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"not a 'module:attribute' reference: {reference!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj
