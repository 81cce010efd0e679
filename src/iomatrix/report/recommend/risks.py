"""What a configuration risks per situation: QEMU's documented semantics (`domain.CACHE`,
`risk.risk_of`), or the durability tier's measured verdicts where a sweep has them (labelled
"measured")."""

from __future__ import annotations

from dataclasses import dataclass, replace

from iomatrix.domain import CACHE, CacheMode, CacheSemantics, Modifier
from iomatrix.durability.verdict import TARGET_POWER_LOSS
from iomatrix.protocol_registry import network_protocol
from iomatrix.protocols.base import CUT_CLIENT_CRASH
from iomatrix.report.durability import MeasuredIndex, measured_statements, storage_of
from iomatrix.report.query import CellWorkload
from iomatrix.risk import risk_of

DOCUMENTED = "documented, not measured"


@dataclass(frozen=True)
class RiskStatement:
    situation: str
    text: str
    basis: str  # DOCUMENTED, or "measured" once a durability tier supplies verdicts


SITUATIONS = (
    "QEMU crash",
    "host crash or power loss",
    "live migration",
    "guest that does not send flushes",
)
# TARGET_POWER_LOSS (durability.verdict): documented where the LUN's write cache is on, measured
# where the durability tier cut a target with the cell's LUN settings (then shown whatever the write
# cache); a client crash (NetworkProtocol.client_crash_risk: a Ceph client's) only where QEMU's own
# client's cache holds writes (librbd's policy writeback, QEMU cache on).


# QEMU's own iSCSI and NFS clients (libiscsi, libnfs) keep no cache in the host: cache=writeback
# there means the guest is told of a volatile write cache and QEMU does not flush after each write;
# writes go to the server at once.
_USERSPACE_CLIENT_TEXTS = {
    SITUATIONS[
        0
    ]: "completed writes have reached the {server} (QEMU's {client} keeps no cache in this "
    "host); what "
    "the {server} holds in its own cache is at its risk until a flush",
    SITUATIONS[
        1
    ]: "this host holds nothing (no host page cache: QEMU's {client} sends every write); a "
    "power loss of "
    "the {server} loses what its volatile cache holds of what the guest has not flushed",
    SITUATIONS[
        2
    ]: "no host page cache is involved; QEMU flushes the disk before the guest runs on the "
    "destination",
    SITUATIONS[
        3
    ]: "its writes reach the server at once; whether they are durable there depends on the "
    "server's own "
    "cache until a flush",
}


def _network_client_texts(cell: CellWorkload) -> dict[str, str]:
    """The texts of a cache mode that keeps a cache (writeback) where the disk's client is not the
    host kernel's: librbd's cache on rbd, none at all with QEMU's iSCSI and NFS clients; {} for a
    file on the host."""
    network = network_protocol(str(cell.backing.get("backing_type")))
    if network is None:
        return {}
    # QEMU's own client's cache (librbd's on an rbd disk), not the host page cache
    if (own_cache := network.userspace_cache_texts(cell.axes)) is not None:
        return dict(zip(SITUATIONS, own_cache, strict=True))
    if network.userspace_client_caches:
        return {}
    own = network.userspace_library
    if cell.axes.get(network.client_axis, own) not in (own, "-"):
        # a kernel client (open-iscsi, an NFS mount) does use the host page cache: the file texts
        # hold
        return {}
    return {
        s: t.format(server=network.server_noun, client=own)
        for s, t in _USERSPACE_CLIENT_TEXTS.items()
    }


def measured_risks(
    cell: CellWorkload | None, measured: MeasuredIndex | None = None
) -> dict[str, str]:
    """Measured durability verdicts for a cell, per situation, from the durability tier's trials
    anywhere in the database (`measured`, built once per report); they take precedence over the
    documented semantics."""
    if cell is None or measured is None:
        return {}
    return measured_statements(measured, cell.axes, storage_of(cell.backing))


