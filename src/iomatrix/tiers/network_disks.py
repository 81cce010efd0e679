"""A fresh disk per run on a network backing (iSCSI, NFS: iomatrix.backing.network), for every tier
that runs one.

A local backing gets a new image file per run (`tiers.base.fresh_image`); a network backing asks its
server for a new disk made as the cell says (a LUN of the cell's type and write cache, an image of
the cell's format on the export), opens it with QEMU's own protocol driver, and gives it back after
the run. The server records the disk in the leftovers ledger before it creates it (so `iomatrix
clean` and the next `run` remove it after a SIGKILL); this module makes sure
:meth:`NetworkServer.remove_disk` runs on every other exit path (an error, Ctrl-C, SIGTERM turned
into KeyboardInterrupt by the runner).

What a run on a network disk records with its result (`RunOutcome.meta`): the disk (`network_disk`:
protocol, URL, format, size, the server-side file and the server's own description of it: LUN type,
write cache, …) and the server (`network_server`: mode, address, version). Where the cell asks for
an emulated round-trip time (the `rtt` axis), the disk is reached through the iSCSI helper's
delaying relay (`backing.delay_relay.delayed`) and the RTT requested, measured and how
(`rtt_requested_ms`, `rtt_measured_ms`, `rtt_method`) are recorded too; an iSCSI run at rtt "0"
records the direct path's measured RTT."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from iomatrix.backing.delay_relay import delayed
from iomatrix.backing.network import DiskRequest, NetworkDisk, NetworkServer
from iomatrix.domain import NA
from iomatrix.domain.axes import DiskContext, qemu_options
from iomatrix.protocol_registry import protocol

# The format a server makes where the cell's tier has no format axis (the bare-metal tier's
# server-side file).
DEFAULT_FORMAT = "raw"
_serial = itertools.count(1)


def disk_values(cell: Mapping[str, str]) -> dict[str, str]:
    """The cell's values the server reads (format, preallocation, lun_type, lun_write_cache, …): the
    axes that apply to the cell ("-" is left out, so the server takes its default); a tier without a
    format axis (bare metal) gets a raw file."""
    values = {axis: value for axis, value in cell.items() if value != NA}
    values.setdefault("format", DEFAULT_FORMAT)
    return values


def disk_name(prefix: str, slug: str) -> str:
    """A name unique in the sweep that a server may put in a file name or an IQN (lowercase letters,
    digits and '-' only): the tier's prefix, this process and a serial number, then the workload for
    whoever reads it."""
    readable = re.sub(r"[^a-z0-9-]+", "-", slug.lower()).strip("-")[:40]
    return f"{prefix}-{os.getpid()}-{next(_serial)}-{readable}".rstrip("-")


def measures_rtt(cell: Mapping[str, str], disk: NetworkDisk) -> bool:
    """Whether a run on `disk` goes through the relay's RTT measurement: every iSCSI run whose tier
    has the `rtt` axis (rtt "0" records the direct path's round trip, the reference the emulated
    ones are read against; it costs a few milliseconds of NOP pings). QEMU's nfs driver takes no
    port, so no relay (the axis prunes rtt ≠ 0 on NFS)."""
    return protocol(disk.protocol).measures_rtt and cell.get("rtt", NA) != NA


def disk_meta(disk: NetworkDisk, server: NetworkServer) -> dict[str, Any]:
    """What is recorded with a run on `disk` (JSON-ready)."""
    return {
        "network_disk": {
            "protocol": disk.protocol,
            "url": disk.url,
            "format": disk.format,
            "size_bytes": disk.size_bytes,
            "server_path": None if disk.server_path is None else str(disk.server_path),
            **_json_ready(disk.meta),
        },
        "network_server": _json_ready(server.metadata()),
    }


def _json_ready(meta: Mapping[str, Any]) -> dict[str, Any]:
    """`meta` as the store keeps it (JSON): what JSON cannot hold (a Path) as its text."""
    return json.loads(json.dumps(dict(meta), default=str))


@contextlib.contextmanager
def network_disk(
    server: NetworkServer, cell: Mapping[str, str], *, size_bytes: int, name: str, workdir: Path
) -> Iterator[tuple[NetworkDisk, dict[str, Any]]]:
    """A new disk on `server` made as `cell` says, for one run: yields (the disk as QEMU reaches it,
    the meta to record with the run); removed from the server on every exit. With an emulated RTT
    (the cell's `rtt`), the disk yielded is the one behind the delaying relay (its portal is the
    relay's)."""
    values = disk_values(cell)
    create = qemu_options(values, DiskContext(size_bytes)).create
    disk = server.new_disk(DiskRequest(values, size_bytes, name, create))
    try:
        meta = disk_meta(disk, server)
        if not measures_rtt(cell, disk):
            yield disk, meta
            return
        with delayed(disk, cell["rtt"], workdir) as (reached, rtt_meta):
            yield reached, {**meta, **rtt_meta}
    finally:
        server.remove_disk(disk)


def follow_server(
    server: NetworkServer, on_server_process: Callable[[int], None] | None, meta: dict[str, Any]
) -> None:
    """Have the host sampler count the server's processes (tgtd, ganesha.nfsd) in the run's CPU per
    I/O, and record which were counted (`server_processes`; an existing server iomatrix cannot see
    has none: the cost is then the client side's only, and `server_processes` says so by being
    empty)."""
    pids = server.server_pids()
    meta["server_processes"] = [{"pid": pid, "name": name} for pid, name in sorted(pids.items())]
    if on_server_process is None:
        return
    for pid in pids:
        # a server process that exited is not a cost of this run
        with contextlib.suppress(ProcessLookupError):
            on_server_process(pid)
