"""The axes of a disk served over the network that no protocol owns (issue 34): the round-trip time
between client and server and the client count. The rules each protocol's own axes are built with
are :mod:`iomatrix.domain.protocol_rules` (which the protocols' modules import, and this module's
rules ask the protocols what they allow). Each protocol's axes (the iSCSI LUN's, the NFS
and Ceph clients, librbd's cache, …) are in its own module under :mod:`iomatrix.protocols`
(`NetworkProtocol.axes`); :func:`ordered` places them among these, and the axis registry
(:mod:`iomatrix.domain.axes`) registers the lot after the local axes. Generic: no protocol is named
here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from iomatrix.domain import clients, rtt
from iomatrix.domain.axis_model import (
    Axis,
    Layer,
    Rule,
    RuleContext,
    ToolOption,
)
from iomatrix.domain.protocol_rules import backing_protocol
from iomatrix.protocols.built_in import known_protocol

# ----------------------------------------------------------------------- shared storage (issue 34)
# What decides a disk served over the network, beside each protocol's own axes: the network's
# round-trip time and how many clients share the backing. A local backing keeps every one at its
# default, as _qcow2_only does for another format. docs/shared-storage.md has what each does and
# what was measured.


def _rtt_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    if values["rtt"] == "0" or ctx.backing is None:
        return None
    protocol = backing_protocol(ctx)
    if protocol is None:
        return (
            "rtt emulates the network between a disk's client and its storage server; "
            f"{ctx.backing_label} is "
            "a local backing"
        )
    network = known_protocol(protocol)
    if network is None or network.measures_rtt:
        return None
    # a protocol without its own sentence is refused too: a cell at rtt ≠ 0 that no relay delayed
    # would claim a round trip it never had
    return network.rtt_unavailable or (
        f"rtt is emulated by a relay between client and server; {ctx.backing_label}'s client "
        "does not go through it"
    )


def _rtt_tool(value: str) -> ToolOption:
    if value == "0":
        return ToolOption()
    # the condition in words, as the clients' note (domain/clients.py: tool_note), never "rtt=2ms"
    return ToolOption(
        note=f"measured over an emulated network round trip of {value}; your own network's round "
        "trip decides what you get"
    )


RTT = Axis(
    "rtt",
    "the network round-trip time emulated between the disk's client and its storage server (0: the "
    "direct "
    "path; e.g. 0.5ms, 2ms, 500us)",
    ("0", "0.5ms", "1ms", "2ms", "5ms"),
    "0",
    ("0",),
    frozenset({Layer.IMAGE}),
    rules=(Rule(("rtt",), _rtt_rule),),
    simpler=("0",),
    check_value=rtt.rtt_problem,
    tools={t: _rtt_tool for t in ("libvirt", "proxmox", "virt-install", "nova")},
)


def _clients_rule(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    return clients.prune_reason(
        values["clients"],
        ctx.backing is not None,
        backing_protocol(ctx),
        ctx.backing_label,
        ctx.backing.client_hosts if ctx.backing is not None else 0,
    )


CLIENTS = Axis(
    "clients",
    "how many clients run the workload at once against one shared backing, each on a disk of its "
    "own "
    "with its own export and fio, started together (1: one client alone)",
    clients.VALUES,
    "1",
    ("1",),
    frozenset({Layer.FRONTEND}),
    rules=(Rule(("clients",), _clients_rule),),
    simpler=("1",),
    check_value=clients.value_error,
    tools={
        t: (lambda v: ToolOption(note=clients.tool_note(v)))
        for t in ("libvirt", "proxmox", "virt-install", "nova")
    },
)


SHARED_AXES = (RTT, CLIENTS)
# Their names: conditions of the network or of the storage's use (backing.network.CONDITION_AXES),
# never a tool's default: a cell's twin at QEMU's defaults (axes.baseline_values) runs at the
# cell's own round-trip time and number of clients (issue 70: the ceph plan's answers at 2 and 4
# clients said QEMU's default was "not in this sweep", its twin looked for at 1 client).
CONDITIONS = frozenset(a.name for a in SHARED_AXES)


def ordered(groups: Iterable[tuple[str | None, tuple[Axis, ...]]]) -> tuple[Axis, ...]:
    """The network axes in the registry's order: the shared ones (SHARED_AXES), each protocol's
    group (its `axes_before`, its axes) before the shared axis it names, in the order given, and the
    groups naming none after them all. That order keys stored cells and orders tables' columns, so
    it never changes for axes already stored; a ValueError for a group naming no shared axis."""
    before: dict[str, list[Axis]] = {}
    last: list[Axis] = []
    shared = {a.name for a in SHARED_AXES}
    for place, group in groups:
        if place is not None and place not in shared:
            names = ", ".join(a.name for a in group)
            raise ValueError(f"axes {names} go before '{place}', which is no shared network axis")
        (before.setdefault(place, []) if place is not None else last).extend(group)
    out: list[Axis] = []
    for axis in SHARED_AXES:
        out += [*before.get(axis.name, ()), axis]
    return (*out, *last)
