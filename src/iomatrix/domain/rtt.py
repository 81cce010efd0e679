"""The `rtt` axis's values (issue 34): an emulated network round-trip time, written "0" (the direct
path) or a positive number of ms or us ("0.5ms", "2ms", "500us").

One grammar for the plan's check (`rtt_problem`, the axis's check_value) and for the relay that adds
the delay (`rtt_ms`, backing/delay_relay.py): a value the plan takes is one the relay takes, and
nothing else is. Pure."""

from __future__ import annotations

import re

_RTT = re.compile(r"(\d+(?:\.\d+)?)(ms|us)")
RTT_EXAMPLE = 'write "0" or a number with ms or us ("0.5ms", "500us")'
# Beyond this the iSCSI initiator's own timeouts (libiscsi: seconds) and the sweep's length
# dominate; a typo ("2000ms" for "2ms") should not make a run crawl for hours.
MAX_RTT_MS = 1000


def rtt_problem(value: object) -> str | None:
    """Why `value` is not a round-trip time as a plan writes it (one line naming the fix), or
    None."""
    if not isinstance(value, str):
        return f"{value!r} is not a round-trip time; {RTT_EXAMPLE}"
    if value == "0":
        return None
    m = _RTT.fullmatch(value) if len(value) <= 32 else None
    if m is None and re.fullmatch(r"\d+(?:\.\d+)?", value):
        return f"'{value}' needs its unit; {RTT_EXAMPLE}"
    if m is None:
        return f"'{value[:40]}' is not a round-trip time; {RTT_EXAMPLE}"
    ms = float(m.group(1)) / (1000 if m.group(2) == "us" else 1)
    if ms == 0:
        return f"'{value}' is zero; write it \"0\""
    if ms > MAX_RTT_MS:
        return f"'{value}' is above {MAX_RTT_MS} ms; a storage network's round trip is below that"
    return None


def rtt_ms(value: str) -> float:
    """Milliseconds of an rtt value; ValueError with `rtt_problem`'s line (prefixed "bad rtt")
    otherwise."""
    if (why := rtt_problem(value)) is not None:
        raise ValueError(f"bad rtt: {why}")
    m = _RTT.fullmatch(value)
    return 0.0 if m is None else float(m.group(1)) / (1000 if m.group(2) == "us" else 1)
