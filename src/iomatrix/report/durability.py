"""Measured durability verdicts from the store, for `recommend`, the report and the end of `iomatrix
run`.

The verdict rule itself is pure (:mod:`iomatrix.durability.verdict`); this module only collects each
durability configuration's trials from every sweep in the database and finds the measured
configuration that matches a recommended cell. A configuration measured in several sweeps has its
trials pooled: a loss in any of them counts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from iomatrix.domain import NA, Modifier
from iomatrix.domain import axes as axis_registry
from iomatrix.durability.verdict import (
    POWER_LOSS,
    SITUATION_NAMES,
    TARGET_POWER_LOSS,
    WORKLOAD_FS,
    ConfigVerdict,
    LibrbdCache,
    config_verdict,
)
from iomatrix.protocol_registry import network_protocol, protocol, protocols
from iomatrix.protocols.base import CUT_CLIENT_CRASH, CUT_TARGET_POWER
from iomatrix.report.query import CellWorkload, cell_workloads
from iomatrix.store import Store
from iomatrix.tiers import workload_owner
from iomatrix.workloads import listed

# Axes that identify a measured configuration; the first three must match a recommended cell, the
# rest are matched when they can be (a verdict measured with aio=threads still speaks for io_uring,
# and says so).
MUST_MATCH = ("format", "cache", "modifier")
SHOULD_MATCH = ("preallocation", "aio", "bus")
# Where the trials cut (the storage of the cell's backing): a local disk, an iSCSI target (the LUN's
# type and write cache must match too) or Ceph RBD images (librbd's cache policy and
# writethrough-until-flush must match). A verdict of one never speaks for another: a target power
# loss is not a host's, a librbd cache is not a page cache.
LOCAL = "local"
STORAGE_MUST_MATCH = {
    p.name: p.durability_must_match for p in protocols() if p.durability_must_match
}


def storage_of(backing: Mapping[str, Any]) -> str:
    """The storage a cell's trials (or a recommended cell) are on, from its stored backing."""
    kind = backing.get("backing_type")
    return kind if kind in STORAGE_MUST_MATCH else LOCAL


EVIDENCE = ("power_loss.acked_lost", "qemu_crash.acked_lost", "fs.clean")


@dataclass
class MeasuredConfig:
    axes: dict[str, str]
    storage: str = LOCAL
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    sweeps: set[int] = field(default_factory=set)
    failed: int = 0
    # per guest filesystem
    fs_clean: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def verdict(self) -> ConfigVerdict:
        network = network_protocol(self.storage)
        cut = None if network is None else network.durability_cut
        # A client crash is decided by the client's cache (librbd's), a target power loss by the
        # target's.
        librbd = (
            LibrbdCache(*(_target_value(self.axes, a) for a in STORAGE_MUST_MATCH[self.storage]))
            if cut == CUT_CLIENT_CRASH
            else None
        )
        return config_verdict(
            self.samples,
            self.axes["cache"],
            self.axes.get("modifier", Modifier.NONE),
            self.fs_clean,
            _target_value(self.axes, "lun_write_cache") if cut == CUT_TARGET_POWER else None,
            librbd,
        )

    def label(self) -> str:
        text = " ".join(
            f"{a}={self.axes[a]}"
            for a in (*MUST_MATCH, *SHOULD_MATCH)
            if not (a == "modifier" and self.axes[a] == Modifier.NONE)
        )
        if self.storage in STORAGE_MUST_MATCH:
            text += f" on {protocol(self.storage).title} " + " ".join(
                f"{a}={_target_value(self.axes, a)}" for a in STORAGE_MUST_MATCH[self.storage]
            )
        filesystems = sorted(fs for fs, v in self.fs_clean.items() if v)
        return f"{text} fs={','.join(filesystems)}" if filesystems else text


def _trial_tier(workload: str) -> str | None:
    """The tier whose own workload `workload` is, when that tier's trials are verdicts (the
    durability tier's; tiers are asked through the registry, not by name); None for every other
    workload."""
    w = listed(workload)
    owner = workload_owner(w) if w is not None else None
    return owner.name if owner is not None and owner.verdicts else None


def _is_trial(cw: CellWorkload) -> bool:
    """A durability trial: a cell × workload of the tier whose own workload it is, when that tier's
    trials are verdicts."""
    tier = _trial_tier(cw.workload)
    return tier is not None and cw.axes.get("tier") == tier


