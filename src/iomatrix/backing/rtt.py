"""The `rtt` axis's values (issue 34): an emulated network round-trip time, "0", "0.5ms", "2ms", "500us".

Pure: parsing only. The relay that adds the delay and measures what it achieved is `backing.delay_relay`.
"""

from __future__ import annotations

import re
from fractions import Fraction

_RTT = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|us|µs)?")
RTT_EXAMPLE = 'write "0", or a time with its unit: "500us", "0.5ms", "2ms"'
# Beyond this the iSCSI initiator's own timeouts (libiscsi: seconds) and the sweep's length dominate; a typo
# ("2000ms" for "2ms") should not make a run crawl for hours.
MAX_RTT_MS = 1000


def parse_rtt(text: object) -> float:
    """Milliseconds of round-trip time; ValueError with a one-line reason otherwise."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f"bad rtt {text!r}: {RTT_EXAMPLE}")
    t = str(text).strip().lower()
    m = _RTT.fullmatch(t) if len(t) <= 32 else None
    if m is None:
        raise ValueError(f"bad rtt {str(text)[:40]!r}: {RTT_EXAMPLE}")
    value = Fraction(m.group(1))
    unit = m.group(2)
    if unit is None and value != 0:
        raise ValueError(f"bad rtt {str(text)[:40]!r}: a time needs its unit; {RTT_EXAMPLE}")
    ms = value / 1000 if unit in ("us", "µs") else value
    if ms > MAX_RTT_MS:
        raise ValueError(f"bad rtt {str(text)[:40]!r}: above {MAX_RTT_MS} ms (a typo?); {RTT_EXAMPLE}")
    return float(ms)
