"""What an equivalent decision keeps (stats/decision.py, ``keep=``): the user's current
configuration, else the tools' default, else (decided there) the simplest of the cells equivalent to
the best.

The default is the cells at QEMU's and libvirt's default cache and aio with every later axis at its
default (domain.axes.baseline_values); the first release's other axes (format, bus, backing) are the
user's storage, not a default, so several cells may be "the default" (raw and qcow2 under
cache=writeback): the simplest comes first (stats/decision.py: simplicity_key)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from iomatrix.domain import BASELINES, axes
from iomatrix.report.query import CellWorkload
from iomatrix.stats.decision import simplicity_key

# (the tier's ranked cells, the best of them) → (cell label, what it is) in order of preference to
# keep.
KeepOrder = Callable[[Sequence[CellWorkload], CellWorkload], list[tuple[str, str]]]


def default_cells(cells: Sequence[CellWorkload]) -> list[tuple[str, str]]:
    """The cells that run QEMU's (= libvirt's) defaults, simplest first, each named "QEMU's
    default"."""
    at_default = [c for c in cells if _at_default(c)]
    return [
        (c.label(), "QEMU's default")
        for c in sorted(at_default, key=lambda c: (simplicity_key(c.axes), c.label()))
    ]


def keep_defaults(cells: Sequence[CellWorkload], best: CellWorkload) -> list[tuple[str, str]]:
    """The keep order without a current configuration: the default cells."""
    return default_cells(cells)


def keep_current(
    current_of: Callable[[Sequence[CellWorkload], CellWorkload], CellWorkload | None],
) -> KeepOrder:
    """The keep order with the user's current configuration (``current_of`` finds its cell among the
    tier's, like the best): that cell, "what you run", then the default cells."""

    def order(cells: Sequence[CellWorkload], best: CellWorkload) -> list[tuple[str, str]]:
        mine = current_of(cells, best)
        return ([(mine.label(), "what you run")] if mine is not None else []) + default_cells(cells)

    return order


def _at_default(c: CellWorkload) -> bool:
    twin = axes.baseline_values(c.axes, BASELINES[0])
    return all(str(v) == str(c.axes.get(k)) for k, v in twin.items())