def _sweeps_with_trials(store: Store) -> set[int]:
    """The sweeps some run of which ran a trial workload: a sweep without one holds no trial, and
    its cells need not be read (a fleet's store holds hundreds of sweeps, few or none of them
    durability sweeps: issue 52). One query for every sweep, not one a sweep."""
    return {
        sid
        for sid, workloads in store.workloads_run().items()
        if any(_trial_tier(w) is not None for w in workloads)
    }


def _target_value(axes: Mapping[str, str], axis: str) -> str:
    """A LUN (or librbd cache) setting as the storage had it: a plan that does not list the axis
    leaves the server's (Ceph's) default."""
    value = axes.get(axis, NA)
    return axis_registry.get(axis).default if value == NA else value


def _key(axes: Mapping[str, str], storage: str) -> tuple[str, ...]:
    target = tuple(_target_value(axes, a) for a in STORAGE_MUST_MATCH.get(storage, ()))
    return (
        storage,
        *(axes.get(a, NA) for a in MUST_MATCH),
        *target,
        *(axes.get(a, NA) for a in SHOULD_MATCH),
    )


def _must_match(mc: MeasuredConfig, axes: Mapping[str, str], storage: str) -> bool:
    target = STORAGE_MUST_MATCH.get(storage, ())
    return (
        mc.storage == storage
        and all(mc.axes.get(a) == axes.get(a) for a in MUST_MATCH)
        and all(_target_value(mc.axes, a) == _target_value(axes, a) for a in target)
    )


@dataclass
class MeasuredIndex:
    """Every durability configuration measured in a database."""

    # key: axes + guest filesystem
    configs: dict[tuple[str, ...], MeasuredConfig] = field(default_factory=dict)

    @classmethod
    def from_store(
        cls, store: Store, sweep_ids: list[int] | None = None, workload: str | None = None
    ) -> MeasuredIndex:
        """`workload`: only that durability workload's trials (one guest filesystem), else all of
        them."""
        index = cls()
        with_trials = _sweeps_with_trials(store)
        for sid in sweep_ids if sweep_ids is not None else store.sweep_ids():
            if sid not in with_trials:
                continue
            for cw in cell_workloads(store, sid):
                if not _is_trial(cw) or (workload is not None and cw.workload != workload):
                    continue
                fs = WORKLOAD_FS.get(cw.workload, "ext4")
                storage = storage_of(cw.backing)
                mc = index.configs.setdefault(
                    (*_key(cw.axes, storage), fs), MeasuredConfig(dict(cw.axes), storage)
                )
                mc.sweeps.add(sid)
                mc.failed += cw.failed
                for m in EVIDENCE:
                    mc.samples[m].extend(cw.samples.get(m, []))
                mc.fs_clean[fs].extend(cw.samples.get("fs.clean", []))
        return index

    def for_axes(
        self, axes: Mapping[str, str], storage: str = LOCAL
    ) -> tuple[MeasuredConfig | None, list[str]]:
        """The measured configuration for a cell's axes on `storage`, and the axes in which it
        differs from it.

        An exact match wins (its trials on every guest filesystem pooled, each filesystem keeping
        its own verdict); otherwise the trials of every configuration on the same storage with the
        same format, cache mode and modifier (and on iSCSI the same LUN type and write cache, on RBD
        the same librbd cache policy and writethrough-until-flush) are pooled (any loss in any of
        them counts)."""
        key = _key(axes, storage)
        exact = [mc for k, mc in self.configs.items() if k[: len(key)] == key]
        if len(exact) == 1:
            return exact[0], []
        same = exact or [mc for mc in self.configs.values() if _must_match(mc, axes, storage)]
        if not same:
            return None, []
        pooled = MeasuredConfig({**same[0].axes}, storage)
        differs: set[str] = set()
        for mc in same:
            pooled.sweeps |= mc.sweeps
            pooled.failed += mc.failed
            for m, vals in mc.samples.items():
                pooled.samples[m].extend(vals)
            for fs, vals in mc.fs_clean.items():
                pooled.fs_clean[fs].extend(vals)
            differs |= {a for a in SHOULD_MATCH if mc.axes.get(a) != axes.get(a)}
        return pooled, sorted(differs)


