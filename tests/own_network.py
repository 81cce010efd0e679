"""A network and mount namespace of a test's own for the lab servers an `iomatrix` CLI run starts,
and the machine-wide lock for the tests that start a lab NFS server in the test process instead
(issue 67).

Why: a lab NFS server needs rpcbind on port 111 and registers program 100003 there, and the product
refuses to start one while another is registered (backing/nfs.py). On the host that is one lab NFS
server per machine at a time: two test suites side by side refused each other's ("an NFS server is
already registered with rpcbind"). In a network namespace of its own, a run's rpcbind, ganesha,
tgtd, nbdkit and QEMU have their own 127.0.0.1 and their own port 111. A network namespace alone
does not separate two rpcbinds, though: rpcbind's /run/rpcbind.sock and /run/rpcbind.lock are files,
so the namespace comes with a mount namespace whose /run is an empty tmpfs of its own (propagation
private: nothing mounted inside reaches the host, and it goes with the namespace).

What the CLI and its children keep in /run, all of it the run's own and so at home in a fresh /run:
rpcbind's socket, lock and state directory (/run/rpcbind), ganesha's /run/ganesha, tgtd's control
sockets (/run/tgtd/socket.N, socket.N.lock). The directories the host has for them are made again,
same owner and mode (rpcbind drops to its own user). iomatrix's own locks are beside the results
database and in the workdir (src/iomatrix/locks.py), IOMATRIX_STATE and IOMATRIX_CACHE are
directories of their own, and QEMU's guest agent sockets are in the test's tmp dir: all on the same
filesystems inside as outside, so nothing needs binding back.

One namespace per test, held by a sleeping process; every command the test runs in it (a run, the
next run after a kill, `clean`, `rpcinfo`) enters it with nsenter, so they see the same servers, as
commands on one host do. nsenter enters without forking: the command keeps the pid the test started,
so its process group, its descendants and a kill of it are what they were. On exit the holder is
stopped, a process the test's runs left in the namespace is killed and named (an AssertionError, as
any other leftover), and the namespace is gone once no process is in it (a bounded wait)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bounded_flock import flock_within
from tests.conftest import iomatrix_argv

# The directories of the host's /run that the lab's daemons expect to find (made again, empty).
RUN_DIRS = ("lock", "rpcbind", "tgtd")
HOST_ADDRESS = "192.0.2.1"
READY_S = 30.0  # unshare and a tmpfs mount take milliseconds; bounded for a loaded host
GONE_S = 60.0  # a killed process is gone in milliseconds; QEMU flushing to a disk can take longer
SETTLE_S = 10.0  # a server whose run just stopped it may still be exiting


def _namespace_of(pid: int | str) -> tuple[int, int] | None:
    """The network namespace of process `pid` (its nsfs device and inode), None once it exited (a
    zombie has left its namespaces)."""
    try:
        st = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def listening_sockets(pid: int | str) -> dict[int, int]:
    """Socket inode → port of every listening TCP socket in the network namespace of process `pid`
    (its /proc/PID/net, not the reader's /proc/net)."""
    found = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                    found[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return found


@dataclass
class OwnNetwork:
    """A network + mount namespace held by `holder`; commands run in it through `argv`."""

    holder: subprocess.Popen
    namespace: tuple[int, int]

    def argv(self, command: list[str], cwd: Path | None = None) -> list[str]:
        """`command` run inside the namespace, in `cwd` (entering a mount namespace moves a process
        to its root, so the directory is named again: the same path, the same filesystem)."""
        return [
            "nsenter",
            f"--target={self.holder.pid}",
            "--net",
            "--mount",
            f"--wd={cwd or os.getcwd()}",
            "--",
            *command,
        ]

    def run(
        self, command: list[str], cwd: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, cwd),
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout,
            env={**os.environ, "COLUMNS": "200"},
        )

    def run_cli(
        self, *args: str, cwd: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """tests.conftest.run_cli, inside the namespace."""
        return self.run([*iomatrix_argv(), *args], cwd=cwd, timeout=timeout)

    def pids(self) -> list[int]:
        """The live processes in the namespace other than its holder."""
        found = []
        for entry in Path("/proc").iterdir():
            if (
                entry.name.isdigit()
                and int(entry.name) != self.holder.pid
                and _namespace_of(entry.name) == self.namespace
            ):
                found.append(int(entry.name))
        return found

    def processes(self) -> list[str]:
        """Each live process in the namespace other than its holder, as "pid command"."""
        out = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                out.append(f"{pid} {argv[0].decode(errors='replace')}")
        return out


def _bounded(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _setup_script() -> str:
    """The holder's shell: loopback up, /run an empty tmpfs with RUN_DIRS made again as the host
    has them, then say so and sleep until stopped."""
    steps = [
        "ip link set lo up",
        # an address besides 127.0.0.1, as a host has: getaddrinfo's AI_ADDRCONFIG, which
        # ganesha's configuration parser uses, finds no IPv4 address at all without one ("No IP
        # address found for 127.0.0.1"); TEST-NET-1, reachable from nowhere
        f"ip addr add {HOST_ADDRESS}/32 dev lo",
        "mount -t tmpfs -o mode=0755 tmpfs /run",
        "ln -s /dev/shm /run/shm",
    ]
    for name in RUN_DIRS:
        with contextlib.suppress(OSError):
            st = os.stat(f"/run/{name}")
            mode = f"{st.st_mode & 0o7777:o}"
            steps.append(
                f"install -d -m {mode} -o {st.st_uid} -g {st.st_gid} {shlex.quote('/run/' + name)}"
            )
    return " && ".join([*steps, "echo ready", "exec sleep infinity"])


@contextlib.contextmanager
def own_network() -> Iterator[OwnNetwork]:
    """A network and mount namespace for one test's CLI runs (module docstring); gone on exit."""
    holder = subprocess.Popen(
        [
            "unshare",
            "--net",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _setup_script(),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        # unshare and the script exec: the holder's pid is the sleeping process in the namespace
        ready = holder.stdout.readline().strip() == "ready"
        namespace = _namespace_of(holder.pid)
    except BaseException:
        holder.kill()
        holder.communicate()
        raise
    if not ready or namespace is None or namespace == _namespace_of("self"):
        holder.kill()
        _, err = holder.communicate(timeout=READY_S)
        pytest.fail(f"could not make the test's own network namespace: {err.strip()}")
    ns = OwnNetwork(holder, namespace)
    failed = False
    try:
        yield ns
    except BaseException:
        failed = True
        raise
    finally:
        # a server its run just stopped may still be exiting: only one still there after a while
        # was left
        _bounded(lambda: not ns.pids(), SETTLE_S)
        left = ns.processes()
        holder.kill()
        holder.communicate()
        for pid in ns.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        gone = _bounded(lambda: not ns.pids(), GONE_S)
        if not failed:
            assert not left, f"left running in the test's own network namespace: {left}"
            assert gone, (
                f"still in the test's own network namespace after {GONE_S:g} s: {ns.pids()}"
            )


# ---------------------------------------------------------------------------------------------
# the host's lab NFS: one test session at a time
# ---------------------------------------------------------------------------------------------

# Tests that start a lab NFS server in the test process itself (test_nfs_backing's, which are about
# the host's rpcbind, and test_network_disks' in-process ones) use the host's rpcbind: one of them
# per machine at a time, across test sessions, which this lock makes wait instead of refusing each
# other. Bounded: a lab NFS test takes seconds to a few minutes (a TCG guest on the export).
HOST_NFS_LOCK = Path("/run/lock/iomatrix-tests-nfs.lock")
HOST_NFS_LOCK_WAIT_S = 1200.0


@contextlib.contextmanager
def host_lab_nfs() -> Iterator[None]:
    """Hold the machine-wide lock of the host's lab NFS server for one test (bounded wait; a test
    that waited too long fails naming the holder)."""
    path = HOST_NFS_LOCK if HOST_NFS_LOCK.parent.is_dir() else Path("/tmp") / HOST_NFS_LOCK.name
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not flock_within(fd, fcntl.LOCK_EX, HOST_NFS_LOCK_WAIT_S, 1.0):
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            pytest.fail(
                f"another test session held the host's lab NFS lock {path} for over "
                f"{HOST_NFS_LOCK_WAIT_S:g} s (held by: {holder or 'unknown'}); a lab NFS "
                "server of this test beside it would be refused by rpcbind: wait for it, "
                "or stop it",
                pytrace=False,
            )
        me = f"pid {os.getpid()} ({' '.join(sys.argv)[:200]})\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        yield
    finally:
        os.close(fd)  # drops the lock
