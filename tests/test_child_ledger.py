"""Every child a sweep starts is in the workdir's ledger until it is reaped, and a `clean` after the
sweep died kills exactly the children still running, never a process that reuses a recorded pid
(issue 38)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from iomatrix import children
from iomatrix.backing import leftovers
from iomatrix.backing.leftover_kinds import ProcessLeftover, proc_start
from tests.conftest import root_only, run_cli


def _processes(workdir: Path) -> list[leftovers.Entry]:
    return [e for e in leftovers.pending(workdir) if e.kind == "process"]


def test_a_child_is_in_the_ledger_from_its_start_until_it_is_reaped(tmp_path: Path) -> None:
    with children.record_in(tmp_path):
        proc = children.spawn(["sleep", "600"])
        try:
            [entry] = _processes(tmp_path)
            assert entry.target == str(proc.pid) and entry.info == {
                "start": proc_start(proc.pid),
                "program": "sleep",
            }
        finally:
            children.kill(proc)
    assert _processes(tmp_path) == []
    outside = children.spawn(["true"])  # no sweep: nothing recorded
    outside.wait()
    children.release(outside)
    assert leftovers.pending(tmp_path) == []


# A sweep that is SIGKILLed after starting a child that escaped the parent-death signal (as fio's
# forked job processes did): the child clears the signal and then becomes `sleep`.
_KILLED_SWEEP = textwrap.dedent("""
    import ctypes, os, signal, sys
    from pathlib import Path
    from iomatrix import children
    escape = ("import ctypes, os; ctypes.CDLL(None).prctl(1, 0); "
              "os.execvp('sleep', ['sleep', '600'])")
    with children.record_in(Path(sys.argv[1])):
        proc = children.spawn([sys.executable, "-c", escape])
        print(proc.pid, flush=True)
        sys.stdin.readline()  # until the test saw the child become `sleep`
        os.kill(os.getpid(), signal.SIGKILL)
""")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _our_python_env() -> dict[str, str]:
    """The environment for a child Python that imports iomatrix from where these tests import it."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def test_clean_kills_a_child_the_killed_sweep_left_running_and_only_it(tmp_path: Path) -> None:
    sweep = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SWEEP, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_our_python_env(),
    )
    assert sweep.stdout is not None and sweep.stdin is not None
    pid = int(sweep.stdout.readline())
    try:
        for _ in range(6000):  # bounded (60 s): wait for the exec, an event
            if _comm(pid) == "sleep":
                break
            time.sleep(0.01)
        assert _comm(pid) == "sleep"
        sweep.stdin.write("go\n")
        sweep.stdin.flush()
        assert sweep.wait(timeout=60) == -signal.SIGKILL
        assert proc_start(pid) is not None  # it survived its sweep: only the ledger knows it
        # a process of the same program that is not ours
        bystander = subprocess.Popen(["sleep", "600"])
        try:
            out = run_cli("clean", "--workdir", str(tmp_path))
            assert out.returncode == 0, out.stdout + out.stderr
            # named by the program iomatrix started
            assert f"killed python process {pid}" in out.stdout
            assert proc_start(pid) is None and bystander.poll() is None
            assert _processes(tmp_path) == []
        finally:
            bystander.kill()
            bystander.wait()
    finally:
        if proc_start(pid) is not None:
            os.kill(pid, signal.SIGKILL)


def test_a_reused_pid_is_never_killed() -> None:
    other = subprocess.Popen(["sleep", "600"])
    try:
        start = proc_start(other.pid)
        assert start is not None
        stale = ProcessLeftover(str(other.pid), {"start": start - 1, "program": "fio"})
        assert not stale.present() and stale.undo() == []
        assert other.poll() is None
        assert (
            ProcessLeftover("1", {"start": 0, "program": "fio"}).identity_problem("/w") is not None
        )
        assert (
            ProcessLeftover("x", {"start": 0, "program": "fio"}).identity_problem("/w") is not None
        )
        assert (
            ProcessLeftover(str(other.pid), {"start": start, "program": "fio"}).identity_problem(
                "/w"
            )
            is None
        )
    finally:
        other.kill()
        other.wait()