def measured_statements(
    index: MeasuredIndex | None, axes: Mapping[str, str], storage: str = LOCAL
) -> dict[str, str]:
    """Situation (recommend.SITUATIONS spelling, or TARGET_POWER_LOSS on iSCSI) → measured
    statement, for the cell with `axes` on `storage`."""
    if index is None:
        return {}
    mc, differs = index.for_axes(axes, storage)
    if mc is None:
        return {}
    v = mc.verdict()
    where = (
        f"durability sweep{'s' if len(mc.sweeps) > 1 else ''} "
        f"{', '.join(map(str, sorted(mc.sweeps)))}"
    )
    if differs:
        where += f"; measured with other {', '.join(differs)}"
    out: dict[str, str] = {}
    measured = [sv for sv in v.measured() if sv.trials]
    for sv in measured:
        situation = sv.situation
        text = sv.text
        # the filesystem verdict goes with the first situation cut (power loss, if any)
        if sv is measured[0]:
            text += "; " + "; ".join(v.fs_texts())
        if sv.disagreement:
            text += f" — {sv.disagreement}"
        name = (
            TARGET_POWER_LOSS
            if sv.on_target and situation == POWER_LOSS
            else SITUATION_NAMES[situation]
        )
        out[name] = f"{text} ({where})"
    return out


def sweep_verdict_lines(store: Store, sweep_id: int, workload: str | None = None) -> list[str]:
    """One block per durability configuration (and guest filesystem) of a sweep: its verdicts,
    disagreements first-class. `workload`: only that durability workload's blocks."""
    index = MeasuredIndex.from_store(store, [sweep_id], workload)
    lines: list[str] = []
    for mc in sorted(index.configs.values(), key=lambda m: m.label()):
        v = mc.verdict()
        failed = (
            f" ({mc.failed} failed trial{'s' if mc.failed != 1 else ''}: not verdicts)"
            if mc.failed
            else ""
        )
        lines.append(f"{mc.label()}{failed}")
        lines += [f"  {line}" for line in v.lines()]
    disagreements = sum(
        1
        for mc in index.configs.values()
        for sv in mc.verdict().situations.values()
        if sv.disagreement and "DISAGREES" in sv.disagreement
    )
    if disagreements:
        lines.append(
            f"!! {disagreements} measured verdict(s) DISAGREE with QEMU's documented "
            "cache semantics "
            "(see the lines marked DISAGREES)"
        )
    return lines


def _losses(mc: MeasuredConfig) -> tuple[list[str], bool, bool]:
    """One configuration's losses ("<situation> k/N cuts, up to M records"), whether it has a
    completed trial, and whether it kept everything where QEMU's documentation says it may lose
    (then it is not called safe)."""
    measured = [sv for sv in mc.verdict().measured() if sv.trials]
    losses = [
        f"{sv.name} {sv.lost_trials}/{sv.trials} cuts, up to {sv.max_lost} records"
        for sv in measured
        if sv.lost_trials
    ]
    return losses, bool(measured), not losses and any(not sv.documented_keeps for sv in measured)


def sweep_verdict_summary(store: Store, sweep_id: int, workload: str | None = None) -> str:
    """The verdicts of a sweep in one sentence, for a short answer: how many configurations were
    cut, which lost acknowledged writes (where, in how many cuts), how many kept them, and any
    disagreement with QEMU's documentation; the verdicts per configuration are
    :func:`sweep_verdict_lines`."""
    index = MeasuredIndex.from_store(store, [sweep_id], workload)
    configs = sorted(index.configs.values(), key=lambda m: m.label())
    if not configs:
        return "no completed trial"
    judged = [(mc, *_losses(mc)) for mc in configs]
    lost = [f"{mc.label()} ({'; '.join(losses)})" for mc, losses, _, _ in judged if losses]
    kept = sum(1 for _, losses, measured, _ in judged if measured and not losses)
    uncaught = sum(1 for *_, uncaught in judged if uncaught)
    unclear = sum(1 for _, _, measured, _ in judged if not measured)
    disagree = sum(
        1
        for mc in configs
        for sv in mc.verdict().situations.values()
        if sv.disagreement and "DISAGREES" in sv.disagreement
    )
    return _summary_text(len(configs), lost, kept, uncaught, unclear, disagree)


def _summary_text(
    configs: int, lost: list[str], kept: int, uncaught: int, unclear: int, disagree: int
) -> str:
    parts = [
        f"{configs} configuration{'s' if configs != 1 else ''} cut",
        f"LOST acknowledged writes: {', '.join(lost)}"
        if lost
        else "none lost an acknowledged write",
    ]
    if lost and kept:
        parts.append(f"{kept} kept every acknowledged write")
    if uncaught:
        parts.append(
            f"{uncaught} of them documented as losing flushed writes, no loss caught "
            "(not called safe)"
        )
    if unclear:
        parts.append(f"{unclear} without a completed trial")
    if disagree:
        parts.append(f"{disagree} verdict(s) DISAGREE with QEMU's documentation")
    return "; ".join(parts) + " (each configuration: iomatrix recommend --detail)"
