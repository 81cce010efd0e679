"""Matching the user's current configuration (`--current`, or the one `run --current` measured) to a
swept cell of one workload and tier, saying what the comparison had to assume."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix import domain
from iomatrix.domain import axes
from iomatrix.matrix import applying_axes
from iomatrix.report.query import CellWorkload
from iomatrix.vmconfig.reading import CurrentConfig
from iomatrix.workloads import listed


def asked_later_axes(cells: Sequence[CellWorkload], like: CellWorkload) -> list[str]:
    """The later axes (zero detection, cluster size, …) whose values differ among the cells that
    share `like`'s cache and aio: the question a workload table asks on one cache × aio cell."""
    peers = [
        c
        for c in cells
        if c.axes.get("cache") == like.axes.get("cache")
        and c.axes.get("aio") == like.axes.get("aio")
    ]
    return [
        a.name
        for a in axes.axes()
        if not a.always_named
        and not a.free_values
        and len({c.axes.get(a.name, domain.NA) for c in peers}) > 1
    ]


def matching_cell(
    cells: Sequence[CellWorkload], like: CellWorkload, **axes: str
) -> CellWorkload | None:
    """The cell with `axes` and otherwise the same axes as `like` (same tier and backing)."""
    want = {**like.axes, **axes}
    for c in cells:
        if all(c.axes[k] == v for k, v in want.items()):
            return c
    return None


# An image size no L2 cache default covers: where a workload's image is the plan's (not known here),
# an axis whose effect depends on the image's size (the L2 cache, the cluster layout) is never said
# to be unable to show.
_UNKNOWN_IMAGE_BYTES = 1 << 60


def matching_current(
    cells: Sequence[CellWorkload], like: CellWorkload, cur: CurrentConfig
) -> tuple[CellWorkload | None, list[str], list[str], str]:
    """The cell of `cells` (one workload, one tier) that runs the user's current configuration, what
    the comparison had to assume (in full, and short: "iothread=on as off (not varied)"), and why
    there is no such cell when the sweep could not have measured one.

    Axes the sweep shows as "-" (bare metal has no format or bus) cannot differ; the first release's
    axes (cache, aio, format, …) must match. A later axis the tier ran at one value for this
    workload (zero detection for reads; an IOThread where the NBD export cannot have one) is
    compared at that value and said so, with why: the workload cannot show it, or the tier did not
    vary it. An L2 cache bound that holds only part of the workload's image is between the measured
    values: no cell."""
    want: dict[str, str] = {}
    notes: list[str] = []
    short: list[str] = []
    # A later axis the configuration does not set runs at QEMU's default (it is left out as in a
    # cell's key); a first-release axis it does not name (libvirt without <driver type=>) is unknown
    # and not compared.
    given = {
        **{a.name: str(a.default) for a in axes.axes() if not a.always_named and not a.free_values},
        **cur.axes,
    }
    try:
        applying = set(applying_axes(like.axes["tier"]))
    except KeyError:  # a tier this version does not know (an old database)
        applying = set()
    for k, v in given.items():
        mine = _swept_value(like, k, applying)
        if mine is None:
            continue
        held = _held_note(cells, like, k, v, mine)
        if held is not None:
            notes.append(held[0])
            short.append(held[1])
        elif k in like.axes:
            want[k] = v
    between = _l2_between(cur, like, want)
    if between:
        return None, notes, short, between
    return matching_cell(cells, like, **want), notes, short, ""


def _swept_value(like: CellWorkload, k: str, applying: set[str]) -> str | None:
    """`like`'s value of axis `k`, None where it has none to compare (shown as "-", or not named
    and not applying to its tier); an axis the sweep does not name ran at QEMU's default."""
    axis = axes.REGISTRY.get(k)
    mine = like.axes.get(k)
    if mine is None and axis is not None and not axis.always_named and k in applying:
        mine = str(axis.default)
    return None if mine is None or mine == domain.NA else mine


def _held_note(
    cells: Sequence[CellWorkload], like: CellWorkload, k: str, v: str, mine: str
) -> tuple[str, str] | None:
    """A later axis the tier ran at one value (`mine`) where the current configuration has `v`:
    what the comparison assumes, in full and short, with why (the workload cannot show it, or the
    tier did not vary it); None when the axis is compared as it is."""
    axis = axes.REGISTRY.get(k)
    if (
        axis is None
        or axis.always_named
        or v == mine
        or len({c.axes.get(k, mine) for c in cells}) != 1
    ):
        return None
    workload = listed(like.workload)
    why = None
    if workload is not None and axis.shown_by is not None:
        why = axis.shown_by(
            {**like.axes, k: v}, workload.shape, workload.image_bytes or _UNKNOWN_IMAGE_BYTES
        )
    full = f"{k}={v} compared at {k}={mine}: " + (
        f"{like.workload} {why}"
        if why
        else f"the {like.axes['tier']} tier ran {like.workload} at {k}={mine} only"
    )
    return full, f"{k}={v} as {mine} ({'cannot show' if why else 'not varied'})"


def _l2_between(cur: CurrentConfig, like: CellWorkload, want: dict[str, str]) -> str:
    """Why no cell runs the current configuration when its L2 cache bound holds only part of the
    workload's image metadata (between the measured values); "" otherwise."""
    workload = listed(like.workload)
    if (
        cur.l2_cache_bytes is None
        or workload is None
        or not workload.image_bytes
        or want.get("l2_cache") != "whole-image"
        or axes.l2_cache_holds(cur.l2_cache_bytes, workload.image_bytes, {**like.axes, **want})
    ):
        return ""
    return (
        f"its L2 cache bound ({axes.size_words(cur.l2_cache_bytes)}) holds part of the "
        f"L2 metadata of {like.workload}'s {axes.size_words(workload.image_bytes)} image: "
        "between l2_cache=default and whole-image, neither measured"
    )


def varied_axes(cells: Sequence[CellWorkload], like: CellWorkload) -> frozenset[str]:
    """The axes the sweep measured at more than one value among `cells` (one workload, one tier)
    that apply to `like` (not "-" there): what its answer may change on the user's disk (--current,
    vmconfig/keeping.py). An axis a cell does not name ran at QEMU's default; the current
    configuration's own cell (run --current) counts, so a value the user has that was measured
    against the answer is a measured change.

    Worked example: the quick plan's blocklayer cells of rand-read-4k are raw|qcow2 ×
    none|writeback, aio=threads and bus=virtio-blk in all four: varied = {format, cache}."""
    out = set()
    for a in axes.plan_axes():
        if like.axes.get(a.name, str(a.default)) == domain.NA:
            continue
        seen = {c.axes.get(a.name, str(a.default)) for c in cells} - {domain.NA}
        if len(seen) > 1:
            out.add(a.name)
    return frozenset(out)
