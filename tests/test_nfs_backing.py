"""The NFS backing (issue 34): nfs-ganesha + rpcbind started by iomatrix, disks QEMU reads and
writes through its own NFS client (libnfs, driver=nfs), nothing left behind after teardown or after
a kill -9 and `clean`, and the *existing* mode against a lab-started server playing someone else's:
only iomatrix's own file is created and removed, a file already on the export is never touched.

Its lab servers use the host's rpcbind, one per machine at a time: each test that starts one holds
the machine-wide lock tests/own_network.py keeps for it (another test session's waits), and the
module is the xdist group "nfs" (tests/conftest.py) so that one suite's workers do not wait on each
other for it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from iomatrix.backing import leftovers, nfs
from iomatrix.backing import nfs as nfs_module
from iomatrix.backing.leftover_kinds import proc_start
from iomatrix.backing.leftovers import clean
from iomatrix.backing.network import DiskRequest, NetworkDisk
from iomatrix.backing.nfs import (
    RUNTIME_FILES,
    LabNfsServer,
    NfsBacking,
    NfsFileLeftover,
    RpcRegistrationLeftover,
    ganesha_config,
    rpc_registrations,
)
from iomatrix.backing.provision import provision
from iomatrix.backing.spec import parse_backing
from iomatrix.errors import UserError
from tests.conftest import hold_provisioned, root_only, run_cli
from tests.own_network import host_lab_nfs

SCRATCH = Path("/tmp/iomx-nfs")
MiB = 1 << 20

needs_nfs_stack = pytest.mark.skipif(
    NfsBacking().availability(set()) is not None,
    reason=f"NFS lab stack missing: {NfsBacking().availability(set())}",
)


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="nfs-", dir=SCRATCH))
    yield d
    clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the spec and the pure parts
# ---------------------------------------------------------------------------------------------


def test_lab_and_existing_specs() -> None:
    lab = parse_backing({"type": "nfs"})
    assert isinstance(lab, NfsBacking) and lab.lab_started and lab.label() == "nfs"
    assert lab.kind == "network" and lab.protocol == "nfs"
    existing = parse_backing({"type": "nfs", "server": "nfs1.example.org", "export": "/srv/vm/"})
    assert isinstance(existing, NfsBacking) and not existing.lab_started
    assert existing.export == "/srv/vm" and existing.label() == "nfs:nfs1.example.org:/srv/vm"
    assert parse_backing({"type": "dir"}).protocol is None


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"type": "nfs", "server": "h"}, "'server' without 'export'"),
        ({"type": "nfs", "export": "/x"}, "'export' without 'server'"),
        ({"type": "nfs", "server": "nfs://h/x", "export": "/x"}, "not a host name"),
        ({"type": "nfs", "server": "h", "export": "relative"}, "not an absolute export path"),
        ({"type": "nfs", "server": "h", "export": "/a/../etc"}, "not an absolute export path"),
        ({"type": "nfs", "server": "h", "export": "/a?b"}, "not an absolute export path"),
        ({"type": "nfs", "portal": "h:3260"}, "unknown field"),
        # issue 50: a comma is QEMU's option separator; an address must be one
        (
            {"type": "nfs", "server": "h", "export": "/srv,file.driver=file"},
            "export: export '/srv,file.driver=file' holds a ','",
        ),
        (
            {"type": "nfs", "server": "999.1.1.1", "export": "/x"},
            "server: server = '999.1.1.1' is not an IPv4 address",
        ),
        ({"type": "nfs", "server": "1::2::3", "export": "/x"}, "'1::2::3' is not an IPv6 address"),
    ],
)
def test_bad_nfs_tables_are_one_line(table: dict, named: str) -> None:
    with pytest.raises(UserError) as err:
        parse_backing(table)
    line = err.value.one_line()
    assert named in line and "\n" not in line


def test_missing_package_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: the host without the NFS packages
    assert (
        NfsBacking().availability(set())
        == "'ganesha.nfsd' is not installed (apt-get install nfs-ganesha)"
    )
    existing = NfsBacking(server="h", export="/x")
    assert existing.availability(set()) == "'rpcinfo' is not installed (apt-get install rpcbind)"


def test_ganesha_config_binds_loopback_and_names_the_export(tmp_path: Path) -> None:
    text = ganesha_config(tmp_path / "export", tmp_path / "recovery", 40001, 40002)
    for line in (
        "Bind_addr = 127.0.0.1;",
        "NFS_Port = 40001;",
        "MNT_Port = 40002;",
        "Graceless = true;",
        f'RecoveryRoot = "{tmp_path}/recovery";',
        f'Path = "{tmp_path}/export";',
        "Access_Type = RW;",
        "Squash = No_Root_Squash;",
        "Name = VFS;",
    ):
        assert line in text


def test_leftover_kinds_refuse_what_iomatrix_does_not_make(tmp_path: Path) -> None:
    wd = str(tmp_path)
    foreign = NfsFileLeftover(
        "nfs://h/srv/vm/guest.qcow2", {"server": "h", "export": "/srv/vm", "name": "guest.qcow2"}
    )
    assert "not a file name iomatrix gives" in (foreign.identity_problem(wd) or "")
    sneaky = NfsFileLeftover(
        "nfs://h/srv/vm/iomatrix-1-abcdef-x.raw",
        {"server": "h", "export": "/srv", "name": "iomatrix-1-abcdef-x.raw"},
    )
    assert sneaky.identity_problem(wd) is not None  # the URL and the recorded export disagree
    ours = NfsFileLeftover(
        "nfs://h/srv/vm/iomatrix-1-abcdef-x.raw",
        {"server": "h", "export": "/srv/vm", "name": "iomatrix-1-abcdef-x.raw"},
    )
    assert ours.identity_problem(wd) is None
    portmapper = RpcRegistrationLeftover("127.0.0.1", {"programs": [[100000, 2]], "ports": [2049]})
    assert portmapper.identity_problem(wd) is not None  # never rpcbind's own registration
    remote = RpcRegistrationLeftover("10.0.0.1", {"programs": [[100003, 3]], "ports": [2049]})
    assert remote.identity_problem(wd) is not None
    assert (
        RpcRegistrationLeftover(
            "127.0.0.1", {"programs": [[100003, 3]], "ports": [2049]}
        ).identity_problem(wd)
        is None
    )


def test_unreachable_existing_server_is_one_line(workdir: Path) -> None:
    if shutil.which("rpcinfo") is None or not nfs.libnfs_available():
        pytest.skip("rpcbind or libnfs not installed")
    # Under the lab NFS lock: no test session's lab server is registered meanwhile (one would make
    # this test skip, as a test of another worker's did in a quiet suite), only the host's own.
    with host_lab_nfs():
        regs = rpc_registrations() or []
        if any(prog == 100003 for prog, *_ in regs):
            pytest.skip("an NFS server that is not a test's runs on this host")
        spec = NfsBacking(server="127.0.0.1", export="/nowhere")
        with pytest.raises(UserError) as err, provision(spec, workdir, set()):
            pass
    assert "does not answer NFSv3" in err.value.one_line()
    assert leftovers.pending(workdir) == []


# ---------------------------------------------------------------------------------------------
# real servers
# ---------------------------------------------------------------------------------------------

# One lab-started NFS server per host at a time (rpcbind holds one registration of the NFS program).
# These tests are about the host's rpcbind (one it has, one iomatrix starts, one a killed run left
# registrations in), so they start theirs on the host, in the test process, and not in a namespace
# of their own as the CLI's lab-NFS tests do (tests/own_network.py): each holds the machine-wide
# lock of the host's lab NFS (another test session's test waits for it, bounded, instead of being
# refused), then waits, bounded, for an NFS server that is not a test's (the host's own) to be gone.
HOST_NFS_FREE_WAIT_S = 600.0


@pytest.fixture
def host_nfs_free() -> Iterator[None]:
    with host_lab_nfs():
        deadline = time.monotonic() + HOST_NFS_FREE_WAIT_S
        while any(prog == 100003 for prog, *_ in rpc_registrations() or ()):
            if time.monotonic() > deadline:
                pytest.skip("another NFS server stayed registered with rpcbind on this host")
            time.sleep(1)
        yield


def _image_opts(disk: NetworkDisk) -> str:
    return ",".join([f"driver={disk.format}", *(f"file.{k}={v}" for k, v in disk.protocol_options)])


def _qemu_write_read(disk: NetworkDisk, pattern: str) -> None:
    """QEMU writes a pattern through driver=nfs and reads it back (qemu-io fails on a mismatch)."""
    out = subprocess.run(
        [
            "qemu-io",
            "--image-opts",
            _image_opts(disk),
            "-c",
            f"write -P {pattern} 0 1M",
            "-c",
            f"read -P {pattern} 0 1M",
            "-c",
            "flush",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "Pattern verification failed" not in out.stdout, (
        out.stdout + out.stderr
    )
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", disk.url], capture_output=True, text=True, timeout=120
    )
    assert info.returncode == 0 and f'"format": "{disk.format}"' in info.stdout, info.stderr


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _gone(pids: dict[int, str], starts: dict[int, int | None]) -> bool:
    return all(proc_start(pid) is None or proc_start(pid) != starts[pid] for pid in pids)


def _runtime_files() -> set[str]:
    return {p for p in RUNTIME_FILES if os.path.lexists(p)}


def _another_runs(command: str, ours: Iterable[int]) -> bool:
    """Whether a process named `command` that is not one of `ours` runs on this host and sees its
    /run (another job's server; one in a mount namespace of its own, tests/own_network.py, has its
    own /run and its own files there)."""
    here = os.stat("/proc/self/ns/mnt").st_ino
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) not in set(ours):
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().strip() == command and (
                    os.stat(proc / "ns" / "mnt").st_ino == here
                ):
                    return True
    return False


def _runtime_files_left(runtime_before: set[str], ours: Iterable[int] = ()) -> set[str]:
    """The runtime files in /run that appeared since `runtime_before` and are this test's server's
    to remove: one whose daemon (rpcbind, ganesha.nfsd) runs in another job on this host is that
    job's, and not judged here."""
    return {
        p for p in _runtime_files() - runtime_before if not _another_runs(RUNTIME_FILES[p], ours)
    }


