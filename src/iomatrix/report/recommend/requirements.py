"""What a recommended configuration must guarantee (`--require`), power-loss-safe by default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix import domain
from iomatrix.domain import CACHE, CacheMode, Modifier, SafetyLevel
from iomatrix.domain import axes as registry
from iomatrix.errors import UserError


@dataclass(frozen=True)
class Requirement:
    name: str
    meaning: str

    def met_by(self, axes: dict[str, str]) -> bool:
        cache, modifier = axes.get("cache", domain.NA), axes.get("modifier", Modifier.NONE)
        # A value that keeps nothing it acknowledged (a null LUN) fails every safety requirement
        # whatever the cache mode. The LUN's write cache (like a disk's) is not counted here: the
        # target syncs on the flushes the cache mode sends (after every write for
        # writethrough/directsync), so the cache mode's level stands.
        others = {k: v for k, v in axes.items() if k not in ("cache", "modifier")}
        keeps_nothing = registry.risk_level(others) == SafetyLevel.UNSAFE
        if cache not in {c.value for c in CacheMode}:
            # No QEMU cache (bare metal, the null ceiling): the host's own stack honours flushes
            # unless a modifier drops them; the other requirements are about a VM's disk and cannot
            # be met.
            return (
                self.name == SAFE_DEFAULT and modifier != Modifier.EATMYDATA and not keeps_nothing
            )
        if self.name == "power-loss-safe":
            return domain.safety_level(cache, modifier) != SafetyLevel.UNSAFE and not keeps_nothing
        if self.name == "every-write-durable":
            return domain.safety_level(cache, modifier) == SafetyLevel.SAFE and not keeps_nothing
        if self.name == "migratable":
            return CACHE[CacheMode(cache)].direct
        if self.name == "snapshots":
            return axes.get("format") == domain.Format.QCOW2
        raise AssertionError(self.name)


# The requirement every answer meets unless the user opts out with --allow-data-loss (issue 38): a
# configuration that drops guest flushes (cache=unsafe, eatmydata) is what QEMU's and Proxmox's
# documentation reserve for throw-away guests, so it is never the tool's first advice.
SAFE_DEFAULT = "power-loss-safe"
ALLOW_DATA_LOSS = "--allow-data-loss"

REQUIREMENTS: dict[str, Requirement] = {
    r.name: r
    for r in (
        Requirement(
            "power-loss-safe",
            "what the guest flushed survives a host crash or power loss (flushes honoured, "
            "no cache=unsafe, no eatmydata)",
        ),
        Requirement(
            "every-write-durable",
            "every completed write survives a power loss (cache=writethrough or directsync)",
        ),
        Requirement(
            "migratable",
            "safe for live migration: the host page cache is bypassed (cache=none or "
            "directsync; libvirt refuses other modes without --unsafe)",
        ),
        Requirement("snapshots", "internal snapshots and backing chains: format=qcow2"),
    )
}


def parse_requirements(names: Sequence[str], allow_data_loss: bool = False) -> list[Requirement]:
    """The requirements named (comma-separated or repeated), with power-loss-safe added unless
    `allow_data_loss` (or every-write-durable, which implies it, is asked for)."""
    out = []
    for raw in names:
        if not raw.replace(",", "").strip():  # `--require ''` is a mistake, not "no requirement"
            raise UserError(
                f"--require {raw!r} names no requirement", hint=f"use {', '.join(REQUIREMENTS)}"
            )
        for n in filter(None, (x.strip() for x in raw.split(","))):
            if n not in REQUIREMENTS:
                raise UserError(f"unknown requirement '{n}'", hint=f"use {', '.join(REQUIREMENTS)}")
            if REQUIREMENTS[n] not in out:
                out.append(REQUIREMENTS[n])
    if not allow_data_loss and not {r.name for r in out} & {SAFE_DEFAULT, "every-write-durable"}:
        out.insert(0, REQUIREMENTS[SAFE_DEFAULT])
    return out


def unmet(requirements: Sequence[Requirement], cell_axes: dict[str, str]) -> list[Requirement]:
    return [q for q in requirements if not q.met_by(cell_axes)]


def opt_in_text(fails: Sequence[Requirement]) -> str:
    """How to choose a configuration that fails `fails` anyway: --allow-data-loss for the safe
    default, dropping --require NAME for the others."""
    others = [q.name for q in fails if q.name != SAFE_DEFAULT]
    return " and ".join(
        [
            *([ALLOW_DATA_LOSS] if len(others) < len(fails) else []),
            *(f"without --require {n}" for n in others),
        ]
    )
