"""Network latency without netem (issue 34): a userspace TCP relay that delays every byte by half
the RTT asked for in each direction, between QEMU's iSCSI initiator and the target, and the RTT it
achieved, measured.

    with delayed(disk, "0.5ms", workdir) as (slower_disk, meta):
        ...  # open slower_disk: its portal is the relay's (127.0.0.1, a free port)

The relay is a delay line, not a sleep in the forwarding loop: one thread per direction reads what
arrives and stamps it with its due time, a second one sends each chunk when it is due. So several
commands in flight (queue depth > 1) are each delayed once, as on a long wire, instead of queueing
behind each other's sleeps. Python's sleep is clock_nanosleep: sub-millisecond delays work,
overshoot by tens of microseconds, and more when the host is loaded — the measured RTT is what is
recorded, next to the one asked for.

The relay's own cost (thread hand-overs, sleep overshoot) is measured first with a relay that adds
no delay, and taken off the delay asked of the real one, so the RTT achieved lands near the one
asked for (records `relay_overhead_ms` and `relay_one_way_delay_ms`). The RTT is measured on the
iSCSI path itself: NOP-Out/NOP-In pings in a logged-in session to the disk's target
(`iscsi_wire.nop_rtts`), through the relay and directly; the median of each is recorded. It includes
tgtd's time to answer a NOP (small), not the disk's. It is measured before the run, on a quiet path:
under the run's own load the relay's overhead grows.

The relay runs in a child process (`python -m iomatrix.backing.delay_relay`), in the leftovers
ledger from just after its fork, killed with iomatrix (parent-death signal) and by `clean` after a
SIGKILL; it binds 127.0.0.1 only. iSCSI only: QEMU's nfs driver takes no port."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import iomatrix
from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.iscsi_wire import IscsiProbeError, nop_rtts
from iomatrix.backing.network import NetworkDisk
from iomatrix.domain.rtt import rtt_ms as parse_rtt_ms
from iomatrix.errors import UserError
from iomatrix.protocols.iscsi_names import Portal, parse_portal

LOOPBACK = "127.0.0.1"
CHUNK = 256 * 1024
READY_S = 30.0
PINGS = 30
METHOD = "userspace relay"
PROBE = f"median of {PINGS} iSCSI NOP-Out/NOP-In round trips in one session"


# ---------------------------------------------------------------------------------------------
# the relay (runs in the child)
# ---------------------------------------------------------------------------------------------


def _delay_line(src: socket.socket, dst: socket.socket, one_way_s: float) -> None:
    """Forward src → dst, each chunk sent `one_way_s` after it arrived; half-close dst at src's
    end."""
    due: queue.SimpleQueue[tuple[float, bytes] | None] = queue.SimpleQueue()

    def sender() -> None:
        while (item := due.get()) is not None:
            wait = item[0] - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(item[1])
            except OSError:
                return
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    out = threading.Thread(target=sender, daemon=True)
    out.start()
    while True:
        try:
            data = src.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            due.put(None)
            break
        due.put((time.monotonic() + one_way_s, data))
    out.join()


def _connection(client: socket.socket, upstream: tuple[str, int], one_way_s: float) -> None:
    try:
        server = socket.create_connection(upstream, timeout=30)
    except OSError:
        # the initiator sees the refusal as a closed connection, as it would without us
        client.close()
        return
    with client, server:
        server.settimeout(None)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_delay_line, args=(server, client, one_way_s), daemon=True)
        back.start()
        _delay_line(client, server, one_way_s)
        back.join()


def serve(upstream: tuple[str, int], one_way_s: float, port_file: Path) -> None:
    """Accept on 127.0.0.1 (a free port, written to `port_file` once listening) and relay to
    `upstream`."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, 0))
    listener.listen(64)
    tmp = port_file.with_name(port_file.name + ".tmp")
    tmp.write_text(str(listener.getsockname()[1]))
    tmp.replace(port_file)  # whole or absent: the parent never reads half a number
    while True:
        client, _ = listener.accept()
        threading.Thread(
            target=_connection, args=(client, upstream, one_way_s), daemon=True
        ).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m iomatrix.backing.delay_relay")
    ap.add_argument("--upstream", required=True, help="HOST:PORT to relay to")
    ap.add_argument("--one-way-us", type=float, required=True, help="delay added in each direction")
    ap.add_argument("--port-file", type=Path, required=True)
    args = ap.parse_args(argv)
    up = parse_portal(args.upstream)
    serve((up.host, up.port), args.one_way_us / 1e6, args.port_file)


# ---------------------------------------------------------------------------------------------
# the parent's side
# ---------------------------------------------------------------------------------------------


def _median_rtt_ms(portal: Portal, target: str, meta: dict[str, Any]) -> float | None:
    """Median NOP round trip in ms; None (and why, in meta["rtt_probe_error"]) when the target
    refuses the probe's login, e.g. an existing target with CHAP or an initiator ACL: the disk is
    still usable by QEMU."""
    try:
        return round(
            statistics.median(nop_rtts(portal.host, portal.port, target, count=PINGS)) * 1000, 4
        )
    except IscsiProbeError as exc:
        meta["rtt_probe_error"] = f"{portal}: {exc}"
        return None


