"""Every child process iomatrix starts that does I/O (fio, QEMU, qemu-storage-daemon, nbdkit), in
one place.

Three promises, kept here and nowhere else:

* a child dies with us: it is started with ``PR_SET_PDEATHSIG = SIGKILL``, so even a ``kill -9`` of
  iomatrix stops the I/O at once instead of leaving fio writing to a backing that ``clean`` then
  cannot unmount;
* a child is registered until it is reaped, so an interrupt, SIGTERM or interpreter exit kills every
  one still alive (:func:`kill_all`, also registered with ``atexit``);
* a child runs in a session of its own, so the terminal's Ctrl-C reaches iomatrix only and iomatrix
  decides the order of teardown;
* during a sweep (:func:`record_in`) every child is in the workdir's leftovers ledger, by pid and
  start time, from just after its fork until it is reaped: if the parent-death signal ever misses
  one, the next ``run`` or ``clean --workdir`` kills exactly that process (a reused pid has another
  start time and is left alone).

fio's jobs run as threads of the fio process (fio.jobs.THREAD_LINE), so that one pid is all of its
I/O."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

_LIVE: dict[int, subprocess.Popen] = {}
_LOCK = threading.Lock()
# The workdir whose ledger records each child (record_in), and each recorded child's ledger entry.
_LEDGER: list[Path] = []
_ENTRY_OF: dict[int, tuple[Path, str]] = {}
_PR_SET_PDEATHSIG = 1


# Signals iomatrix handles in Python (Ctrl-C, and SIGTERM during a sweep).
_HANDLED = {signal.SIGINT, signal.SIGTERM}


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # the parent died before the signal was armed: nobody would ever send it
    if os.getppid() != parent:
        os._exit(1)
    # Blocked by spawn() across the fork: take the default action from here on (exec would reset the
    # handlers anyway), then let a signal that arrived meanwhile act on this child as on any process
    # of the group.
    for signum in _HANDLED:
        with contextlib.suppress(Exception):
            signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)


def spawn(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Start a registered child that is killed by the kernel if iomatrix dies.

    A signal sent to iomatrix's process group while the child is forked but has not yet left the
    group would run iomatrix's Python handlers inside the forked copy (a KeyboardInterrupt traceback
    from the child on iomatrix's stderr): the signals are blocked across the fork and the child is
    registered before they are let through, so the parent's handler then sees a child it will tear
    down."""
    popen_kwargs.setdefault("start_new_session", True)
    parent = os.getpid()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
    with _deferred_handlers() as deferred:
        try:
            proc = subprocess.Popen(
                list(argv), preexec_fn=lambda: _die_with_parent(parent), **popen_kwargs
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        with _LOCK:
            _LIVE[proc.pid] = proc
    try:
        # A Ctrl-C or SIGTERM that came while the child started is raised here, once `proc` is held:
        # the caller never gets `proc` if this raises, so the child is stopped here (a fio left
        # running went on to lay out its data file after teardown).
        for signum in deferred:
            signal.raise_signal(signum)
        _record(proc, argv)  # a child the ledger cannot name must not run either
    except BaseException:
        kill(proc)
        raise
    return proc


@contextlib.contextmanager
def _deferred_handlers() -> Iterator[list[int]]:
    """Hold back iomatrix's Python handlers of SIGINT and SIGTERM; yields the signals that came
    meanwhile.

    Blocking the signals in this thread is not enough: the process's other threads (the host
    sampler) still take a signal sent to the process, and Python then runs the handler in the main
    thread at any bytecode, e.g. inside Popen after the fork, where nothing holds the child yet.
    Only the main thread runs Python handlers, so only there is there anything to hold back."""
    deferred: list[int] = []
    saved: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _HANDLED:
            current = signal.getsignal(signum)
            if callable(current):  # SIG_DFL and SIG_IGN act in the kernel, not here
                saved[signum] = signal.signal(signum, lambda n, _frame: deferred.append(n))
    try:
        yield deferred
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _record(proc: subprocess.Popen, argv: Sequence[str]) -> None:
    if not _LEDGER:
        return
    from iomatrix.backing.leftovers import record_process

    workdir = _LEDGER[-1]
    entry = record_process(workdir, proc.pid, Path(str(argv[0])).name)
    if entry is not None:
        with _LOCK:
            _ENTRY_OF[proc.pid] = (workdir, entry)


@contextlib.contextmanager
def record_in(workdir: Path) -> Iterator[None]:
    """Record every child started meanwhile in `workdir`'s leftovers ledger (a sweep holds the
    workdir's lock)."""
    _LEDGER.append(Path(workdir))
    try:
        yield
    finally:
        _LEDGER.pop()


def release(proc: subprocess.Popen) -> None:
    """Forget a child that has been reaped (and its ledger entry)."""
    with _LOCK:
        _LIVE.pop(proc.pid, None)
        entry = _ENTRY_OF.pop(proc.pid, None) if proc.returncode is not None else None
    if entry is not None:
        from iomatrix.backing.leftovers import release as release_entry

        # a ledger that cannot be written now keeps it: clean forgets it
        with contextlib.suppress(Exception):
            release_entry(entry[0], entry[1], durable=False)


def kill(proc: subprocess.Popen, *, tree: bool = False, grace_s: float = 0.0) -> None:
    """Stop a child (and, with `tree`, every descendant: fio's job processes sit in sessions of
    their own), reap it and forget it. `grace_s` > 0 sends SIGTERM first."""
    if tree:
        terminate_tree(proc.pid, grace_s=grace_s or 3.0)
    elif proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM if grace_s else signal.SIGKILL)
        if grace_s:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=30)
    release(proc)


def kill_all() -> int:
    """SIGKILL every registered child still alive; returns how many there were."""
    with _LOCK:
        procs = list(_LIVE.values())
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(Exception):
            p.wait(timeout=10)
        release(p)
    return len(procs)


atexit.register(kill_all)


def live_pids() -> list[int]:
    with _LOCK:
        return list(_LIVE)


def wait_listening(
    proc: subprocess.Popen, pid_file: Path, socket: Path, timeout_s: float, poll_s: float = 0.005
) -> str | None:
    """Wait until a server child (qemu-storage-daemon, nbdkit) has written its pid file and created
    its UNIX socket, which both do only once they accept connections. None when ready; else why not
    (it exited, or it was not ready within `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            return f"exited with status {proc.returncode}"
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() and socket.exists():
                return None
        if time.monotonic() > deadline:
            return f"was not ready within {timeout_s:g} s"
        time.sleep(poll_s)


def terminate_tree(pid: int, grace_s: float = 3.0) -> None:
    """Stop a process and every descendant: SIGTERM, then SIGKILL after `grace_s`.

    fio puts each job process in a session of its own (setsid), so killing fio's process group would
    orphan the job still writing to the backing; walking the tree finds them.
    """
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)


class SigtermGuard:
    """While a child runs in the main thread, turn SIGTERM into SystemExit so `finally` blocks run
    (unless someone, e.g. the sweep runner, already handles SIGTERM)."""

    def __init__(self) -> None:
        self.installed = False
        self.previous: object = None

    def __enter__(self) -> SigtermGuard:
        if threading.current_thread() is threading.main_thread():
            prev = signal.getsignal(signal.SIGTERM)
            if prev in (signal.SIG_DFL, None):
                self.previous = prev
                signal.signal(signal.SIGTERM, self._handler)
                self.installed = True
        return self

    @staticmethod
    def _handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            signal.signal(
                signal.SIGTERM, signal.SIG_DFL if self.previous is None else self.previous
            )
