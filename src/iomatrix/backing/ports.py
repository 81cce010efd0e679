"""Which process holds a port a lab server is about to bind (issue 50): tgtd's portal, rpcbind's
111, ganesha's NFS and MOUNT ports, the Ceph monitor's port and the OSDs' range. Each server checks
before it starts, so a busy port is one line naming the port and its holder within seconds, not a
daemon that dies or never gets ready.

Read from /proc (this network namespace's /proc/net/{tcp,tcp6,udp,udp6}; then /proc/PID/fd, whose
links to ``socket:[INODE]`` say which process owns a socket), with nothing but the standard library:
a check costs a scan of the host's file descriptors, well under a second. A holder is counted when
its address and the one the server binds collide: either is a wildcard (0.0.0.0, ::) or they are the
same address. A socket in another network namespace cannot collide and is not seen."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import UserError

PROC = Path("/proc")
TCP_LISTEN = "0A"  # /proc/net/tcp's state column (include/net/tcp_states.h: TCP_LISTEN = 10)
UDP_UNCONNECTED = "07"  # a bound UDP socket's state there (TCP_CLOSE = 7)
WILDCARDS = {"0.0.0.0", "::"}


@dataclass(frozen=True)
class PortHolder:
    """A socket bound to the port: its protocol and address, and the process owning it (pid None:
    not found, e.g. a socket the kernel holds, or a process of another user that cannot be read)."""

    protocol: str
    address: str
    port: int
    pid: int | None
    command: str | None

    def describe(self) -> str:
        who = (
            f"pid {self.pid} ({self.command})"
            if self.pid is not None
            else "a process iomatrix cannot name"
        )
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{who} on {self.protocol} {host}:{self.port}"


def _decode_address(hex_address: str) -> str:
    """/proc/net's address column: 8 hex digits (IPv4) or 32 (IPv6), each 32-bit word in host
    (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _bound_sockets(port: int, protocol: str) -> dict[int, str]:
    """{socket inode: local address} of `protocol` ("tcp": listening; "udp": bound) sockets on
    `port`."""
    want = TCP_LISTEN if protocol == "tcp" else UDP_UNCONNECTED
    found: dict[int, str] = {}
    for table in (PROC / "net" / protocol, PROC / "net" / f"{protocol}6"):
        with contextlib.suppress(OSError):
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) < 10 or fields[3] != want:
                    continue
                address, _, port_hex = fields[1].rpartition(":")
                if int(port_hex, 16) == port:
                    found[int(fields[9])] = _decode_address(address)
    return found


def _owners(inodes: set[int]) -> dict[int, tuple[int, str]]:
    """{socket inode: (pid, command)} for the processes that hold these sockets (the first found
    each)."""
    owners: dict[int, tuple[int, str]] = {}
    links = {f"socket:[{inode}]": inode for inode in inodes}
    for proc in PROC.iterdir():
        if not proc.name.isdigit() or len(owners) == len(inodes):
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(proc / "fd"):
                inode = links.get(os.readlink(fd.path))
                if inode is not None and inode not in owners:
                    owners[inode] = (int(proc.name), (proc / "comm").read_text().strip())
    return owners


def _collides(holder_address: str, bind_address: str) -> bool:
    return (
        holder_address in WILDCARDS or bind_address in WILDCARDS or holder_address == bind_address
    )


def port_holders(
    port: int, bind_address: str, protocols: tuple[str, ...] = ("tcp",)
) -> list[PortHolder]:
    """The sockets that keep a server from binding `bind_address`:`port` over each of
    `protocols`."""
    holders = []
    for protocol in protocols:
        sockets = {
            inode: address
            for inode, address in _bound_sockets(port, protocol).items()
            if _collides(address, bind_address)
        }
        owners = _owners(set(sockets))
        for inode, address in sorted(sockets.items()):
            pid, command = owners.get(inode, (None, None))
            holders.append(PortHolder(protocol, address, port, pid, command))
    return holders


def refuse_if_held(
    port: int,
    server: str,
    bind_address: str,
    protocols: tuple[str, ...] = ("tcp",),
    hint: str | None = None,
) -> None:
    """A one-line UserError naming the port and its holder when `server` could not bind it; nothing
    otherwise."""
    holders = port_holders(port, bind_address, protocols)
    if holders:
        raise UserError(
            f"{server} cannot start: port {port} is in use by {holders[0].describe()}",
            hint=hint or f"stop that process or free port {port}, then run again",
        )


def free_ports_in(first: int, last: int, bind_address: str) -> int:
    """How many TCP ports of first..last (inclusive) no listening socket collides with on
    `bind_address`."""
    busy = set()
    for table in (PROC / "net" / "tcp", PROC / "net" / "tcp6"):
        with contextlib.suppress(OSError):
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) < 10 or fields[3] != TCP_LISTEN:
                    continue
                address, _, port_hex = fields[1].rpartition(":")
                if first <= int(port_hex, 16) <= last and _collides(
                    _decode_address(address), bind_address
                ):
                    busy.add(int(port_hex, 16))
    return last - first + 1 - len(busy)
