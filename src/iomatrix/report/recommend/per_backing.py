"""One answer per backing when a sweep measured shared storage (issue 34: "an answer per protocol").

A plan's backings are usually places the user could put the same VM disk (a directory on ext4 or on XFS, a
tmpfs): one answer per workload picks among them. A network backing is a different storage system (an iSCSI
SAN, an NFS filer): an administrator who has one asks how to configure QEMU and the server on it, not "use the
other one". So when any of a sweep's backings is served over the network, each workload is answered once per
backing, from that backing's cells (with the null ceiling and the bare-metal cells of the same backing, which
the verdict's ratios use), and each such verdict is named "WORKLOAD on BACKING".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.backing.network import answers_per_backing
from iomatrix.backing.spec import parse_backing
from iomatrix.domain import NA, NULL_BACKING
from iomatrix.errors import UserError
from iomatrix.report.query import CellWorkload
from iomatrix.store import Store


def answer_backings(plan_definition: Mapping[str, Any]) -> list[str] | None:
    """The labels of the sweep's backings in plan order when each gets answers of its own (some backing is a
    network one), else None (one answer per workload across the backings)."""
    raw = plan_definition.get("backing")
    if not isinstance(raw, list) or not answers_per_backing(str(b.get("type")) for b in raw
                                                            if isinstance(b, Mapping)):
        return None
    labels: list[str] = []
    for b in raw:
        try:
            labels.append(parse_backing(dict(b)).label())
        except UserError:  # a backing type this release does not know: answered together as before
            return None
    return labels


def on_backing(cws: Sequence[CellWorkload], label: str) -> list[CellWorkload]:
    """The cells a verdict on one backing is made from: that backing's and the null ceiling's."""
    return [c for c in cws if c.axes.get("backing") in (label, NULL_BACKING)]


def at_each_rtt(cws: Sequence[CellWorkload], workload: str) -> list[tuple[str | None, list[CellWorkload]]]:
    """The cells split by emulated round-trip time: an `rtt` is a condition of the network, not a setting to
    choose, so cells at different RTTs are never ranked against each other (the answer would be "use rtt=0").
    One group (None) when the cells have at most one RTT; cells without one (bare metal, the null ceiling) join
    every group."""
    rtts = sorted({c.axes["rtt"] for c in cws if c.workload == workload and c.axes.get("rtt", NA) != NA})
    if len(rtts) <= 1:
        return [(None, list(cws))]
    return [(rtt, [c for c in cws if c.axes.get("rtt", NA) in (NA, rtt)]) for rtt in rtts]


def at_each_client_count(cws: Sequence[CellWorkload], workload: str) -> list[tuple[str | None, list[CellWorkload]]]:
    """The cells split by number of clients sharing the backend (the `clients` axis): like an RTT, a condition of
    the storage's use, not a setting (ranked together, the answer would be "have fewer neighbours"). One group
    (None) when the cells have at most one number; cells without one (bare metal, the null ceiling) join every
    group."""
    counts = sorted({c.axes["clients"] for c in cws if c.workload == workload and c.axes.get("clients", NA) != NA},
                    key=int)
    if len(counts) <= 1:
        return [(None, list(cws))]
    return [(n, [c for c in cws if c.axes.get("clients", NA) in (NA, n)]) for n in counts]


def answered_on(workload: str, label: str, rtt: str | None = None, clients: str | None = None) -> str:
    """A per-backing verdict's name ("randwrite on iscsi", "… at rtt=2ms", "… with 2 clients")."""
    return (f"{workload} on {label}" + ("" if rtt is None else f" at rtt={rtt}")
            + ("" if clients is None else f" with {clients} client{'s' if clients != '1' else ''}"))


def emulated_rtt_notes(store: Store, sweep_id: int, cws: Sequence[CellWorkload]) -> list[str]:
    """One line per emulated round-trip time of the sweep (the `rtt` axis ≠ "0"): that the latency was emulated,
    how (the runs' `rtt_method`) and how closely it was met (the median of the runs' measured RTT), so no figure
    of those cells is read as a real network's."""
    measured = store.ok_run_numbers(sweep_id, "rtt_measured_ms")
    by_rtt: dict[str, list[float]] = {}
    for c in cws:
        rtt = c.axes.get("rtt", "-")
        if rtt not in ("-", "0"):
            by_rtt.setdefault(rtt, []).extend(measured[r] for r in c.runs if r in measured)
    return [f"rtt={rtt} was emulated by a userspace relay between QEMU's iSCSI client and the target (no netem): "
            + (f"{statistics.median(ms):.3g} ms measured on the iSCSI path (median of {len(ms)} runs)" if ms
               else "no run recorded the round trip it achieved")
            for rtt, ms in sorted(by_rtt.items())]
