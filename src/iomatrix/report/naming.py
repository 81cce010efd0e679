"""Names of cells that show what differs: a sweep that varies only format and cache calls its cells
`raw · writeback`, and says once, above the table, what every cell shares (`preallocation=off
aio=threads …`).

Pure functions over cell labels (`CellWorkload.label()`: `axis=value` pairs in registry order). The
axes come from the axis registry (`iomatrix.domain.axes`), so a new axis is named like the others.
The full label stays in JSON and CSV; only terminal, Markdown and HTML views use the short names.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import axes as axis_registry

SEPARATOR = " · "
# Values that say nothing without their axis ("none" could be a cache mode or a modifier; "off" a
# preallocation; "whole-image" an L2 cache, but read alone it could be a preallocation or a discard
# policy).
_BARE_VALUES = frozenset(
    {"none", "off", "on", "full", "metadata", "falloc", "-", "default", "whole-image", "null"}
)


def parse_label(label: str) -> dict[str, str]:
    """'format=raw cache=none' → {'format': 'raw', 'cache': 'none'} (words without '=' are
    ignored)."""
    return dict(p.split("=", 1) for p in label.split() if "=" in p)


def without_axis(label: str, axis: str) -> str:
    """`label` without its `axis=value` pair: 'format=raw clients=2 cache=none', 'clients' →
    'format=raw cache=none'."""
    return " ".join(p for p in label.split(" ") if p and not p.startswith(f"{axis}="))


def names_without(labels: Iterable[str], axis: str) -> CellNames:
    """cell_names of `labels` read without `axis` (a condition the cells were measured in, not a
    setting that tells configurations apart: the clients sharing a backend, issue 70), each full
    label named as its configuration is: 'cache=none clients=1' and 'cache=none clients=4' both
    'cache=none', and `rename` puts that name in place of either."""
    unique = list(dict.fromkeys(labels))
    short = cell_names(without_axis(lab, axis) for lab in unique)
    names = {**{lab: short.of(without_axis(lab, axis)) for lab in unique}, **short.names}
    return CellNames(names, short.varying, short.constant)


def _order(name: str) -> int:
    known = axis_registry.names()
    return known.index(name) if name in known else len(known)


@dataclass(frozen=True)
class CellNames:
    """The short name of each label, the axes that vary (registry order) and what every label
    shares."""

    names: Mapping[str, str]
    varying: tuple[str, ...]
    constant: tuple[tuple[str, str], ...]

    def of(self, label: str) -> str:
        return self.names.get(label, label)

    def rename(self, text: str) -> str:
        """`text` with every full label in it replaced by its short name (longest first: no label is
        a part of another's replacement)."""
        for full, short in sorted(self.names.items(), key=lambda kv: -len(kv[0])):
            if full != short:
                text = text.replace(full, short)
        return text

    def constant_text(self) -> str:
        """'preallocation=off aio=threads' — the axes every cell shares, stated once ('' when none
        is shared)."""
        return " ".join(f"{a}={v}" for a, v in self.constant)


def cell_names(labels: Iterable[str]) -> CellNames:
    """Short names for `labels`: only the axes whose values differ among them, by value where the
    value alone is unambiguous (`raw`, `writeback`) and as `axis=value` otherwise (`cache=none`).
    One label, or labels that differ in nothing, keep their full text (there is nothing shorter that
    still says what the cell is)."""
    unique = list(dict.fromkeys(labels))
    parsed = _with_defaults({lab: parse_label(lab) for lab in unique})
    keys = sorted({k for p in parsed.values() for k in p}, key=_order)
    values = {k: [p.get(k) for p in parsed.values()] for k in keys}
    # An axis some labels do not name (bare metal has no format) varies only if the labels naming it
    # differ.
    named = {k: {v for v in values[k] if v is not None} for k in keys}
    varying = tuple(k for k in keys if len(named[k]) > 1)
    constant = tuple((k, next(iter(named[k]))) for k in keys if k not in varying)
    if len(unique) < 2 or not varying:
        return CellNames({lab: lab for lab in unique}, varying, ())
    seen_in = _axes_of_values(values, varying)
    in_full = _axes_in_full(named, varying, seen_in)
    names = {lab: _short(parsed[lab], varying, in_full) for lab in unique}
    return CellNames(names, varying, constant)


def _with_defaults(parsed: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The parsed labels with each later axis (named in a label only when set away from its default)
    read as its default in the labels that leave it out but have the same shape (the same
    first-release axes, the same backing) as a label naming it: a cell of the same tier on the same
    backing, where the axis applies. Without this, the block layer's cells with detect_zeroes=on and
    those at the default off would look as if only the first had the axis, and the axis would read
    as shared by every cell ("detect_zeroes=on") instead of as what tells them apart."""

    def shape(p: Mapping[str, str]) -> tuple[frozenset[str], str | None]:
        # the backing too: an axis of one protocol (lun_write_cache on iSCSI) is no default of an
        # NFS cell's
        return frozenset(k for k in p if k in first), p.get("backing")

    first = {a.name for a in axis_registry.axes() if a.always_named}
    later = {a.name: a.default for a in axis_registry.axes() if not a.always_named}
    named_in = {k: {shape(p) for p in parsed.values() if k in p} for k in later}
    out = {}
    for lab, p in parsed.items():
        fill = {
            k: default for k, default in later.items() if k not in p and shape(p) in named_in[k]
        }
        out[lab] = {**p, **fill} if fill else p
    return out


def _axes_of_values(
    values: Mapping[str, Sequence[str | None]], varying: Sequence[str]
) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for k in varying:
        for v in values[k]:
            if v is not None:
                out.setdefault(v, set()).add(k)
    return out


def _axes_in_full(
    named: Mapping[str, set[str]], varying: Sequence[str], seen_in: Mapping[str, set[str]]
) -> set[str]:
    """The axes named in full for every value: one of whose words another axis shares, so that its
    cells read alike ('rbd_cache_policy=writeback', as cache has writeback too, beside
    'rbd_cache_policy=writearound', not beside a bare 'writearound'; issue 70)."""
    return {
        k for k in varying if any(_may_be_bare(v) and len(seen_in.get(v, ())) > 1 for v in named[k])
    }


def _may_be_bare(value: str) -> bool:
    """Whether `value` could stand without its axis at all: not a word that says nothing alone
    ("none", "off", "null"), nor a number ("2": clients? queues?)."""
    return value not in _BARE_VALUES and not value.isdigit()


def _short(axes: Mapping[str, str], varying: Sequence[str], in_full: Collection[str]) -> str:
    # (a value another axis shares is never bare: its axis is in `in_full`)
    parts = []
    for k in varying:
        v = axes.get(k)
        if v is None:
            continue
        bare = k not in in_full and _may_be_bare(v)
        parts.append(v if bare else f"{k}={v}")
    return SEPARATOR.join(parts) or "(all axes shared)"
