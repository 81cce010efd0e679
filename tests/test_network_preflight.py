"""A network backing that cannot serve is refused before the sweep (issue 50): `run` exits 2 with
one line naming what was tried and why it failed, and creates nothing; `plan` says so too, or that
it is checked only when run.

Unreachable servers are closed ports on 127.0.0.1 (a port bound, then closed again); a name that
does not resolve is looked up inside a network namespace of its own (``unshare -n``: no route, so no
query leaves this host); wrong IQNs and LUNs are asked of a tgtd this test starts on its own control
port and portal."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import TgtServer
from iomatrix.backing.network import DiskRequest
from iomatrix.backing.nfs import rpc_registrations
from iomatrix.backing.provision import cannot_serve, provision
from iomatrix.backing.reach import portal_problem
from iomatrix.backing.spec import parse_backing
from iomatrix.safety import resolve_allowed
from tests.conftest import iomatrix_argv, root_only, run_cli
from tests.own_network import host_lab_nfs

HAVE_TOOLS = all(shutil.which(p) for p in ("tgtd", "tgtadm", "iscsi-readcapacity16", "qemu-img"))
needs_tools = pytest.mark.skipif(
    not HAVE_TOOLS, reason="tgt, libiscsi-bin and qemu-utils are not installed"
)
IQN = "iqn.2026-11.org.example:nobody"
SCRATCH = Path("/tmp/iomx-preflight")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on leaving: nothing listens there


def _plan(tmp: Path, backing: str) -> None:
    (tmp / "p.toml").write_text(
        'tier = ["blocklayer"]\nformat = ["raw"]\nworkloads = ["rand-write-4k"]\n'
        f'runtime = 0.3\n[[backing]]\ntype = "iscsi"\n{backing}'
    )


def _iscsi_table(portal: str, iqn: str, lun: int) -> str:
    return f'portal = "{portal}"\niqn = "{iqn}"\nlun = {lun}\n'


def _refused(tmp: Path, *allow: str, expect: tuple[str, ...]) -> str:
    """Run the plan in `tmp`: exit 2, one line of error naming each of `expect`, no workdir or
    database made."""
    argv = ["run", "p.toml", "--db", "r.sqlite", "--workdir", "w"]
    for url in allow:
        argv += ["--allow-destroy", url]
    proc = run_cli(*argv, cwd=tmp, timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stdout[-2000:] + err[-2000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "cannot serve" in err and all(e in err for e in expect), err
    assert not (tmp / "w").exists() and not (tmp / "r.sqlite").exists()
    return err


def test_portal_problem_names_a_closed_port() -> None:
    port = _closed_port()
    why = portal_problem("127.0.0.1", port)
    assert why is not None and f"127.0.0.1:{port}" in why and "refused" in why.lower()


@needs_tools
def test_an_unreachable_portal_is_refused_before_the_sweep_and_plan_says_so(tmp_path: Path) -> None:
    port = _closed_port()
    url = f"iscsi://127.0.0.1:{port}/{IQN}/1"
    _plan(tmp_path, _iscsi_table(f"127.0.0.1:{port}", IQN, 1))
    _refused(tmp_path, url, expect=(url, f"127.0.0.1:{port}", "Connection refused"))
    proc = run_cli("plan", "p.toml", "--allow-destroy", url, cwd=tmp_path, timeout=120)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "cannot serve" in text and "Connection refused" in text, text[
        -2000:
    ]


@needs_tools
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
@root_only
def test_a_portal_name_that_does_not_resolve_is_refused(tmp_path: Path) -> None:
    # In a network namespace of its own the lookup fails at once: no route, nothing sent anywhere.
    url = f"iscsi://no-such-portal.invalid:3260/{IQN}/1"
    _plan(tmp_path, _iscsi_table("no-such-portal.invalid:3260", IQN, 1))
    proc = subprocess.run(
        [
            "unshare",
            "-n",
            *iomatrix_argv(),
            "run",
            "p.toml",
            "--db",
            "r.sqlite",
            "--workdir",
            "w",
            "--allow-destroy",
            url,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err[-2000:]
    assert "'no-such-portal.invalid' does not resolve" in err and "Traceback" not in err, err
    assert not (tmp_path / "w").exists()


@pytest.fixture
def lab_target() -> Iterator[tuple[TgtServer, str, str]]:
    """A tgtd this test starts (its own control port and portal) with one LUN: (server, portal,
    IQN)."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pf-", dir=SCRATCH))
    try:
        with provision(parse_backing({"type": "iscsi"}), work, set()) as lab:
            server = lab.server
            assert isinstance(server, TgtServer)
            disk = server.new_disk(DiskRequest({}, size_bytes=16 << 20, name="given"))
            try:
                yield server, f"127.0.0.1:{server.port}", dict(disk.protocol_options)["target"]
            finally:
                server.remove_disk(disk)
    finally:
        leftovers.clean(work, mine=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
@root_only
@needs_tools
def test_wrong_iqn_wrong_lun_and_a_lun_not_handed_over_are_refused(
    lab_target: tuple[TgtServer, str, str], tmp_path: Path
) -> None:
    _, portal, iqn = lab_target
    good = f"iscsi://{portal}/{iqn}/1"
    spec = parse_backing({"type": "iscsi", "portal": portal, "iqn": iqn, "lun": 1})
    # the check passes a LUN that serves
    assert cannot_serve(spec, resolve_allowed([Path(good)])) is None
    cases = [  # (plan's portal/IQN/LUN, what is handed over, what the one line must name)
        ((portal, f"{iqn}x", 1), f"iscsi://{portal}/{iqn}x/1", ("Target not found",)),
        (
            (portal, iqn, 2),
            f"iscsi://{portal}/{iqn}/2",
            ("LOGICAL_UNIT_NOT_SUPPORTED", "the LUN number"),
        ),
        ((portal, iqn, 1), None, ("was not handed over", f"--allow-destroy {good}")),
    ]
    for (p, q, n), allow, expect in cases:
        _plan(tmp_path, _iscsi_table(p, q, n))
        _refused(tmp_path, *([allow] if allow else []), expect=(f"iscsi://{p}/{q}/{n}", *expect))


@pytest.mark.slow
@root_only
@needs_tools
@pytest.mark.skipif(shutil.which("ssh") is None, reason="openssh-client is not installed")
def test_an_unreachable_client_host_is_refused(
    lab_target: tuple[TgtServer, str, str], tmp_path: Path
) -> None:
    # The LUN serves; the client host is a closed port on 127.0.0.1, named through an ssh_config of
    # its own.
    _, portal, iqn = lab_target
    good = f"iscsi://{portal}/{iqn}/1"
    (tmp_path / "ssh_config").write_text(
        f"Host gone\n  HostName 127.0.0.1\n  Port {_closed_port()}\n"
    )
    _plan(
        tmp_path,
        _iscsi_table(portal, iqn, 1)
        + f'[[backing.client_host]]\nssh = "root@gone"\nssh_config = "{tmp_path / "ssh_config"}"\n',
    )
    _refused(tmp_path, good, expect=("client host gone", "Connection refused"))
    proc = run_cli("plan", "p.toml", "--allow-destroy", good, cwd=tmp_path, timeout=120)
    assert "client hosts answer over SSH is checked only when run" in " ".join(proc.stdout.split())


def _refused_plan(tmp: Path, backing_toml: str, expect: tuple[str, ...]) -> None:
    (tmp / "p.toml").write_text(
        'tier = ["blocklayer"]\nformat = ["raw"]\nworkloads = ["rand-write-4k"]\n'
        f"runtime = 0.3\n[[backing]]\n{backing_toml}"
    )
    _refused(tmp, expect=expect)
    proc = run_cli("plan", "p.toml", cwd=tmp, timeout=120)
    assert "whether its server answers is checked only when run" in " ".join(proc.stdout.split()), (
        proc.stdout
    )


@pytest.mark.skipif(
    not all(shutil.which(p) for p in ("rpcinfo", "qemu-img")), reason="rpcbind/qemu-utils missing"
)
def test_an_existing_nfs_server_that_does_not_answer_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    # 127.0.0.1 with no NFS server registered there (the host's rpcbind, if any, lists none):
    # rpcinfo says so. Under the lab NFS lock, so that no test session's lab server (another
    # worker's test_network_disks made this test skip in a quiet suite) is registered meanwhile.
    with host_lab_nfs():
        if any(prog == 100003 for prog, *_ in rpc_registrations() or ()):
            pytest.skip("an NFS server that is not a test's runs on this host")
        _refused_plan(
            tmp_path,
            'type = "nfs"\nserver = "127.0.0.1"\nexport = "/nowhere"\n',
            ("backing nfs:127.0.0.1:/nowhere cannot serve", "does not answer NFSv3"),
        )


@pytest.mark.skipif(shutil.which("rbd") is None, reason="ceph-common is not installed")
def test_an_existing_ceph_cluster_that_does_not_answer_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "ceph.conf"
    conf.write_text(
        f"[global]\nmon host = v1:127.0.0.1:{_closed_port()}\nauth client required = none\n"
        "client mount timeout = 5\n"
    )
    _refused_plan(
        tmp_path,
        f'type = "rbd"\nconf = "{conf}"\npool = "vms"\n',
        ("backing rbd:vms cannot serve", "does not list pool 'vms'"),
    )
