"""Extension points: objects other installed packages offer iomatrix through entry points.

A package declares, in its own ``pyproject.toml``::

    [project.entry-points."iomatrix.axes"]
    locking = "mypkg.axes:LOCKING"

and iomatrix loads every entry point of a group with :func:`load_entry_points` (as pyperf loads its hooks and asv
its plugins). Groups: ``iomatrix.axes`` (an :class:`iomatrix.domain.axes.Axis`, or an iterable of them; see
docs/design.md, "Adding an axis").
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any


class PluginError(Exception):
    """An entry point that cannot be loaded: the message names it and the package that declares it."""


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{ep.group} entry point {ep.name!r} ({ep.value}" + (f", package {dist.name})" if dist else ")")


def load_entry_points(group: str) -> list[Any]:
    """The objects the installed packages' entry points of `group` name, loaded, in the entry points' name order
    (so the order does not depend on the order packages were installed in). A PluginError names one that fails to
    load."""
    out: list[Any] = []
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        try:
            out.append(ep.load())
        except Exception as e:  # an installed package's import error: named, with where it comes from
            raise PluginError(f"cannot load the {_origin(ep)}: {type(e).__name__}: {e}") from e
    return out
