"""A server named by a host name whose lookup never finishes is refused within the connect budget
(issue 69): the name's lookup is bounded (reach.RESOLVE_TIMEOUT_S) and the line names the host and
what to check. Before, getaddrinfo waited as long as the resolver's DNS servers stayed silent,
before any connect timeout started.

The slow resolver is one the test controls, in a network and mount namespace of its own (``unshare
--net --mount``): its /etc/resolv.conf (bound over the host's inside the namespace only) names a
DNS server on the namespace's 127.0.0.1 that receives every question and answers none, and asks
glibc to wait 30 s a try, twice: an unbounded lookup there takes a minute or more. No outside name
is looked up; the namespace, its socket and its mount end with the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iomatrix.backing.reach import CONNECT_BUDGET_S, RESOLVE_TIMEOUT_S
from tests.conftest import iomatrix_argv, needs, root_only

# Not in /etc/hosts (nsswitch asks the files first): only the silent DNS server is asked.
NAME = "storage-server.iomatrix-test.lan"
# The budget, and room for a loaded host to start Python and the CLI.
BOUND_S = CONNECT_BUDGET_S + 10
SLOW = f"did not resolve within {RESOLVE_TIMEOUT_S:g} s"

# Run inside the namespace: loopback up, the test's resolv.conf bound over /etc/resolv.conf, a DNS
# server that never answers, then the command given.
IN_NAMESPACE = textwrap.dedent(
    """
    import socket, subprocess, sys
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "--bind", sys.argv[1], "/etc/resolv.conf"], check=True)
    silent_dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent_dns.bind(("127.0.0.1", 53))  # questions queue here; none is read, none answered
    sys.exit(subprocess.run(sys.argv[2:]).returncode)
    """
)


def _with_silent_dns(tmp: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    resolv = tmp / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:30 attempts:2\n")
    t0 = time.monotonic()
    out = subprocess.run(
        ["unshare", "--net", "--mount", sys.executable, "-c", IN_NAMESPACE, str(resolv), *argv],
        capture_output=True,
        text=True,
        cwd=tmp,
        timeout=180,  # past any bound here: the old code's lookup ends after 60 s or more
        env={**os.environ, "COLUMNS": "200"},
    )
    return out, time.monotonic() - t0


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


@root_only  # a network and mount namespace
@needs("unshare")
def test_an_nbd_url_naming_a_slow_name_is_refused_within_the_budget(tmp_path: Path) -> None:
    url = f"nbd://{NAME}:10809/vm"
    (tmp_path / "p.toml").write_text(
        'tier = ["blocklayer"]\nformat = ["raw"]\nworkloads = ["rand-write-4k"]\nsize = "16M"\n'
        'image_size = "64M"\nruntime = 1\nnull_ceiling = false\n'
        f'[[backing]]\ntype = "nbd"\nurl = "{url}"\n'
    )
    argv = ["run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--allow-destroy", url]
    out, took = _with_silent_dns(tmp_path, [*iomatrix_argv(), *argv])
    line = _one_error_line(out)
    assert f"the name {NAME!r} of the NBD server {SLOW}" in line, line
    assert f"getent hosts {NAME}" in line and "IP address" in line, line
    assert took < BOUND_S, f"refused after {took:.0f} s: {line}"
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "w").exists()


@root_only  # a network and mount namespace
@needs("unshare")
def test_a_postgresql_url_naming_a_slow_name_is_refused_within_the_budget(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://u:secret-pw@{NAME}:5432/x"
    out, took = _with_silent_dns(tmp_path, [*iomatrix_argv(), "results", "--db", url])
    line = _one_error_line(out)
    assert "cannot reach the PostgreSQL store" in line and f"{NAME!r} {SLOW}" in line, line
    assert "secret-pw" not in out.stdout + out.stderr
    assert took < BOUND_S, f"refused after {took:.0f} s: {line}"


# The checks of an existing iSCSI target, NFS server and Ceph monitor, each asked in the namespace
# (one process for the three, each in a thread of its own: each waits out the lookup's bound once,
# the three at the same time rather than one after another).
CHECKS = textwrap.dedent(
    """
    import json, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from iomatrix.backing.iscsi import read_capacity
    from iomatrix.backing.nfs import existing_server_problem
    from iomatrix.backing.rbd import existing_pool_problem
    from iomatrix.backing.spec import parse_backing
    from iomatrix.protocols.iscsi import parse_iscsi_url
    name, conf = sys.argv[1], Path(sys.argv[2])
    conf.write_text(f"[global]\\nmon host = v1:{name}:6789\\n")
    checks = {
        "iscsi": lambda: read_capacity(
            parse_iscsi_url(f"iscsi://{name}:3260/iqn.2026-11.org.example:slow/1"))[1],
        "nfs": lambda: existing_server_problem(name, "/srv/vms"),
        "rbd": lambda: existing_pool_problem(
            parse_backing({"type": "rbd", "conf": str(conf), "pool": "vms"})),
    }
    def timed(check):
        t0 = time.monotonic()
        return check(), time.monotonic() - t0
    with ThreadPoolExecutor(len(checks)) as pool:
        running = {protocol: pool.submit(timed, check) for protocol, check in checks.items()}
    print(json.dumps({protocol: future.result() for protocol, future in running.items()}))
    """
)


@root_only  # a network and mount namespace
@needs("unshare")
def test_an_iscsi_nfs_and_ceph_server_named_by_a_slow_name_are_refused_within_the_budget(
    tmp_path: Path,
) -> None:
    out, _took = _with_silent_dns(
        tmp_path, [sys.executable, "-c", CHECKS, NAME, str(tmp_path / "ceph.conf")]
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    for protocol, (why, took) in found.items():
        assert why is not None and f"the name {NAME!r}" in why and SLOW in why, (protocol, why)
        assert "\n" not in why, (protocol, why)
        assert took < CONNECT_BUDGET_S + 1, f"{protocol}: refused after {took:.0f} s: {why}"
    assert "Ceph monitor" in found["rbd"][0] and "rpcbind" in found["nfs"][0], found