def test_clean_of_a_workdir_that_does_not_exist_says_so(tmp_path: Path) -> None:
    out = run_cli("clean", "--workdir", str(tmp_path / "nonexistent"))
    assert (
        out.returncode != 0
        and "does not exist" in out.stderr
        and "nothing left behind" not in out.stdout
    )
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    (tmp_path / "file").write_text("")
    out = run_cli("clean", "--workdir", str(tmp_path / "file"))
    assert out.returncode != 0 and "not a directory" in out.stderr


@root_only
def test_a_refused_teardown_suggests_a_clean_command_that_works(tmp_path: Path) -> None:
    import shlex

    import pytest

    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing
    from iomatrix.errors import UserError

    workdir = tmp_path / "wk"
    busy = None
    try:
        with (
            pytest.raises(UserError) as err,
            provision(parse_backing({"type": "tmpfs", "size": "8M"}), workdir, set()) as h,
        ):
            # keeps the mount busy: teardown refuses
            busy = subprocess.Popen(["sleep", "600"], cwd=h.path)
        assert err.value.hint is not None
        argv = shlex.split(err.value.hint.removeprefix("run: "))
        assert argv == ["iomatrix", "clean", "--workdir", str(workdir)]
        assert busy is not None
        busy.kill()
        busy.wait()
        # This test is the sweep, still alive: the suggested command is accepted and leaves its
        # entries alone.
        out = run_cli(*argv[1:])
        assert out.returncode == 1 and "left alone" in out.stdout, out.stdout + out.stderr
    finally:
        if busy is not None and busy.poll() is None:
            busy.kill()
            busy.wait()
        leftovers.clean(workdir, mine=True)


# A Ctrl-C that arrives while spawn() forks: a wrapper inside Popen sends SIGINT to this process
# right after the child started, while Popen has not returned, i.e. exactly the moment a terminal's
# Ctrl-C can land. The KeyboardInterrupt then comes out of spawn() itself, so its caller never holds
# the child.
_CTRL_C_DURING_FORK = textwrap.dedent("""
    import os, signal, subprocess, sys, threading, time
    from iomatrix import children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # Another thread, as the host sampler is during a sweep: the kernel hands it the signal the main thread
    # blocks, and Python then runs the handler in the main thread wherever it is, here inside Popen.
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    started = []
    real = subprocess.Popen._execute_child
    def fork_then_ctrl_c(self, *a, **k):
        real(self, *a, **k)
        started.append(self.pid)
        os.kill(os.getpid(), signal.SIGINT)
    subprocess.Popen._execute_child = fork_then_ctrl_c
    try:
        children.spawn(["sleep", "600"])
        print("no interrupt")
    except KeyboardInterrupt:
        pid = started[0]
        try:
            reaped = os.waitpid(pid, os.WNOHANG)[0] == pid
        except ChildProcessError:
            reaped = True  # already reaped by spawn()
        print(pid, reaped, pid in children.live_pids())
""")  # noqa: E501


def test_a_ctrl_c_during_the_fork_stops_the_child_its_caller_never_got() -> None:
    """The bare-metal tier's interrupt test once found a fio data file after a Ctrl-C: the signal,
    blocked across the fork, was raised by spawn()'s unblocking, so no caller's `except` stopped the
    fio it started."""
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_DURING_FORK],
        capture_output=True,
        text=True,
        timeout=120,
        env=_our_python_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pid, reaped, live = done.stdout.split()
    try:
        assert (reaped, live) == ("True", "False"), done.stdout
        assert proc_start(int(pid)) is None  # not running: stopped, not left to the exit handler
    finally:
        if proc_start(int(pid)) is not None:
            os.kill(int(pid), signal.SIGKILL)
