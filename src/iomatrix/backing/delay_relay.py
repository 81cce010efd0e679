"""Network latency without netem (issue 34): a userspace TCP relay that delays every byte by half
the RTT asked for in each direction, between a disk's client (QEMU's iSCSI initiator) and its
server, and the RTT it achieved, measured.

    with delayed(disk, "0.5ms", workdir) as (slower_disk, meta):
        ...  # open slower_disk: its server's address is the relay's (127.0.0.1, a free port)

The relay is a delay line, not a sleep in the forwarding loop: one thread per direction reads what
arrives and stamps it with its due time, a second one sends each chunk when it is due. So several
commands in flight (queue depth > 1) are each delayed once, as on a long wire, instead of queueing
behind each other's sleeps. Python's sleep is clock_nanosleep: sub-millisecond delays work,
overshoot by tens of microseconds, and more when the host is loaded — the measured RTT is what is
recorded, next to the one asked for.

What is the protocol's own is its side of the relay (`NetworkProtocol.rtt_relay`, iSCSI's in
`backing.iscsi`): where the relay goes (the disk's address rewritten to the relay's) and how the
RTT is measured on the protocol's own path (iSCSI: NOP pings in a logged-in session, through the
relay and directly). The relay's own cost (thread hand-overs, sleep overshoot) is measured first
with a relay that adds no delay and taken off the delay asked of the real one, so the RTT achieved
lands near the one asked for (records `relay_overhead_ms` and `relay_one_way_delay_ms`). It is
measured before the run, on a quiet path: under the run's own load the relay's overhead grows.

The relay runs in a child process (`python -m iomatrix.backing.delay_relay`), in the leftovers
ledger from just after its fork, killed with iomatrix (parent-death signal) and by `clean` after a
SIGKILL; it binds 127.0.0.1 only. A protocol whose client takes no port (QEMU's nfs driver) has no
side: rtt is refused on it."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import iomatrix
from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.network import NetworkDisk
from iomatrix.domain.rtt import rtt_ms as parse_rtt_ms
from iomatrix.errors import UserError
from iomatrix.plugins import load_object
from iomatrix.protocol_registry import protocol

LOOPBACK = "127.0.0.1"
CHUNK = 256 * 1024
READY_S = 30.0
RELAY_METHOD = "userspace relay"


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
    host, _, port = args.upstream.rpartition(":")
    serve((host.strip("[]"), int(port)), args.one_way_us / 1e6, args.port_file)


# ---------------------------------------------------------------------------------------------
# the parent's side
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def start_relay(
    upstream: str, one_way_s: float, workdir: Path
) -> Iterator[tuple[tuple[str, int], int]]:
    """A relay child to `upstream` ("HOST:PORT", an IPv6 host in brackets) for the `with` block:
    ((its host, its port), its pid); killed and removed after."""
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
        yield (LOOPBACK, int(port_file.read_text())), proc.pid
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
    achieved, by its protocol's side of the relay (`NetworkProtocol.rtt_relay`: where the relay
    sits, how the RTT is measured).

    rtt "0" yields the disk unchanged, with the direct path's RTT measured."""
    try:
        rtt_ms = parse_rtt_ms(rtt)
    except ValueError as exc:
        raise UserError(str(exc), hint='e.g. rtt = ["0", "0.5ms", "2ms"]') from None
    network = protocol(disk.protocol)
    if network.rtt_relay is None:
        raise UserError(
            network.rtt_unavailable
            or f"no relay can be put between {network.title}'s client and its server",
            hint='use rtt = "0" for this backing',
        )
    with load_object(network.rtt_relay)(disk, rtt_ms, workdir) as reached:
        yield reached


if __name__ == "__main__":
    main()
