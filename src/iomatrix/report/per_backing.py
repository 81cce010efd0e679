"""One answer per backing when a sweep measured shared storage (issue 34: "an answer per protocol").

A plan's backings are usually places the user could put the same VM disk (a directory on ext4 or on
XFS, a tmpfs): one answer per workload picks among them. A network backing is a different storage
system (an iSCSI SAN, an NFS filer): an administrator who has one asks how to configure QEMU and the
server on it, not "use the other one". So when any of a sweep's backings is served over the network,
each workload is answered once per backing, from that backing's cells (with the null ceiling and the
bare-metal cells of the same backing, which the verdict's ratios use), and each such verdict is
named "WORKLOAD on BACKING"."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.backing.network import answers_per_backing
from iomatrix.backing.spec import parse_backing
from iomatrix.domain import NA, NULL_BACKING
from iomatrix.domain import clients as clients_axis
from iomatrix.domain.rtt import rtt_ms
from iomatrix.errors import UserError
from iomatrix.report.naming import without_axis
from iomatrix.report.query import CellWorkload
from iomatrix.store import Store

# The condition axis one configuration is chosen across within a backing group (configuration_group,
# configuration): the number of clients sharing the backend. The emulated round-trip time makes a
# group of its own ("iscsi at rtt=2ms").
CLIENTS = clients_axis.NAME


def answer_backings(plan_definition: Mapping[str, Any]) -> list[str] | None:
    """The labels of the sweep's backings in plan order when each gets answers of its own (some
    backing is a network one), else None (one answer per workload across the backings)."""
    raw = plan_definition.get("backing")
    if not isinstance(raw, list) or not answers_per_backing(
        str(b.get("type")) for b in raw if isinstance(b, Mapping)
    ):
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


def at_each_condition(
    cws: Sequence[CellWorkload], workload: str, axis: str
) -> list[tuple[str | None, list[CellWorkload]]]:
    """The cells split by one condition axis (`backing.network.CONDITION_AXES`: the emulated
    round-trip time, the number of clients sharing the backend): a condition of the network or of
    the storage's use, not a setting to choose, so cells at different values are never ranked
    against each other (the answer would be "use rtt=0", "have fewer neighbours"). One group (None)
    when the workload's cells have at most one value; cells without one (bare metal, the null
    ceiling) join every group."""
    values = sorted(
        {c.axes[axis] for c in cws if c.workload == workload and c.axes.get(axis, NA) != NA},
        key=_condition_order,
    )
    if len(values) <= 1:
        return [(None, list(cws))]
    return [(v, [c for c in cws if c.axes.get(axis, NA) in (NA, v)]) for v in values]


def _condition_order(value: str) -> tuple[float, str]:
    """Client counts in numeric order, RTTs by their milliseconds ("0" first), anything else by its
    text."""
    if value.isdigit():
        return float(value), value
    try:
        return rtt_ms(value), value
    except ValueError:
        return float("inf"), value


def answer_groups(
    cws: Sequence[CellWorkload], workload: str, backings: Sequence[str] | None
) -> list[tuple[str | None, list[CellWorkload]]]:
    """The answers a workload gets, as (name, the cells it is made from): one answer from every cell
    (name None) when `backings` is None (no network backing: answer_backings), else one per backing
    × RTT × client count that has cells of that backing, named by :func:`answered_on`. `recommend`
    answers and `rank` ranks these same groups, and the sweep's races were run in them
    (sweep/units.py: race_group)."""
    if backings is None:
        return [(None, list(cws))]
    out: list[tuple[str | None, list[CellWorkload]]] = []
    for label in backings:
        for rtt, near in at_each_condition(on_backing(cws, label), workload, "rtt"):
            for clients, mine in at_each_condition(near, workload, CLIENTS):
                if any(c.workload == workload and c.axes.get("backing") == label for c in mine):
                    out.append((answered_on(workload, label, rtt, clients), mine))
    return out


def answered_on(
    workload: str, label: str, rtt: str | None = None, clients: str | None = None
) -> str:
    """A per-backing verdict's name ("randwrite on iscsi", "… at rtt=2ms", "… with 2 clients")."""
    return (
        f"{workload} on {label}"
        + ("" if rtt is None else f" at rtt={rtt}")
        + _with_clients(clients)
    )