def _assert_nothing_left(
    workdir: Path,
    pids: dict[int, str],
    starts: dict[int, int | None],
    ports: dict[str, int],
    scratch: Path,
    runtime_before: set[str],
) -> None:
    deadline = time.monotonic() + 60
    while not _gone(pids, starts) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pids, starts), f"still running: {pids}"
    regs = rpc_registrations() or []
    assert not [r for r in regs if r[3] in ports.values()], regs
    assert all(_port_free(p) for p in ports.values())
    assert not scratch.exists()
    assert leftovers.pending(workdir) == []
    # rpcbind's socket and lock in /run went with it
    assert _runtime_files_left(runtime_before, pids) == set()


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_lab_server_serves_raw_and_qcow2_to_qemu_and_leaves_nothing(workdir: Path) -> None:
    runtime_before = _runtime_files()
    with provision(NfsBacking(), workdir, set()) as handle:
        server = handle.server
        assert isinstance(server, LabNfsServer) and handle.kind == "network"
        pids = server.server_pids()
        assert "ganesha.nfsd" in pids.values()
        starts = {pid: proc_start(pid) for pid in pids}
        ports, scratch = dict(server.ports), handle.path
        assert handle.metadata["nfs_server_software"] and handle.metadata["nfs_version"] == 3
        disks = []
        for fmt, pattern in (("raw", "0x5a"), ("qcow2", "0xa5")):
            disk = server.new_disk(
                DiskRequest(
                    {"format": fmt, "preallocation": "off"}, size_bytes=64 * MiB, name=f"t-{fmt}"
                )
            )
            disks.append(disk)
            assert disk.server_path is not None and disk.server_path.parent == server.export_dir
            # the real export path, not a pseudo
            assert ("path", str(disk.server_path)) in disk.protocol_options
            _qemu_write_read(disk, pattern)
        # the raw image holds what QEMU wrote, on the server's side of the export
        assert disks[0].server_path is not None
        assert disks[0].server_path.read_bytes()[:MiB] == b"\x5a" * MiB
        for disk in disks:
            server.remove_disk(disk)
            assert disk.server_path is not None and not disk.server_path.exists()

        # a registration record names its ports: one whose ports are not the server's is not it, and
        # is left alone this server's registrations (another job may add its own)
        def ours() -> set[tuple[int, int, str, int]]:
            return {r for r in rpc_registrations() or () if r[3] in server.ports.values()}

        regs_before = ours()
        other = RpcRegistrationLeftover(
            "127.0.0.1", {"programs": [[100003, 3], [100005, 3]], "ports": [1024]}
        )
        assert not other.present() and other.undo() == []
        assert regs_before and ours() == regs_before
        with pytest.raises(UserError, match="unknown image format"):
            server.new_disk(DiskRequest({"format": "../x"}, size_bytes=MiB, name="bad"))
        # a second lab-started server would hijack the registration: refused in one line
        with pytest.raises(UserError) as err, provision(NfsBacking(), workdir / "second", set()):
            pass
        assert "already registered with rpcbind" in err.value.one_line()
    _assert_nothing_left(workdir, pids, starts, ports, scratch, runtime_before)


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_server_that_cannot_bind_is_one_line_and_undone(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime_before = _runtime_files()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = iter([port])
        real_free_port = nfs_module.free_port
        monkeypatch.setattr(nfs_module, "free_port", lambda: next(ports, None) or real_free_port())
        with pytest.raises(UserError) as err, provision(NfsBacking(), workdir, set()):
            pass
    line = err.value.one_line()
    # named before ganesha starts (issue 50), not left to its bind error
    assert line.startswith(
        f"nfs-ganesha cannot start: port {port} is in use by pid {os.getpid()} ("
    )
    assert "\n" not in line
    assert leftovers.pending(workdir) == [] and not list((workdir / "backings").iterdir())
    # ours only: another job's may be there
    assert not [r for r in rpc_registrations() or () if r[3] == port]
    assert _runtime_files_left(runtime_before) == set()


HOLDER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from iomatrix import children
    from iomatrix.backing.network import DiskRequest
    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing
    workdir = Path(sys.argv[1])
    table = json.loads(sys.argv[2])
    with children.record_in(workdir), provision(parse_backing(table), workdir, set()) as h:
        want = DiskRequest({"format": "qcow2"}, size_bytes=16 << 20, name="killed")
        disk = h.server.new_disk(want)
        print(json.dumps({"pids": h.server.server_pids(), "ports": getattr(h.server, "ports", {}),
                          "scratch": str(h.path), "url": disk.url}), flush=True)
        time.sleep(600)
""")


def _hold(workdir: Path, table: dict) -> tuple[subprocess.Popen, dict]:
    return hold_provisioned(HOLDER, workdir, table)


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_kill_9_of_the_run_then_clean_removes_servers_registrations_and_files(
    workdir: Path,
) -> None:
    runtime_before = _runtime_files()
    proc, state = _hold(workdir, {"type": "nfs"})
    pids = {int(p): role for p, role in state["pids"].items()}
    starts = {pid: proc_start(pid) for pid in pids}
    try:
        assert all(s is not None for s in starts.values())
        # the run is alive: untouched
        assert all(line.startswith("left alone") for line in clean(workdir))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # what `iomatrix clean` (and the next run) does
    out = run_cli("clean", "--workdir", str(workdir))
    assert out.returncode == 0 and "failed" not in out.stdout and "refused" not in out.stdout, (
        out.stdout + out.stderr
    )
    # ours outlived the kill (it drops to user _rpc, which clears the death signal)
    if "rpcbind" in pids.values():
        assert "unregistered RPC program 100003" in out.stdout or not {
            port for *_, port in rpc_registrations() or ()
        } & set(state["ports"].values())
    _assert_nothing_left(
        workdir, pids, starts, state["ports"], Path(state["scratch"]), runtime_before
    )


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_ctrl_c_of_the_run_tears_everything_down(workdir: Path) -> None:
    runtime_before = _runtime_files()
    proc, state = _hold(workdir, {"type": "nfs"})
    pids = {int(p): role for p, role in state["pids"].items()}
    starts = {pid: proc_start(pid) for pid in pids}
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) != 0
    _assert_nothing_left(
        workdir, pids, starts, state["ports"], Path(state["scratch"]), runtime_before
    )


@pytest.fixture
def host_rpcbind() -> Iterator[int | None]:
    """An rpcbind that is not iomatrix's, standing in for the host's own: the pid of one this
    fixture started (and stops), None when the host already runs one."""
    if rpc_registrations() is not None:
        yield None
        return
    runtime_before = _runtime_files()
    proc = subprocess.Popen(
        ["rpcbind", "-f"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while rpc_registrations() is None:
            assert proc.poll() is None and time.monotonic() < deadline, (
                "the host-like rpcbind did not start"
            )
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        # rpcbind's own: only one rpcbind can hold port 111
        for path in _runtime_files() - runtime_before:
            if RUNTIME_FILES[path] != "rpcbind":
                continue
            with contextlib.suppress(OSError):
                os.rmdir(path) if os.path.isdir(path) else os.unlink(path)


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_the_hosts_rpcbind_is_used_never_stopped_and_cleaned_of_a_killed_server(
    workdir: Path, host_rpcbind: int | None
) -> None:
    rpcbind_start = None if host_rpcbind is None else proc_start(host_rpcbind)
    with provision(NfsBacking(), workdir / "clean", set()) as handle:
        assert isinstance(handle.server, LabNfsServer) and handle.server.rpcbind is None
        assert list(handle.server.server_pids().values()) == ["ganesha.nfsd"]
        assert handle.metadata["rpcbind"] == "the host's"
    # a kill -9 leaves ganesha's registrations in the host's rpcbind: clean removes them, and only
    # them
    proc, state = _hold(workdir, {"type": "nfs"})
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ports = set(state["ports"].values())
    assert {port for *_, port in rpc_registrations() or ()} & ports, (
        "expected registrations left by the kill"
    )
    # until it is cleaned, a new lab server is refused, and told that the registration is stale and
    # how to go
    with pytest.raises(UserError) as err, provision(NfsBacking(), workdir / "meanwhile", set()):
        pass
    assert (
        "nothing listens there" in err.value.one_line()
        and "rpcinfo -d 100003 3" in err.value.one_line()
    )
    lines = clean(workdir)
    assert "unregistered RPC program 100003 version 3 from rpcbind on 127.0.0.1" in lines, lines
    regs = rpc_registrations()
    assert regs is not None and not {port for *_, port in regs} & ports
    # the portmapper itself still registered: rpcbind untouched
    assert any(prog == 100000 for prog, *_ in regs)
    if host_rpcbind is not None:
        assert proc_start(host_rpcbind) == rpcbind_start  # the same rpcbind process, never stopped


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_existing_mode_writes_only_its_own_file(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with provision(NfsBacking(), workdir / "server", set()) as lab:
        assert isinstance(lab.server, LabNfsServer)
        export = lab.server.export_dir
        precious = export / "precious.qcow2"
        precious.write_bytes(os.urandom(3 * MiB))
        before = hashlib.sha256(precious.read_bytes()).hexdigest()
        spec = parse_backing({"type": "nfs", "server": "127.0.0.1", "export": str(export)})
        client_wd = workdir / "client"
        with provision(spec, client_wd, set()) as handle:
            server = handle.server
            assert server is not None and not server.lab_started and server.server_pids() == {}
            for fmt in ("raw", "qcow2"):
                disk = server.new_disk(
                    DiskRequest({"format": fmt}, size_bytes=32 * MiB, name=f"e-{fmt}")
                )
                assert disk.server_path is None and disk.url.startswith(
                    f"nfs://127.0.0.1{export}/iomatrix-"
                )
                mine = export / disk.url.rsplit("/", 1)[-1]
                assert sorted(p.name for p in export.iterdir()) == sorted(
                    ["precious.qcow2", mine.name]
                )
                assert [e.kind for e in leftovers.pending(client_wd)].count("nfs_file") == 1
                _qemu_write_read(disk, "0x3c")
                server.remove_disk(disk)
                assert [p.name for p in export.iterdir()] == ["precious.qcow2"]
            # a name already taken on the export is an error, never a truncation
            with nfs.nfs_mounted("127.0.0.1", str(export)) as ex, pytest.raises(nfs.NfsError):
                ex.create_exclusive("precious.qcow2")
            # even a file that has exactly the name iomatrix would give is left as it is, and not
            # recorded
            squatter = export / f"iomatrix-{os.getpid()}-abcdef-coll.raw"
            squatter.write_bytes(b"not yours")
            monkeypatch.setattr(nfs_module.secrets, "token_hex", lambda n: "abcdef")
            with pytest.raises(UserError, match="NFS3ERR_EXIST"):
                server.new_disk(DiskRequest({"format": "raw"}, size_bytes=MiB, name="coll"))
            monkeypatch.undo()
            assert squatter.read_bytes() == b"not yours"
            assert [e.kind for e in leftovers.pending(client_wd)].count("nfs_file") == 0
            foreign = NetworkDisk("nfs", (), f"nfs://127.0.0.1{squatter}", "raw", MiB)
            with pytest.raises(UserError, match="not made by this NFS backing"):
                server.remove_disk(foreign)
            assert squatter.read_bytes() == b"not yours"
            squatter.unlink()
        assert leftovers.pending(client_wd) == []
        assert hashlib.sha256(precious.read_bytes()).hexdigest() == before


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_existing_mode_file_left_by_a_kill_9_is_removed_by_clean(workdir: Path) -> None:
    with provision(NfsBacking(), workdir / "server", set()) as lab:
        assert isinstance(lab.server, LabNfsServer)
        export = lab.server.export_dir
        (export / "precious.raw").write_bytes(b"keep" * 1024)
        client_wd = workdir / "client"
        proc, state = _hold(
            client_wd, {"type": "nfs", "server": "127.0.0.1", "export": str(export)}
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        name = state["url"].rsplit("/", 1)[-1]
        assert (export / name).exists()
        lines = clean(client_wd)
        assert f"removed {state['url']}" in lines, lines
        assert [p.name for p in export.iterdir()] == ["precious.raw"]
        assert (export / "precious.raw").read_bytes() == b"keep" * 1024


@needs_nfs_stack
@pytest.mark.usefixtures("host_nfs_free")
@root_only
@pytest.mark.slow
def test_existing_mode_ctrl_c_removes_its_file(workdir: Path) -> None:
    with provision(NfsBacking(), workdir / "server", set()) as lab:
        assert isinstance(lab.server, LabNfsServer)
        export = lab.server.export_dir
        (export / "precious.raw").write_bytes(b"keep" * 1024)
        client_wd = workdir / "client"
        proc, state = _hold(
            client_wd, {"type": "nfs", "server": "127.0.0.1", "export": str(export)}
        )
        assert (export / state["url"].rsplit("/", 1)[-1]).exists()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) != 0
        # removed at teardown, not left for clean
        assert [p.name for p in export.iterdir()] == ["precious.raw"]
        assert leftovers.pending(client_wd) == []
