"""Disks served over the network (issue 34): the contract between a shared-storage server and the
tiers.

A network backing (``type = "iscsi"``, ``"nfs"`` or ``"rbd"`` in a plan) is provisioned like any
other backing (`iomatrix.backing.provision`), but its handle holds a :class:`NetworkServer` instead
of a directory or a device: a server iomatrix started itself on 127.0.0.1 (*lab-started*, the
default) or one the user named (*existing*). A tier asks the server for a fresh disk per run
(:meth:`NetworkServer.new_disk`), opens it with QEMU's own protocol driver
(:attr:`NetworkDisk.protocol_options`: ``driver=iscsi`` or ``driver=nfs``) and gives it back
(:meth:`NetworkServer.remove_disk`). What a disk is made of on the server (a LUN's type and write
cache, the export's file) is decided by the cell's axes, which the server reads from the cell's
values.

Pure model: nothing here starts a process or touches a file.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from iomatrix.plugins import load_object
from iomatrix.protocol_registry import is_network, network_protocol, protocol_names, spec_class

# A registered protocol's name (iomatrix.protocols: the built-in ones and any a package adds).
Protocol_ = str

# Axes whose values are conditions of the network or of the storage's use, not settings to choose:
# cells at different values are never ranked (nor raced) against each other (the answer would be
# "use rtt=0").
CONDITION_AXES: tuple[str, ...] = ("rtt", "clients")


def answers_per_backing(backing_types: Iterable[str]) -> bool:
    """Whether a sweep over backings of these types answers each workload once per backing: when any
    is served over the network (an iSCSI SAN and an NFS filer are not alternatives to each other).
    The report's answers and the sweep's races both follow this rule, so a race never stops a cell
    against another protocol's."""
    return any(is_network(t) for t in backing_types)


def valid_backing_types(built_in: tuple[str, ...]) -> tuple[str, ...]:
    """The built-in backing types and every registered network protocol's (a plug-in's too)."""
    return tuple(dict.fromkeys((*built_in, *protocol_names())))


def plugin_spec_class(data: object, built_in: Collection[str]) -> type | None:
    """The backing spec of a `[[backing]]` table whose type is a registered protocol's that the
    built-in types do not hold (an installed or newly added protocol's); None otherwise."""
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind in built_in or not is_network(kind):
        return None
    return spec_class(kind)


@dataclass(frozen=True)
class NetworkDisk:
    """One disk under test on a network server, as QEMU opens it.

    `protocol_options` are the options of QEMU's protocol node, in order, without the ``file.``
    prefix a format node puts before them (``(("driver", "iscsi"), ("transport", "tcp"), ("portal",
    "127.0.0.1:3261"), ("target", IQN), ("lun", "1"))`` or ``(("driver", "nfs"), ("server.type",
    "inet"), ("server.host", "127.0.0.1"), ("path", "/export/disk.qcow2"))``). `url` is the same
    disk as qemu-img and libvirt users write it (``iscsi://127.0.0.1:3261/IQN/1``,
    ``nfs://127.0.0.1/export/disk.qcow2``). `server_path` is the file that holds the disk's bytes on
    the server (a LUN's backing file, the image in the export directory) where iomatrix can see it
    (a lab-started server), else None: the server-side baseline runs fio there. `meta` is recorded
    with every run on the disk (LUN type, write cache, portal, the server's version, …)."""

    protocol: Protocol_
    protocol_options: tuple[tuple[str, str], ...]
    url: str
    format: str
    size_bytes: int
    server_path: Path | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DiskRequest:
    """What a run asks of a network server's :meth:`NetworkServer.new_disk`: a disk of
    `size_bytes` in the cell's format (values["format"], values["preallocation"]) and the other
    values of the cell's axes, with the qemu-img create options its axes set (`create_options`).
    `name` is unique in the sweep (a file or target name part)."""

    values: Mapping[str, str]
    size_bytes: int
    name: str
    create_options: tuple[tuple[str, str], ...] = ()


class NetworkServer(Protocol):
    """A started (or named) iSCSI target or NFS server that makes and removes disks for runs."""

    protocol: Protocol_
    lab_started: bool  # True: iomatrix started it and stops it at teardown

    def new_disk(self, want: DiskRequest) -> NetworkDisk:
        """A fresh disk as `want` asks, made as the cell's axes ask (iSCSI: values["lun_type"],
        values["lun_write_cache"]); recorded in the leftovers ledger before it is created."""
        ...

    def remove_disk(self, disk: NetworkDisk) -> None:
        """Remove a disk made by :meth:`new_disk` (LUN and its backing file, the file on the
        export)."""
        ...

    def server_pids(self) -> dict[int, str]:
        """The server's own processes (pid → role, e.g. "tgtd", "ganesha.nfsd") whose CPU a run
        costs too; empty for an existing server iomatrix cannot see."""
        ...

    def metadata(self) -> dict[str, Any]:
        """What to record with every result of the backing: mode, address, server version, …"""
        ...


def network_server(
    spec: Any, workdir: Path, scratch: Path, td: Any, allowed_devices: set[Path]
) -> tuple[Any, dict[str, Any]]:
    """A network backing's server, started or checked, and its metadata: its protocol's lab half
    (`NetworkProtocol.lab_server`, imported on use; see `_Spec.provision_server`)."""
    network = network_protocol(spec.protocol)
    if network is None or network.lab_server is None:
        raise NotImplementedError(f"{type(spec).__name__} starts no server")
    return load_object(network.lab_server)(spec, workdir, scratch, td, allowed_devices)


def existing_server_problem(spec: Any) -> str | None:
    """Why the existing server a network backing names cannot serve it: its protocol's
    `existing_check` (imported on use); None for a lab-started one or where it names none."""
    network = network_protocol(spec.protocol)
    if network is None or network.existing_check is None or getattr(spec, "lab_started", True):
        return None
    return load_object(network.existing_check)(spec)