def configuration_group(workload: str, name: str | None) -> str:
    """The backing group a per-backing verdict's configuration is chosen in (Verdict.group,
    report/one_config.py): its backing and RTT, not its client count. The clients sharing one
    backend are a condition of the storage's use, like a fleet's host, not a choice: one
    configuration across them, each count's line saying how it holds there (issue 70: the ceph
    plan gave three "No answer yet" blocks, writeback at 1 and 2 clients and none at 4); ""
    where the sweep answers across its backings.

    Worked example: ("rand-write-4k", "rand-write-4k on rbd with 2 clients") → "rbd";
    ("rand-write-4k", "rand-write-4k on iscsi at rtt=2ms") → "iscsi at rtt=2ms"."""
    if name is None:
        return ""
    group = name.removeprefix(f"{workload} on ")
    return group.removesuffix(_with_clients(client_count(name)))


def client_count(name: str) -> str | None:
    """The number of clients a per-backing verdict's name says it was answered at (answered_on),
    None where it says none.

    Worked example: "rand-write-4k on rbd with 2 clients" → "2"; "randwrite on iscsi" → None."""
    counted = name.rpartition(" with ")[2]
    count = counted.split(" ")[0]
    if count.isdigit() and counted == _with_clients(count).removeprefix(" with "):
        return count
    return None


def _with_clients(count: str | None) -> str:
    """ " with 2 clients", " with 1 client"; "" for None."""
    return "" if count is None else f" with {clients_axis.in_words([count])}"


def configuration(label: str | None) -> str | None:
    """A cell's label without its number of clients: the configuration it measured, which is the
    same at 1, 2 and 4 clients (issue 70: the clients sharing one backend are a condition, so a
    configuration is compared and named without them; the answer's name says the count, as
    answered_on writes it). None stays None (a comparison with no cell in the sweep).

    Worked example: "format=raw cache=none clients=4 aio=threads" → "format=raw cache=none
    aio=threads"."""
    return None if label is None else without_axis(label, CLIENTS)


def configurations_in(text: str) -> str:
    """`text` (a cell's label, or prose that names cells by their labels) with each label named as
    its configuration (`configuration`): the number of clients it was measured with dropped, a
    condition the answer's name says, not a setting (issue 70). A run's cell id
    ("…/rbd+clients=2+…") is not a label and is kept.

    Worked example: "use for now: format=raw cache=none clients=2 aio=threads" → "use for now:
    format=raw cache=none aio=threads"."""
    return re.sub(rf" {CLIENTS}=\d+(?=[\s;,:)]|$)", "", text)


def emulated_rtt_notes(store: Store, sweep_id: int, cws: Sequence[CellWorkload]) -> list[str]:
    """One line per emulated round-trip time of the sweep (the `rtt` axis ≠ "0"): that the latency
    was emulated, how (the runs' `rtt_method`) and how closely it was met (the median of the runs'
    measured RTT), so no figure of those cells is read as a real network's."""
    measured = store.ok_run_numbers(sweep_id, "rtt_measured_ms")
    by_rtt: dict[str, list[float]] = {}
    for c in cws:
        rtt = c.axes.get("rtt", "-")
        if rtt not in ("-", "0"):
            by_rtt.setdefault(rtt, []).extend(measured[r] for r in c.runs if r in measured)
    return [
        f"rtt={rtt} was emulated by a userspace relay between QEMU's iSCSI client and "
        "the target (no netem): "
        + (
            f"{statistics.median(ms):.3g} ms measured on the iSCSI path (median of {len(ms)} runs)"
            if ms
            else "no run recorded the round trip it achieved"
        )
        for rtt, ms in sorted(by_rtt.items())
    ]
