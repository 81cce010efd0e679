"""The user's current disk configuration (`iomatrix run --current vm.xml`), stored with the plan.

`run --current` reads what the user runs today (`iomatrix.current.parse_current`: libvirt XML, QEMU
options or plain axes) and keeps it in the plan as `current`: the axes it sets, where they came from
and what was defaulted. The matrix then adds it as a cell of its own in every tier of the plan
(`matrix.current_cells`), so the recommendation's ratio to "current" is measured rather than looked
up among the swept cells. Being part of the plan, it is part of the stored plan and of its
fingerprint: re-running the same command resumes the same sweep, and a different `--current` is a
different sweep. A plan without `current` dumps exactly as before it existed.

Axes the configuration does not set take QEMU's documented default (the registry's `Axis.default`),
as `parse_current` does for the axes it reads: the cell measured is the configuration QEMU would
run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from iomatrix.domain import NA, axes
from iomatrix.vmconfig.reading import CurrentConfig, ExistingDisk

# The prefix of the reason a current cell is pruned with (stored with the sweep's pruned cells), so
# reports can tell it from the matrix's own pruned cells.
CURRENT_PRUNED = "the current configuration: "


class CurrentDisk(BaseModel):
    """Today's disk configuration as the plan stores it: the axes the user's configuration sets (any
    axis of the registry but tier and backing), where they were read and which were defaulted."""

    # built when it first validates, not at import (as backing.spec's models, issue 52)
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    axes: dict[str, str]
    source: str = ""
    defaulted: list[str] = []
    # the qcow2 L2 cache bound it sets (CurrentConfig.l2_cache_bytes)
    l2_cache_bytes: int | None = None
    notes: list[str] = []
    # The user's existing disk (CurrentConfig.disk, ExistingDisk.as_dict), for snippets that change
    # it in place; left out of the dump when absent, so a plan stored before it existed keeps its
    # fingerprint.
    disk: dict[str, str] | None = None

    @model_serializer(mode="wrap")
    def _without_absent_disk(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if out.get("disk", ...) is None:
            del out["disk"]
        return out

    @field_validator("axes")
    @classmethod
    def _known_values(cls, v: dict[str, str]) -> dict[str, str]:
        known = [a.name for a in axes.plan_axes()]
        for name, value in v.items():
            if name not in known:
                raise ValueError(
                    f"'{name}' is not an axis of a disk configuration; valid: {', '.join(known)}"
                )
            if why := axes.get(name).invalid(value):
                raise ValueError(f"{name}: {why}")
        if "cache" not in v:
            raise ValueError("a current configuration needs at least its cache mode")
        return v

    def values(self) -> dict[str, str]:
        """Every disk-configuration axis: the value given, else QEMU's default."""
        return {a.name: self.axes.get(a.name, str(a.default)) for a in axes.plan_axes()}


def from_config(cfg: CurrentConfig) -> CurrentDisk:
    """`cfg` (as parse_current read it) to store with the plan. A first-release axis it does not set
    (libvirt without <driver type=> names no format) is said to be defaulted; a later axis left out
    is at its default implicitly, as in a cell's key."""
    defaulted = list(cfg.defaulted)
    for a in axes.plan_axes():
        # (not the host-side modifier: no VM sets it)
        if a.always_named and a.tools and a.name not in cfg.axes:
            defaulted.append(f"{a.name} (not given: QEMU's default, {a.default})")
    return CurrentDisk(
        axes=dict(cfg.axes),
        source=cfg.source,
        defaulted=defaulted,
        l2_cache_bytes=cfg.l2_cache_bytes,
        notes=list(cfg.notes),
        disk=None if cfg.disk is None else cfg.disk.as_dict(),
    )


@dataclass
class MeasuredCurrent(CurrentConfig):
    """The current configuration a sweep measured (read back from its stored plan): every axis set,
    so the recommendation compares with exactly the cell the sweep ran; `pruned` holds, per tier,
    why the sweep could not run it there."""

    pruned: dict[str, str] = field(default_factory=dict)  # tier → reason

    def label(self) -> str:
        """Named like a cell: the first release's axes, and later ones set away from their
        default."""
        return " ".join(f"{a}={v}" for a, v in axes.named(self.axes) if v != NA)


def stored_current(
    plan_definition: Mapping[str, Any], pruned: Sequence[Mapping[str, str]] = ()
) -> MeasuredCurrent | None:
    """The current configuration a sweep's stored plan holds (None when it was run without
    --current), with the reasons its cells were pruned (the sweep's stored `pruned`: {"what": cell
    key, "reason": …})."""
    raw = plan_definition.get("current")
    if not isinstance(raw, Mapping):
        return None
    disk = CurrentDisk.model_validate(dict(raw))
    why: dict[str, str] = {}
    for p in pruned:
        reason = str(p.get("reason", ""))
        if reason.startswith(CURRENT_PRUNED):
            why.setdefault(
                str(p.get("what", "")).split("/", 1)[0], reason.removeprefix(CURRENT_PRUNED)
            )
    existing = None if disk.disk is None else ExistingDisk.from_dict(disk.disk)
    return MeasuredCurrent(
        axes=disk.values(),
        source=disk.source or "the sweep's --current",
        defaulted=list(disk.defaulted),
        l2_cache_bytes=disk.l2_cache_bytes,
        notes=list(disk.notes),
        disk=existing,
        pruned=why,
    )
