"""The pure part of the `clients` axis (issue 35, "many clients, one backend"; registered in
`domain.axes`): how many clients run a workload at once against one shared backing, which cells can,
and what a VM tool is told.

A number of clients is a condition of the storage's use, like an emulated RTT, not a setting a VM's
disk has: the recommendation never ranks cells at different numbers of clients against each other
(report/per_backing.py), and a snippet only notes it. The block-layer tier runs it
(tiers/contention.py): each client is a disk of its own on the same server, its own
qemu-storage-daemon and its own fio; a local backing has no server to share, and the guest tier
would need N guests."""

from __future__ import annotations

from collections.abc import Sequence

NAME = "clients"  # the axis's name in plans, cell labels and a run's context
CLIENTS_MAX = 16  # one fio, one qemu-storage-daemon and one disk per client on one host
VALUES = ("1", "2", "4", "8")


def value_error(value: str) -> str | None:
    """Why `value` is not a number of clients (the plan loader reads `clients = [1, 2, 4]`'s
    integers as text)."""
    if not value.isdigit() or int(value) < 1:
        return (
            f"'{value}' is not a number of clients; write a whole number ≥ 1 (e.g. clients = "
            "[1, 2, 4])"
        )
    if int(value) > CLIENTS_MAX:
        return (
            f"{value} clients is more than {CLIENTS_MAX}, the most one host runs (a disk, a "
            "daemon and a fio each)"
        )
    return None


def prune_reason(
    clients: str,
    backing_known: bool,
    protocol: str | None,
    backing_label: str,
    client_hosts: int = 0,
) -> str | None:
    """Why a cell cannot run `clients` clients on its backing: a local one has no server to share; a
    backing whose clients run on other hosts (`[[backing.client_host]]`) runs at most one client per
    host. None for one client, or where the backing's facts are not known (a snippet). Which tiers
    run several clients is the tiers' to say (`runs_many_clients` in tiers/declaration.py)."""
    if not backing_known:
        return None
    if client_hosts and value_error(clients) is None and int(clients) > client_hosts:
        return (
            f"clients={clients} needs {clients} client hosts; backing {backing_label} "
            f"names {client_hosts} "
            "(client_host tables): one client runs on each"
        )
    if clients == "1" or protocol is not None:
        return None
    return (
        f"clients={clients} measures many clients sharing one storage server; "
        f"{backing_label} is a local "
        "backing (no server to share): network backings only"
    )


def tool_note(value: str) -> str:
    """What a VM tool's snippet says of a cell measured with `value` clients: the condition it was
    measured under, in words, never as "clients=4", which reads as a setting to copy (issue 70)."""
    if value == "1":
        return ""
    return (
        f"measured with {value} clients sharing the backend; how many of your hosts and disks "
        "share it decides what you get"
    )


def by_number(count: str | None) -> tuple[int, str]:
    """A sort key for numbers of clients: numerically ("2" before "16"), None first."""
    return (int(count), "") if count is not None and count.isdigit() else (-1, str(count))


def in_words(counts: Sequence[str]) -> str:
    """Numbers of clients in words, the condition said as one (issue 70: never "clients=1"):
    "1 client", "2 clients", "1 and 4 clients", "1, 2 and 4 clients"."""
    ordered = sorted(counts, key=by_number)
    said = ordered[0] if len(ordered) == 1 else f"{', '.join(ordered[:-1])} and {ordered[-1]}"
    return f"{said} client{'' if ordered == ['1'] else 's'}"