def risk_statements(
    cache: str,
    modifier: str = Modifier.NONE,
    cell: CellWorkload | None = None,
    measured: MeasuredIndex | None = None,
) -> list[RiskStatement]:
    risk = risk_of(cache, modifier)
    if risk is None:
        return []
    sem = CACHE[CacheMode(cache)]
    migration, no_flush = _migration_text(sem), _no_flush_text(sem, modifier)
    texts = dict(
        zip(SITUATIONS, (risk.qemu_crash, risk.power_loss, migration, no_flush), strict=True)
    )
    if cell is not None and sem.write_cache and not sem.direct and not sem.no_flush:
        texts.update(_network_client_texts(cell))
    found = measured_risks(cell, measured)
    out = [
        RiskStatement(s, found.get(s, texts[s]), "measured" if s in found else DOCUMENTED)
        for s in SITUATIONS
    ]
    network = None if cell is None else network_protocol(str(cell.backing.get("backing_type")))
    # a durability sweep cut a target with this LUN's settings (issue 34)
    if TARGET_POWER_LOSS in found:
        out.append(RiskStatement(TARGET_POWER_LOSS, found[TARGET_POWER_LOSS], "measured"))
    # the server's own cache (an iSCSI LUN's write cache), on or off
    elif (
        cell is not None
        and network is not None
        and (lost := network.server_power_loss(cell.axes)) is not None
    ):
        out.append(RiskStatement(TARGET_POWER_LOSS, lost, DOCUMENTED))
    # QEMU's own client's cache holding writes past its crash (librbd's writeback cache, issue 35):
    # QEMU turns librbd's cache off with cache.direct=on (block/rbd.c). Where the durability tier
    # crashed such a client with this cell's settings, the measured "QEMU crash" line above is that
    # client crash, and says so.
    if cell is None or network is None or sem.direct:
        return out
    client_crash_measured = (
        SITUATIONS[0] in found
        and network.name == storage_of(cell.backing)
        and network.durability_cut == CUT_CLIENT_CRASH
    )
    if not client_crash_measured and (crash := network.client_crash_risk(cell.axes)) is not None:
        out.append(RiskStatement(*crash, DOCUMENTED))
    return out


# The basis of a target's risks where its snippet sets up a storage path the sweep did not measure.
KERNEL_MOUNT_BASIS = "documented, not measured: the kernel mount this snippet sets up"


def target_risks(cell: CellWorkload) -> dict[str, list[RiskStatement]]:
    """Per --target, the risks of the storage path its snippet sets up where that is not the path
    the sweep measured: Proxmox's storage of a protocol it always mounts with the host kernel's
    client (NetworkProtocol.proxmox_kernel_mount: NFS) for a cell measured through QEMU's own
    client (libnfs). Those are the kernel client's documented risks, with this host's page cache
    (issue 70: `--target proxmox` printed libnfs's "this host holds nothing" above a `qm set` on
    an NFS storage); {} where every target's snippet is on the measured path.

    Worked example: an NFS cell with nfs_client=libnfs and cache=writeback gives {"proxmox": the
    risks of nfs_client=kernel with cache=writeback}: a host crash or power loss loses what sits in
    this host's page cache, live migration unsafe."""
    network = network_protocol(str(cell.backing.get("backing_type")))
    if network is None or not network.proxmox_kernel_mount or network.client_is_kernel(cell.axes):
        return {}
    mounted = replace(cell, axes={**cell.axes, network.client_axis: network.kernel_client})
    statements = risk_statements(
        cell.axes["cache"], cell.axes.get("modifier", Modifier.NONE), mounted
    )
    return {"proxmox": [replace(r, basis=KERNEL_MOUNT_BASIS) for r in statements]}


def _migration_text(sem: CacheSemantics) -> str:
    """What live migration on shared storage risks under a cache mode (QEMU's semantics)."""
    if sem.direct:
        return (
            "safe on shared storage: the host page cache is bypassed, so the destination "
            "reads what the "
            "source wrote"
        )
    else:
        return (
            "unsafe on shared storage: writes may sit in the source host's page cache; "
            "libvirt refuses "
            "live migration unless forced with --unsafe"
        )


def _no_flush_text(sem: CacheSemantics, modifier: str) -> str:
    """What a guest that does not flush risks under a cache mode and modifier."""
    if sem.no_flush or modifier == Modifier.EATMYDATA:
        return "nothing changes: flushes are dropped for every guest anyway"
    elif not sem.write_cache:
        return "safe: QEMU flushes after every write, the guest does not have to"
    elif sem.direct:
        return (
            "its writes may be lost on power loss from the disk's volatile cache; they "
            "never wait in host "
            "RAM"
        )
    else:
        return (
            "its writes may wait in host RAM until the kernel writes them back "
            "(seconds), and are lost on "
            "a host crash or power loss"
        )
