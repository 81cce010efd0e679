"""What each cache mode risks on a QEMU crash and on a host power loss, per QEMU's documentation.

The semantics themselves live in the domain model (`domain.CACHE`); this module phrases them per
cell, including the host modifier. Measured durability verdicts, where a sweep has them, take
precedence in the reports."""

from __future__ import annotations

from dataclasses import dataclass

from iomatrix.domain import CACHE, CacheMode, Modifier, SafetyLevel, safety_level


@dataclass(frozen=True)
class Risk:
    qemu_crash: str
    power_loss: str
    level: SafetyLevel


def risk_of(cache: str, modifier: str = Modifier.NONE) -> Risk | None:
    """Documented risk of `cache` under `modifier`; None for a cell without a cache mode (bare
    metal's "-")."""
    if cache not in {c.value for c in CacheMode}:
        return None
    sem = CACHE[CacheMode(cache)]
    if modifier == Modifier.EATMYDATA:
        return Risk(
            sem.on_qemu_crash,
            "eatmydata drops host flushes: as unsafe as cache=unsafe (except io_uring flushes)",
            safety_level(cache, modifier),
        )
    return Risk(sem.on_qemu_crash, sem.on_power_loss, sem.level)