def with_portal(disk: NetworkDisk, portal: Portal) -> NetworkDisk:
    """The same disk reached through another portal (the relay's)."""
    old = dict(disk.protocol_options)["portal"]
    options = tuple((k, str(portal) if k == "portal" else v) for k, v in disk.protocol_options)
    return replace(
        disk, protocol_options=options, url=disk.url.replace(f"//{old}/", f"//{portal}/", 1)
    )


@contextlib.contextmanager
def start_relay(upstream: Portal, one_way_s: float, workdir: Path) -> Iterator[tuple[Portal, int]]:
    """A relay child to `upstream` for the `with` block: (its portal, its pid); killed and removed
    after."""
    port_file = Path(workdir) / f".delay-relay-{os.getpid()}-{time.monotonic_ns()}.port"
    entry = leftovers.record(workdir, "path", port_file)
    env = dict(os.environ)
    # the child imports the very same iomatrix
    src = str(Path(iomatrix.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (src, env.get("PYTHONPATH")) if x)
    proc: subprocess.Popen | None = None
    try:
        # in the ledger from just after its fork until it is reaped
        with children.record_in(workdir):
            proc = children.spawn(
                [
                    sys.executable,
                    "-m",
                    "iomatrix.backing.delay_relay",
                    "--upstream",
                    str(upstream),
                    "--one-way-us",
                    f"{one_way_s * 1e6:.1f}",
                    "--port-file",
                    str(port_file),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + READY_S
        while not port_file.exists():
            if proc.poll() is not None:
                raise UserError(
                    f"the delaying relay exited at start with status {proc.returncode}",
                    hint=f"run python -m iomatrix.backing.delay_relay --upstream {upstream} "
                    "--one-way-us 100 --port-file /tmp/p to see why",
                )
            if time.monotonic() > deadline:
                raise UserError(f"the delaying relay did not listen within {READY_S:g} s")
            time.sleep(0.02)
        yield Portal(LOOPBACK, int(port_file.read_text())), proc.pid
    finally:
        if proc is not None:
            children.kill(proc)
        port_file.unlink(missing_ok=True)
        leftovers.release(workdir, entry)


@contextlib.contextmanager
def delayed(
    disk: NetworkDisk, rtt: str, workdir: Path
) -> Iterator[tuple[NetworkDisk, dict[str, Any]]]:
    """`disk` reached through a relay adding `rtt` ("0", "0.5ms", "2ms", "500us"), and what was
    achieved.

    rtt "0" yields the disk unchanged, with the direct path's RTT measured."""
    try:
        rtt_ms = parse_rtt_ms(rtt)
    except ValueError as exc:
        raise UserError(str(exc), hint='e.g. rtt = ["0", "0.5ms", "2ms"]') from None
    if disk.protocol != "iscsi":
        raise UserError(
            f"an emulated rtt works on iSCSI disks only, not {disk.protocol} (QEMU's "
            f"{disk.protocol} "
            "driver takes no port to point at a relay)",
            hint='use rtt = "0" for this backing',
        )
    options = dict(disk.protocol_options)
    portal, target = parse_portal(options["portal"]), options["target"]
    meta: dict[str, Any] = {
        "rtt_requested_ms": rtt_ms,
        "rtt_method": METHOD if rtt_ms else "direct",
        "rtt_probe": PROBE,
    }
    direct_ms = meta["rtt_direct_ms"] = _median_rtt_ms(portal, target, meta)
    if rtt_ms == 0:
        meta["rtt_measured_ms"] = direct_ms
        yield disk, meta
        return
    # The relay costs time of its own (threads handing chunks over, sleep overshoot: 0.3-0.5 ms on a
    # loaded 2-core host). A first relay without delay measures it, and the delay asked of the real
    # one is lowered by it, so the RTT achieved lands near the one asked for instead of always above
    # it.
    with start_relay(portal, 0.0, workdir) as (bare, _):
        bare_ms = _median_rtt_ms(bare, target, meta)
    overhead_ms = None if bare_ms is None or direct_ms is None else max(0.0, bare_ms - direct_ms)
    one_way_ms = max(0.0, rtt_ms - (overhead_ms or 0.0)) / 2
    meta.update(
        relay_overhead_ms=None if overhead_ms is None else round(overhead_ms, 4),
        relay_one_way_delay_ms=round(one_way_ms, 4),
    )
    with start_relay(portal, one_way_ms / 1000, workdir) as (relay, pid):
        measured = _median_rtt_ms(relay, target, meta)
        meta.update(
            rtt_measured_ms=measured,
            relay_portal=str(relay),
            relay_pid=pid,
            rtt_added_ms=None
            if measured is None or direct_ms is None
            else round(measured - direct_ms, 4),
        )
        yield with_portal(disk, relay), meta


if __name__ == "__main__":
    main()
