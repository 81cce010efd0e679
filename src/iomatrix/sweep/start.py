"""Starting the measured phase together with other hosts (`iomatrix run --start-at`, issue 35).

Hosts that sweep one shared backend (an iSCSI target, an NFS server, a Ceph cluster) measure each
other only if their runs overlap. The fleet role computes one start time on the controller and hands
it to every host: each sets up its backings and tiers first (which takes different times on
different hosts), then waits for that moment before its first run. What each run records
(`started_together` in its meta: the time asked for, how long the host waited, how late it was) lets
the fleet report show which hosts ran together and for how long their runs overlapped
(report/fleet.py).

Pure parsing plus one wait with the clock and the sleep passed in, so tests need no real time.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iomatrix.errors import UserError

MAX_AHEAD_S = 24 * 3600  # a start further ahead is a typo (milliseconds, a wrong date), not a plan
POLL_S = 0.5  # how often the wait looks at the clock (a Ctrl-C interrupts the sleep at once)


def parse_start_at(text: str, now: float) -> float:
    """Epoch seconds of `text`: a number of seconds since the epoch (what Ansible's
    `now().timestamp()` gives), or an ISO 8601 time with its zone (``2026-11-25T07:30:00Z``). A
    one-line error for anything else, for a time more than a day ahead of `now`, or for an ISO time
    without a zone (whose zone would be a guess)."""
    value = text.strip()
    try:
        at = float(value)
    except ValueError:
        at = _iso_time(text)
    if not math.isfinite(at):
        raise UserError(
            f"--start-at {text!r} is not a time", hint="give seconds since the epoch (date +%s)"
        )
    if at - now > MAX_AHEAD_S:
        raise UserError(
            f"--start-at {text!r} is {(at - now) / 3600:.1f} hours ahead",
            hint="give a time within the next 24 hours (seconds since the epoch, not milliseconds)",
        )
    return at


def _iso_time(text: str) -> float:
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(
            f"--start-at {text!r} is not a time",
            hint="give seconds since the epoch (date +%s) or an ISO time with its zone, e.g. "
            "2026-11-25T07:30:00Z",
        ) from None
    if parsed.tzinfo is None:
        raise UserError(
            f"--start-at {text!r} has no time zone", hint="end it with Z (UTC) or +HH:MM"
        )
    return parsed.timestamp()


@dataclass(frozen=True)
class StartTogether:
    """How a sweep's measured phase met the start time it was given."""

    at: float  # the time asked for (epoch seconds)
    waited_s: float  # how long this host waited for it
    late_s: float  # how long after it this host was ready (0: it waited)

    def as_meta(self) -> dict[str, Any]:
        return {"at": self.at, "waited_s": round(self.waited_s, 3), "late_s": round(self.late_s, 3)}

    def describe(self) -> str:
        when = dt.datetime.fromtimestamp(self.at, dt.UTC).strftime("%H:%M:%S UTC")
        if self.late_s > 0:
            return (
                f"started {self.late_s:.1f} s after the common start time {when} (set-up "
                "took longer)"
            )
        return f"waited {self.waited_s:.1f} s to start at {when} with the other hosts"


def wait_until(
    at: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_wait: Callable[[float], None] | None = None,
) -> StartTogether:
    """Wait until `at` on `clock` (wall-clock seconds), telling `on_wait` the seconds left once; a
    host that is already past it starts at once and records how late it was."""
    start = clock()
    if start >= at:
        return StartTogether(at, 0.0, start - at)
    if on_wait is not None:
        on_wait(at - start)
    while (left := at - clock()) > 0:
        sleep(min(POLL_S, left))
    return StartTogether(at, clock() - start, 0.0)
