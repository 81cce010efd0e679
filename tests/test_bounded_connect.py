"""Connecting to an existing NBD, iSCSI, NFS or RBD server is bounded and says what did not answer
(issue 69): a server that accepts a connection and then never answers (a hung server, or another
service on its port) is refused within reach.CONNECT_BUDGET_S, in one line naming its host, its port
and what stayed silent. Before, an NBD server that accepted and never answered was silent for 120 s.

The silent server is a real listening socket on 127.0.0.1 (a free port) that accepts every
connection and never sends a byte, closed when the test ends. NFS finds its server through rpcbind's
fixed port 111, which a lab NFS server of another test may hold: its silent listener sits in a
network namespace of its own (``unshare -n``), gone with the process."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing.iscsi import read_capacity
from iomatrix.backing.rbd import existing_pool_problem, monitor_addresses
from iomatrix.backing.reach import CONNECT_BUDGET_S, Budget
from iomatrix.backing.spec import parse_backing
from iomatrix.protocols.iscsi import parse_iscsi_url
from tests.conftest import needs, run_cli

# The budget, and room for a loaded host to start the tool and the CLI's own start-up.
BOUND_S = CONNECT_BUDGET_S + 10
# The checks that take a budget are given a short one: a silent server makes them wait all of it,
# and what is shown (the check gives up when its budget is spent, whatever it is) is the same at
# 3 s as at the default 15 s. The NBD check, run through the CLI, keeps the default.
SHORT_BUDGET_S = 3.0
SHORT_BOUND_S = SHORT_BUDGET_S + 10
HOST = "127.0.0.1"
PLAN = """
tier = ["blocklayer"]
format = ["raw"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = 1
null_ceiling = false
[[backing]]
type = "nbd"
"""


def _hold(listener: socket.socket, held: list[socket.socket], greeting: bytes) -> None:
    """Accept every connection, send `greeting` (if any) and keep it open, answering nothing more,
    until the listener closes."""
    while True:
        try:
            conn, _ = listener.accept()
            conn.sendall(greeting)
        except OSError:
            return
        held.append(conn)


@contextlib.contextmanager
def _listening(greeting: bytes = b"") -> Iterator[int]:
    listener = socket.create_server((HOST, 0))
    held: list[socket.socket] = []
    thread = threading.Thread(target=_hold, args=(listener, held, greeting), daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
        for conn in held:
            conn.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose listener accepts and never answers."""
    with _listening() as port:
        yield port


@needs("qemu-img")
def test_a_silent_nbd_server_is_refused_within_the_budget_naming_host_and_port(
    silent_port: int, tmp_path: Path
) -> None:
    url = f"nbd://{HOST}:{silent_port}/vm"
    (tmp_path / "p.toml").write_text(PLAN + f'url = "{url}"\n')
    t0 = time.monotonic()
    run = run_cli(
        *("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--allow-destroy", url),
        cwd=tmp_path,
        timeout=120,
    )
    took = time.monotonic() - t0
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"NBD server at {HOST}:{silent_port}" in lines[0], lines[0]
    assert "accepted the connection but sent no greeting" in lines[0], lines[0]
    assert took < BOUND_S, f"refused after {took:.0f} s: {lines[0]}"
    assert not (tmp_path / "r.sqlite").exists()


@pytest.mark.slow  # a silent server: the whole (short) budget is waited out
@needs("iscsi-readcapacity16")
def test_a_silent_iscsi_target_is_refused_within_the_budget(silent_port: int) -> None:
    lun = parse_iscsi_url(f"iscsi://{HOST}:{silent_port}/iqn.2026-11.org.example:silent/1")
    t0 = time.monotonic()
    capacity, why = read_capacity(lun, Budget(SHORT_BUDGET_S))
    took = time.monotonic() - t0
    assert capacity is None and why is not None
    assert f"iSCSI target at {HOST}:{silent_port} accepted the connection" in why, why
    assert "did not answer a login" in why, why
    assert took < SHORT_BOUND_S, f"refused after {took:.0f} s: {why}"


@needs("rbd")
def test_a_silent_ceph_monitor_is_refused_within_the_budget(
    silent_port: int, tmp_path: Path
) -> None:
    conf = tmp_path / "ceph.conf"
    conf.write_text(f"[global]\nmon host = v1:{HOST}:{silent_port}\n")
    spec = parse_backing({"type": "rbd", "conf": str(conf), "pool": "vms"})
    t0 = time.monotonic()
    why = existing_pool_problem(spec, Budget(SHORT_BUDGET_S))  # type: ignore[arg-type]
    took = time.monotonic() - t0
    assert why is not None
    assert f"Ceph monitor at {HOST}:{silent_port} accepted the connection" in why, why
    assert took < SHORT_BOUND_S, f"refused after {took:.0f} s: {why}"


@pytest.mark.slow  # a silent server: the whole (short) budget is waited out
@needs("rbd")
def test_a_ceph_monitor_that_greets_and_then_says_nothing_is_refused_within_the_budget(
    tmp_path: Path,
) -> None:
    """Past the greeting, `rbd ls` is bounded too (librados' own mount timeout, then the process's)
    and its refusal names the monitors."""
    with _listening(b"ceph v027") as port:  # msgr v1's banner, then silence
        conf = tmp_path / "ceph.conf"
        conf.write_text(f"[global]\nmon host = v1:{HOST}:{port}\nauth client required = none\n")
        spec = parse_backing({"type": "rbd", "conf": str(conf), "pool": "vms"})
        t0 = time.monotonic()
        why = existing_pool_problem(spec, Budget(SHORT_BUDGET_S))  # type: ignore[arg-type]
        took = time.monotonic() - t0
    assert why is not None and f"monitors {HOST}:{port})" in why, why
    assert took < SHORT_BOUND_S, f"refused after {took:.0f} s: {why}"


def test_monitor_addresses_are_read_from_every_spelling_of_mon_host() -> None:
    assert monitor_addresses(
        "[global]\nmon host = [v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0] [v2:10.0.0.2:3300]\n"
        "auth client required = none\n"
    ) == [("10.0.0.1", 3300), ("10.0.0.1", 6789), ("10.0.0.2", 3300)]
    assert monitor_addresses("mon_host = 10.0.0.1,mon2.example.org:6790 ; two\nfsid = x\n") == [
        ("10.0.0.1", 6789),
        ("mon2.example.org", 6790),
    ]
    assert monitor_addresses("mon-host = [::1]:6789\n") == [("::1", 6789)]
    assert monitor_addresses("[global]\nfsid = x\n") == []


# Run inside a network namespace of its own: its loopback up, a silent listener on rpcbind's port,
# and the NFS check of an export there within a budget of argv[1] seconds; prints the seconds it
# took and the refusal.
_NFS_IN_NAMESPACE = textwrap.dedent(
    """
    import socket, subprocess, sys, threading, time
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    listener = socket.create_server(("127.0.0.1", 111))
    held = []
    def hold():
        while True:
            held.append(listener.accept()[0])
    threading.Thread(target=hold, daemon=True).start()
    from iomatrix.backing.nfs import existing_server_problem
    from iomatrix.backing.reach import Budget
    t0 = time.monotonic()
    why = existing_server_problem("127.0.0.1", "/srv/vms", Budget(float(sys.argv[1])))
    print(f"{time.monotonic() - t0:.1f}")
    print(why)
    """
)


@pytest.mark.slow  # a silent server: the whole (short) budget is waited out
@needs("rpcinfo")
@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
def test_a_silent_rpcbind_is_refused_within_the_budget(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare (util-linux) or ip (iproute2) is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", _NFS_IN_NAMESPACE, str(SHORT_BUDGET_S)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    took, why = out.stdout.strip().splitlines()
    assert (
        "does not answer NFSv3" in why and f"rpcbind at {HOST}:111 accepted the connection" in why
    ), why
    assert float(took) < SHORT_BOUND_S, f"refused after {took} s: {why}"
