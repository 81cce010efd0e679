"""The rules between axis values (which combinations QEMU refuses or the guest cannot boot), the
documented safety of a cache mode, and the wording of a refused value (valid choices, "did you
mean")."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import StrEnum

from iomatrix.domain.values import (
    BUS,
    CACHE,
    FILE_PREALLOCATIONS,
    PREALLOCATIONS,
    Aio,
    Bus,
    CacheMode,
    Format,
    Modifier,
    SafetyLevel,
)

__all__ = [
    "aio_rule",
    "bus_rule",
    "choices",
    "did_you_mean",
    "direct_io",
    "modifier_rule",
    "o_direct_rule",
    "preallocation_rule",
    "safety_level",
]


def direct_io(cache: str) -> bool:
    return CACHE[CacheMode(cache)].direct


def aio_rule(cache: str, aio: str) -> str | None:
    """aio=native needs O_DIRECT: QEMU refuses to open the image otherwise."""
    if aio == Aio.NATIVE and not direct_io(cache):
        return (
            f"aio=native needs O_DIRECT (cache none or directsync); cache={cache} would make QEMU "
            "refuse to open the image ('aio=native was specified, but it requires cache.direct=on')"
        )
    return None


def preallocation_rule(
    fmt: str, preallocation: str, *, on_block_device: bool = False
) -> str | None:
    """Which preallocation a format supports, and that file preallocation needs an image file."""
    allowed = PREALLOCATIONS[Format(fmt)]
    if preallocation not in allowed:
        return (
            f"format {fmt} does not support preallocation={preallocation} "
            f"(it supports: {', '.join(allowed)})"
        )
    if on_block_device and preallocation in FILE_PREALLOCATIONS:
        return (
            f"preallocation={preallocation} preallocates an image file; the backing is a "
            "whole block device"
        )
    return None


def o_direct_rule(cache: str, backing_supports_o_direct: bool, backing: str) -> str | None:
    if not backing_supports_o_direct and direct_io(cache):
        return (
            f"cache={cache} opens with O_DIRECT, which backing {backing} does not support "
            "(tmpfs before Linux 6.6 and ZFS datasets refuse O_DIRECT)"
        )
    return None


def modifier_rule(modifier: str, cache: str) -> str | None:
    if modifier == Modifier.EATMYDATA and cache == CacheMode.UNSAFE:
        return "cache=unsafe already drops every flush; eatmydata would change nothing"
    return None


def bus_rule(bus: str) -> str | None:
    spelling = BUS[Bus(bus)]
    if not spelling.guest_kernel_ready:
        return f"bus={bus}: {spelling.unavailable_reason}"
    return None


def safety_level(cache: str, modifier: str = Modifier.NONE) -> SafetyLevel:
    """Documented power-loss safety of a cache mode under a host modifier."""
    if modifier == Modifier.EATMYDATA:
        return SafetyLevel.UNSAFE
    return CACHE[CacheMode(cache)].level


def choices(enum: type[StrEnum]) -> str:
    """'a, b or c': the valid values of an axis, for error messages."""
    vals = [e.value for e in enum]
    return ", ".join(vals[:-1]) + f" or {vals[-1]}" if len(vals) > 1 else vals[0]


def did_you_mean(value: object, valid: Iterable[str]) -> str:
    """' — did you mean 'writeback'?': the valid value(s) closest to a mistyped one, appended to a
    one-line error; '' when none is close. Close is, in order: the same but for case ('None'),
    difflib's similarity ≥ 0.7 (two at most: 'writebak' → writeback; not 0.6 as for keys, which
    offers rbd for 'nbd', a different protocol), or a valid value of three letters or more that the
    text starts with or that starts with the text ('directory' → dir: too short a name for difflib's
    ratio, 2·3/12 = 0.5)."""
    choices = [str(v) for v in valid]
    text = str(value).strip()
    folded = {c.lower(): c for c in choices}
    close = (
        [folded[text.lower()]]
        if text.lower() in folded
        else difflib.get_close_matches(text, choices, n=2, cutoff=0.7)
        or [
            c
            for c in choices
            if len(c) >= 3
            and len(text) >= 3
            and (text.lower().startswith(c.lower()) or c.lower().startswith(text.lower()))
        ][:2]
    )
    if not close or not text:
        return ""
    return " — did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
