"""The `[consolidation]` table of a plan, and the tile-count workloads it stands for.

    tier = ["consolidation"]
    [consolidation]
    tiles = [1, 2, 3]            # sweep points: how many tiles run at once (1 is the baseline)
    roles = ["filecopy-pair"]    # what one tile is made of
    slowdown_bound = 2.0         # the answer: largest tile count whose roles stay within 2x of one tile
    ksm = false                  # allow enabling KSM for the sweep (restored afterwards)
    scale = 1.0                  # how much work each role does

Each tile count becomes one workload named ``tiles-N``, so the scheduler repeats and randomises
sweep points like any other cell × workload, and cache mode and the other disk axes multiply them as
usual."""  # noqa: E501

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ROLE_NAMES = ("filecopy-pair", "db", "web", "burst")
RoleName = Literal["filecopy-pair", "db", "web", "burst"]
# the plan's table (a setting of the consolidation tier: Tier.plan_settings)
SECTION = "consolidation"
DEFAULT_TILES = (1, 2, 3)
MAX_TILES = 32
TILE_WORKLOAD = re.compile(r"^tiles-([1-9][0-9]?)$")


def tile_workload_name(tiles: int) -> str:
    return f"tiles-{tiles}"


def tiles_of(workload_name: str) -> int | None:
    """The tile count of a ``tiles-N`` workload name, else None."""
    m = TILE_WORKLOAD.match(workload_name)
    return int(m.group(1)) if m else None


class ConsolidationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tiles: list[Annotated[int, Field(ge=1, le=MAX_TILES)]] = list(DEFAULT_TILES)
    roles: list[RoleName] = ["filecopy-pair"]
    slowdown_bound: Annotated[float, Field(gt=1, le=100, allow_inf_nan=False)] = 2.0
    ksm: bool = False
    # Multiplies the work every role does (files copied, I/Os issued): 1.0 is sized for a 2-core
    # host emulating its guests (TCG); a KVM host wants more.
    scale: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = 1.0

    @field_validator("tiles")
    @classmethod
    def _tiles(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("needs at least one tile count, e.g. [1, 2, 3]")
        if len(set(v)) != len(v):
            raise ValueError(f"lists a tile count twice: {v}")
        if 1 not in v:
            raise ValueError(
                f"{v} lacks 1: one tile is the baseline every slowdown is measured against"
            )
        return sorted(v)

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError(
                f"a tile needs at least one role; valid roles: {', '.join(ROLE_NAMES)}"
            )
        if len(set(v)) != len(v):
            raise ValueError(f"lists a role twice: {v}")
        return v

    def workload_names(self) -> list[str]:
        return [tile_workload_name(n) for n in self.tiles]
