"""The verdict rule: trials of one configuration → what it keeps, compared with QEMU's
documentation.

Pure functions. A trial's evidence is the number of acknowledged records it lost (per situation) and
whether the guest filesystem checked clean. The rule, per situation (power loss, QEMU crash):

* ``kept``: no trial lost an acknowledged record: "acknowledged writes kept in N/N cuts".
* ``LOST``: at least one trial did: "LOST acknowledged writes in k/N cuts (up to M records)".

A configuration is called **safe** for a situation only when every trial kept every acknowledged
record *and* QEMU's documentation does not say it drops flushes: one loss in any trial is never safe
(no false "safe"), and a configuration documented as unsafe is not promoted to safe because N cuts
happened not to catch it. Where measurement and documentation disagree,
:attr:`SituationVerdict.disagreement` says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from iomatrix.domain import CACHE, CacheMode, Modifier, SafetyLevel, safety_level

POWER_LOSS = "power_loss"
QEMU_CRASH = "qemu_crash"
# Metric prefix → the situation's name in reports (recommend.SITUATIONS spells the same situations).
SITUATION_NAMES = {POWER_LOSS: "host crash or power loss", QEMU_CRASH: "QEMU crash"}
SHORT_NAMES = {POWER_LOSS: "power loss", QEMU_CRASH: "QEMU crash"}
# On an iSCSI backing the power-loss disk is a LUN whose target loses power
# (tiers/durability_target.py): the situation is the target's, not this host's (recommend's risk
# lines spell it the same).
TARGET_POWER_LOSS = "iSCSI target power loss"
TARGET_SHORT_NAME = "target power loss"
# On a Ceph RBD backing both disks are RBD images and the cut is a QEMU crash only: the writes
# librbd's cache holds (memory in the QEMU process) are lost, the OSDs keep running. A host power
# loss is not measured there (it could also lose what sits in the kernel's socket buffers), so an
# RBD trial has no power-loss evidence.
RBD_SHORT_NAME = "Ceph client crash"
# The durability workloads and the guest filesystem each puts its file streams on.
WORKLOAD_FS = {"durability": "ext4", "durability-xfs": "xfs"}


@dataclass(frozen=True)
class LibrbdCache:
    """librbd's cache settings of an RBD disk (ceph.conf `rbd cache policy`, `rbd cache writethrough
    until flush`), as the trials had them."""

    policy: str  # writeback, writethrough, writearound
    writethrough_until_flush: str  # on, off

    def holds_acked_writes(self, cache: str) -> bool:
        """Whether librbd may acknowledge a write the guest flushed before the OSDs have it, under
        QEMU `cache`.

        QEMU turns librbd's cache off for cache.direct=on (block/rbd.c). A flush that reaches librbd
        writes its dirty data out (writeback: ObjectCacher) or waits for the writes in flight
        (writearound: WriteAroundObjectDispatch) before it completes. Only when QEMU drops the
        guest's flushes (cache.no-flush, cache=unsafe) can a flushed write stay in librbd: with a
        policy that acknowledges early (writeback, writearound), and only with
        writethrough-until-flush off, since librbd stays writethrough until it sees a flush, which
        it then never does."""
        sem = CACHE[CacheMode(cache)]
        return (
            not sem.direct
            and sem.no_flush
            and self.policy in ("writeback", "writearound")
            and self.writethrough_until_flush == "off"
        )


def documented_keeps_acked(
    situation: str,
    cache: str,
    modifier: str = Modifier.NONE,
    lun_write_cache: str | None = None,
    librbd: LibrbdCache | None = None,
) -> bool:
    """Whether QEMU's documented semantics (domain.CACHE) promise that writes the guest flushed
    survive.

    Power loss: every mode that honours flushes (all but cache=unsafe, and none under eatmydata).
    QEMU crash: every mode, since a completed write has been handed to the host kernel (or is
    flushed). Target power loss (`lun_write_cache` given: the disk is an iSCSI LUN): lost only when
    the LUN's write cache is on *and* QEMU does not send the guest's flushes (cache.no-flush); with
    the cache off the target syncs every write itself, and eatmydata around QEMU cannot drop an
    iSCSI flush (it is a SCSI command, not an fsync). Ceph client crash (`librbd` given: the disk is
    an RBD image, the situation a QEMU crash): lost only when librbd's cache holds flushed writes
    (:meth:`LibrbdCache.holds_acked_writes`); eatmydata cannot drop a librbd flush either."""
    if librbd is not None:
        return not librbd.holds_acked_writes(cache)
    if situation == POWER_LOSS and lun_write_cache is not None:
        return not (lun_write_cache == "on" and CACHE[CacheMode(cache)].no_flush)
    if situation == POWER_LOSS:
        return safety_level(cache, modifier) != SafetyLevel.UNSAFE
    if situation == QEMU_CRASH:
        return cache in {c.value for c in CacheMode}
    raise ValueError(f"unknown situation {situation!r}")


@dataclass(frozen=True)
class SituationVerdict:
    situation: str  # POWER_LOSS or QEMU_CRASH
    trials: int
    lost_trials: int  # trials that lost at least one acknowledged record
    max_lost: int  # most acknowledged records lost in one trial
    documented_keeps: bool
    on_target: bool = False  # the power-loss disk was an iSCSI LUN: the power lost was the target's
    # the disks were RBD images: the QEMU crash was a Ceph client's (librbd's cache lost)
    on_rbd: bool = False

    @property
    def name(self) -> str:
        if self.on_target and self.situation == POWER_LOSS:
            return TARGET_SHORT_NAME
        if self.on_rbd and self.situation == QEMU_CRASH:
            return RBD_SHORT_NAME
        return SHORT_NAMES[self.situation]

    @property
    def measured_keeps(self) -> bool:
        return self.trials > 0 and self.lost_trials == 0

    @property
    def safe(self) -> bool:
        return self.measured_keeps and self.documented_keeps

    @property
    def text(self) -> str:
        name = self.name
        if self.trials == 0:
            return f"{name}: no completed trial"
        cuts = "cut" if self.trials == 1 else "cuts"
        if self.lost_trials:
            rec = "record" if self.max_lost == 1 else "records"
            text = (
                f"{name}: LOST acknowledged writes in {self.lost_trials}/{self.trials} {cuts} "
                f"(up to {self.max_lost} {rec})"
            )
            if self.situation == POWER_LOSS and not self.documented_keeps and not self.on_target:
                # The lab drops this configuration's flushes below QEMU (they would never reach
                # stable storage on a real host, but QEMU's NBD client still sends them): that it
                # loses is built in, how much it loses and whether the filesystem survives are
                # measured.
                text += "; flushes dropped below QEMU as on a real host, the amount lost measured"
            return text
        return f"{name}: acknowledged writes kept in {self.trials}/{self.trials} {cuts}"

    @property
    def disagreement(self) -> str | None:
        """A loud line when the measurement contradicts QEMU's documentation, else None."""
        if self.trials == 0:
            return None
        if self.documented_keeps and self.lost_trials:
            return (
                f"DISAGREES WITH QEMU'S DOCUMENTATION: {self.name} should keep flushed "
                f"writes, but {self.lost_trials}/{self.trials} cuts lost acknowledged writes"
            )
        if not self.documented_keeps and not self.lost_trials:
            return (
                f"documented as losing flushed writes on {self.name}, but no loss was "
                f"caught in {self.trials} cuts (not called safe)"
            )
        return None


def situation_verdict(
    situation: str,
    acked_lost: Sequence[float],
    cache: str,
    modifier: str = Modifier.NONE,
    lun_write_cache: str | None = None,
    librbd: LibrbdCache | None = None,
) -> SituationVerdict:
    """`lun_write_cache`: the LUN's write cache when the power-loss disk was an iSCSI LUN, else
    None. `librbd`: librbd's cache settings when the disks were RBD images, else None."""
    lost = [int(v) for v in acked_lost]
    return SituationVerdict(
        situation,
        len(lost),
        sum(1 for v in lost if v > 0),
        max(lost, default=0),
        documented_keeps_acked(situation, cache, modifier, lun_write_cache, librbd),
        on_target=lun_write_cache is not None,
        on_rbd=librbd is not None,
    )


@dataclass(frozen=True)
class FsVerdict:
    trials: int
    unclean: int
    fs: str = ""  # the guest filesystem (ext4, xfs), when known

    @property
    def text(self) -> str:
        name = f"guest filesystem ({self.fs})" if self.fs else "guest filesystem"
        if self.trials == 0:
            return f"{name}: no completed trial"
        if self.unclean:
            return (
                f"{name}: NOT clean after {self.unclean}/{self.trials} cuts (after journal replay)"
            )
        return f"{name}: clean after {self.trials}/{self.trials} cuts (after journal replay)"


@dataclass(frozen=True)
class ConfigVerdict:
    """Every verdict of one configuration."""

    situations: dict[str, SituationVerdict]
    fs: FsVerdict  # over every trial (one guest filesystem, or several pooled)
    per_fs: tuple[FsVerdict, ...] = ()  # one per guest filesystem, when the trials used several

    def fs_texts(self) -> list[str]:
        """The filesystem verdict: one line per guest filesystem (a clean ext4 never hides an
        unclean xfs)."""
        return [f.text for f in self.per_fs] if len(self.per_fs) > 1 else [self.fs.text]

    def measured(self) -> list[SituationVerdict]:
        """The situations the trials measured: all of them, except that a situation with no trial is
        left out when another has trials (an RBD trial has no power-loss evidence:
        durability.verdict.RBD_SHORT_NAME)."""
        some = [v for v in self.situations.values() if v.trials]
        return some or list(self.situations.values())

    def lines(self) -> list[str]:
        out = []
        for v in self.measured():
            out.append(v.text)
            if v.disagreement:
                out.append("  " + v.disagreement)
        out += self.fs_texts()
        return out


def _fs_verdict(clean: Sequence[float], fs: str = "") -> FsVerdict:
    return FsVerdict(len(clean), sum(1 for v in clean if v < 1), fs)


def config_verdict(
    samples: Mapping[str, Sequence[float]],
    cache: str,
    modifier: str = Modifier.NONE,
    fs_clean: Mapping[str, Sequence[float]] | None = None,
    lun_write_cache: str | None = None,
    librbd: LibrbdCache | None = None,
) -> ConfigVerdict:
    """The verdicts of one configuration from its trials' metrics (`samples[metric]` = one value per
    ok trial): ``power_loss.acked_lost``, ``qemu_crash.acked_lost`` and ``fs.clean``. `fs_clean`:
    the same ``fs.clean`` values per guest filesystem, when known (then each filesystem gets its own
    verdict). `lun_write_cache`: set when the trials cut an iSCSI target (its LUN's write cache),
    None on a local disk; `librbd`: set when the disks were RBD images (librbd's cache settings)."""
    situations = {
        s: situation_verdict(
            s, samples.get(f"{s}.acked_lost", []), cache, modifier, lun_write_cache, librbd
        )
        for s in (POWER_LOSS, QEMU_CRASH)
    }
    per_fs = tuple(_fs_verdict(v, fs) for fs, v in sorted((fs_clean or {}).items()) if v)
    name = per_fs[0].fs if len(per_fs) == 1 else ""
    return ConfigVerdict(situations, _fs_verdict(list(samples.get("fs.clean", [])), name), per_fs)
