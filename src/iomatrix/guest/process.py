"""Run guests: write a run's files, start QEMU, read its results port, wait with a timeout, kill.

A guest is started with `start_guest` (non-blocking: several can run at once) and finished with
`GuestHandle.wait`; `run_guest` does both. `run_guest_batch` boots one guest for several runs (each
its own fresh disk, serial `iomx-tNN`, own job; see init.sh), kills it when one run exceeds its
timeout, and returns one outcome per run. The command line comes from `guest.cmdline`, the job's
assignments from `guest.job`, and the results are read by `guest.stream`.

QEMU's stdout is ttyS1 (a pipe): a reader thread keeps it in `results.log` and stamps every mark
with the host clock as it arrives. ttyS0 goes to `console.log` in the run directory; its tail is
reported on failure. QEMU is a child of `iomatrix.children`: registered until reaped, killed with
iomatrix (parent-death signal), and killed by `kill_all_guests()` on interrupt."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from iomatrix import children
from iomatrix.errors import UserError
from iomatrix.guest.artifacts import GuestArtifacts
from iomatrix.guest.cmdline import build_argv, build_batch_argv, validate_batch
from iomatrix.guest.job import BUILTIN_KINDS, BatchRun, GuestJob, batch_env, job_env, validate_job
from iomatrix.guest.stream import (
    BatchOutcome,
    GuestCapture,
    GuestOutcome,
    batch_outcome,
    guest_outcome,
    mark_names,
)
from iomatrix.qemu_block import DiskSpec, validate_disk
from iomatrix.textfile import last_lines

CONSOLE_TAIL_LINES = 40


def console_tail(path: Path, lines: int = CONSOLE_TAIL_LINES) -> str:
    try:
        data = path.read_bytes()[-64 * 1024 :]
    except OSError:
        return ""
    return last_lines(data.decode("utf-8", "replace").replace("\r", ""), lines)


# --------------------------------------------------------------------------- live children


def kill_all_guests() -> int:
    """SIGKILL every child still running (QEMU, and whatever else this process started)."""
    return children.kill_all()


def live_guest_pids() -> list[int]:
    return children.live_pids()


# --------------------------------------------------------------------------- run


class _Reader(threading.Thread):
    """Reads QEMU's stdout (ttyS1), keeps it, and stamps each mark with the host clock on
    arrival."""

    def __init__(
        self, stream, sink: Path, on_line: Callable[[str, float], None] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.sink = sink
        self.on_line = on_line
        self.chunks: list[bytes] = []
        self.host_marks: dict[str, float] = {}

    def run(self) -> None:
        with open(self.sink, "wb") as out:
            for line in iter(self.stream.readline, b""):
                now = time.monotonic()
                self.chunks.append(line)
                out.write(line)
                text = line.decode("utf-8", "replace")
                for name in mark_names(text):
                    self.host_marks.setdefault(name, now)
                if self.on_line is not None:
                    self.on_line(text, now)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


class GuestHandle:
    """A started guest: `wait` for it (with a timeout), or `kill` it. Several may run at once."""

    def __init__(
        self,
        proc: subprocess.Popen,
        reader: _Reader,
        argv: list[str],
        run_dir: Path,
        job: GuestJob,
        t_spawn: float,
        stderr_file: object,
    ) -> None:
        self.proc = proc
        self.reader = reader
        self.argv = argv
        self.run_dir = run_dir
        self.job = job
        self.t_spawn = t_spawn
        self._stderr_file = stderr_file
        self._error: str | None = None
        self._t_exit: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self, why: str | None = None) -> None:
        if self.proc.poll() is None and why and self._error is None:
            self._error = why
        self._finish(kill=True)

    def _finish(self, kill: bool = False) -> None:
        if self._t_exit is None:
            self._t_exit = time.monotonic()
        if kill:
            children.kill(self.proc)
        children.release(self.proc)
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self._stderr_file.close()  # type: ignore[attr-defined]

    def wait(self, timeout: float) -> GuestOutcome:
        """Wait until the guest powers off (or kill it after `timeout` s) and read what it
        reported."""
        try:
            rc = self.proc.wait(timeout=timeout)
            self._t_exit = time.monotonic()
            if rc != 0 and self._error is None:
                self._error = f"QEMU exited with status {rc}"
        except subprocess.TimeoutExpired:
            self._t_exit = time.monotonic()
            self._error = (
                f"guest did not finish within {timeout:g} s: killed QEMU (pid {self.proc.pid})"
            )
        finally:
            self._finish(kill=True)
        return guest_outcome(self.capture(), self.job)

    def capture(self) -> GuestCapture:
        """What the finished guest left, for `guest.stream` to read (call after `wait`, `wait_batch`
        or `kill`)."""
        assert self._t_exit is not None
        error = self._error
        stderr_text = (self.run_dir / "qemu-stderr.log").read_text(errors="replace").strip()
        if error and stderr_text and "exited with status" in error:
            error += f": {stderr_text.splitlines()[-1]}"
        return GuestCapture(
            text=self.reader.text(),
            host_marks=dict(self.reader.host_marks),
            t_spawn=self.t_spawn,
            t_exit=self._t_exit,
            error=error,
            console_tail=console_tail(self.run_dir / "console.log"),
            argv=self.argv,
            pid=self.proc.pid,
        )

    def wait_batch(self, n_runs: int, run_timeout: float, poll_s: float = 0.2) -> int:
        """Wait for a multi-run boot: kill QEMU once a run (the first one with the boot) has taken
        longer than `run_timeout` s since the previous run ended. Returns how many runs reported
        their end."""

        def ended() -> int:
            return sum(1 for i in range(1, n_runs + 1) if f"run_end_r{i}" in self.reader.host_marks)

        try:
            while True:
                done = ended()
                last = max(
                    [self.t_spawn]
                    + [
                        self.reader.host_marks[f"run_end_r{i}"]
                        for i in range(1, done + 1)
                        if f"run_end_r{i}" in self.reader.host_marks
                    ]
                )
                left = last + run_timeout - time.monotonic()
                if left <= 0:
                    self._t_exit = time.monotonic()
                    self._error = (
                        f"guest run {done + 1} of {n_runs} did not finish within "
                        f"{run_timeout:g} s: "
                        f"killed QEMU (pid {self.proc.pid})"
                    )
                    break
                try:
                    rc = self.proc.wait(timeout=min(poll_s, left))
                except subprocess.TimeoutExpired:
                    continue
                self._t_exit = time.monotonic()
                if rc != 0 and self._error is None:
                    self._error = f"QEMU exited with status {rc}"
                break
        finally:
            self._finish(kill=True)
        return ended()


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a multi-run boot, after QEMU was killed: `batch` has the runs that
    reported their end (the run in flight and the ones after it are None)."""

    def __init__(self, batch: BatchOutcome) -> None:
        super().__init__()
        self.batch = batch


class HostGate:
    """Holds a multi-run guest before its first run until `ready()` has returned on the host.

    `ready` (e.g. removing the previous boot's images, sync + drop caches) runs in a thread from
    QEMU's spawn on, so it overlaps QEMU's start and the guest's boot; the guest marks `gate_wait`
    and reads a line from ttyS1, which the host writes once `ready` is done and the guest waits
    (repeatedly, until `gate_open` arrives: input sent before the guest opens the port is lost). So
    the host's own work never meets a measured run. `ready_s`: how long `ready` took; `waited_s`:
    how long the guest waited for it."""

    def __init__(self, ready: Callable[[], None]) -> None:
        self._ready = ready
        self._at_gate = threading.Event()
        self._opened = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.ready_s: float | None = None
        self.waited_s: float | None = None
        self._t_at_gate: float | None = None

    def on_line(self, text: str, now: float) -> None:
        if "@@IOMX:MARK:gate_wait:" in text:
            self._t_at_gate = now
            self._at_gate.set()
        if "@@IOMX:MARK:gate_open:" in text:
            self._opened.set()

    def start(self, proc: subprocess.Popen) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(proc,), name="iomatrix-host-gate", daemon=True
        )
        self._thread.start()

    def _run(self, proc: subprocess.Popen) -> None:
        t0 = time.monotonic()
        try:
            self._ready()
        # reported by the caller; the guest still runs (its runs are judged)
        except BaseException as err:
            self.error = err
        t_ready = time.monotonic()
        self.ready_s = round(t_ready - t0, 3)
        while proc.poll() is None and not self._at_gate.wait(0.1):
            pass
        if self._t_at_gate is not None:
            self.waited_s = round(max(0.0, t_ready - self._t_at_gate), 3)
        while proc.poll() is None and not self._opened.is_set():
            try:
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                break
            self._opened.wait(0.2)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


def _spawn(
    argv: list[str],
    run_dir: Path,
    job: GuestJob,
    on_line: Callable[[str, float], None] | None = None,
    stdin_pipe: bool = False,
) -> GuestHandle:
    (run_dir / "qemu.argv").write_text(shlex.join(argv) + "\n")
    (run_dir / "console.log").unlink(missing_ok=True)
    err = open(run_dir / "qemu-stderr.log", "wb")  # noqa: SIM115 - closed by the handle
    try:
        t_spawn = time.monotonic()
        # stdin is ttyS1's input: a pipe only when the host opens a gate with it (HostGate).
        proc = children.spawn(
            argv,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    except BaseException:
        err.close()
        raise
    reader = _Reader(proc.stdout, run_dir / "results.log", on_line)
    reader.start()
    return GuestHandle(
        proc, reader, argv, run_dir=run_dir, job=job, t_spawn=t_spawn, stderr_file=err
    )


def start_guest(
    artifacts: GuestArtifacts,
    accel: str,
    disk: DiskSpec | None,
    job: GuestJob,
    run_dir: Path,
    wrapper: list[str] | None = None,
    memory_mb: int = 512,
    extra_args: list[str] | None = None,
    on_line: Callable[[str, float], None] | None = None,
    machine: str = "pc",
) -> GuestHandle:
    """Boot one guest that will run `job` against `disk`, and return at once.

    `on_line(text, host_monotonic_time)` is called from the reader thread for every ttyS1 line as it
    arrives (a tier that acts on the guest's progress, e.g. cuts it at an acknowledgement).

    Files written to `run_dir`: console.log, results.log (ttyS1), job.env, job.fio, qemu-stderr.log,
    qemu.argv.
    """
    validate_job(job)
    if disk is not None:
        validate_disk(disk)
    # kind scripts decide for themselves
    if disk is None and job.kind in BUILTIN_KINDS and job.kind != "boot":
        raise UserError(f"a {job.kind} job needs a disk", hint="pass a DiskSpec")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.env").write_text(job_env(artifacts, disk, job, machine))
    if job.kind == "fio":
        (run_dir / "job.fio").write_text(
            job.fio_job if job.fio_job.endswith("\n") else job.fio_job + "\n"
        )
    for name, text in job.files.items():
        (run_dir / f"file-{name}").write_text(text)
    argv = build_argv(
        artifacts=artifacts,
        accel=accel,
        disk=disk,
        job=job,
        run_dir=run_dir,
        memory_mb=memory_mb,
        wrapper=wrapper,
        extra_args=extra_args,
        machine=machine,
    )
    return _spawn(argv, run_dir, job, on_line)


def run_guest(
    artifacts: GuestArtifacts,
    accel: str,
    disk: DiskSpec | None,
    job: GuestJob,
    run_dir: Path,
    timeout: float,
    on_start: Callable[[int], None] | None = None,
    wrapper: list[str] | None = None,
    memory_mb: int = 512,
    machine: str = "pc",
) -> GuestOutcome:
    """Boot one guest, run `job` against `disk`, and return what happened.

    The guest is killed by its pid after `timeout` seconds (ok=False, console tail kept).
    """
    with children.SigtermGuard():
        handle = start_guest(
            artifacts,
            accel,
            disk,
            job,
            run_dir,
            wrapper=wrapper,
            memory_mb=memory_mb,
            machine=machine,
        )
        try:
            if on_start is not None:
                on_start(handle.pid)
            return handle.wait(timeout)
        finally:
            handle.kill()


def start_guest_batch(
    artifacts: GuestArtifacts,
    accel: str,
    runs: list[BatchRun],
    run_dir: Path,
    wrapper: list[str] | None = None,
    memory_mb: int = 512,
    machine: str = "pc",
    gate: HostGate | None = None,
) -> GuestHandle:
    """Boot one guest that runs `runs` one after another, each on its own disk, and return at
    once."""
    validate_batch(runs, machine)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    boot_env, per_run = batch_env(artifacts, runs, machine, gate=gate is not None)
    (run_dir / "job.env").write_text(boot_env)
    for i, (r, env) in enumerate(zip(runs, per_run, strict=True), 1):
        (run_dir / f"job{i}.env").write_text(env)
        if r.job.kind == "fio":
            text = r.job.fio_job
            (run_dir / f"job{i}.fio").write_text(text if text.endswith("\n") else text + "\n")
    argv = build_batch_argv(
        artifacts=artifacts,
        accel=accel,
        runs=runs,
        run_dir=run_dir,
        memory_mb=memory_mb,
        wrapper=wrapper,
        machine=machine,
    )
    handle = _spawn(
        argv,
        run_dir,
        GuestJob(kind="batch"),
        None if gate is None else gate.on_line,
        stdin_pipe=gate is not None,
    )
    if gate is not None:
        gate.start(handle.proc)
    return handle


def _batch_outcome(handle: GuestHandle, runs: list[BatchRun], machine: str) -> BatchOutcome:
    return batch_outcome(handle.capture(), [r.job for r in runs], machine)


def run_guest_batch(
    artifacts: GuestArtifacts,
    accel: str,
    runs: list[BatchRun],
    run_dir: Path,
    run_timeout: float,
    on_start: Callable[[int], None] | None = None,
    wrapper: list[str] | None = None,
    memory_mb: int = 512,
    machine: str = "pc",
    host_ready: Callable[[], None] | None = None,
) -> BatchOutcome:
    """Boot one guest for several runs. A run that takes longer than `run_timeout` s (the first one
    including the boot) gets QEMU killed: runs that ended are kept, the run in flight fails, the
    runs that never started come back as None. `host_ready`: host work that may overlap the boot but
    no run (see `HostGate`); it has returned when this returns, and its time is in `boot_phases`
    (`host_ready_s`, `gate_wait_s`: how long the guest waited for it)."""
    gate = None if host_ready is None else HostGate(host_ready)
    with children.SigtermGuard():
        try:
            handle = start_guest_batch(
                artifacts,
                accel,
                runs,
                run_dir,
                wrapper=wrapper,
                memory_mb=memory_mb,
                machine=machine,
                gate=gate,
            )
        except BaseException:
            if host_ready is not None:
                host_ready()  # it must have run when this returns, boot or not
            raise
        try:
            if on_start is not None:
                on_start(handle.pid)
            # kills QEMU on its way out, interrupted or not
            handle.wait_batch(len(runs), run_timeout)
        except KeyboardInterrupt as intr:
            handle.kill()  # also when the interrupt came before wait_batch
            if gate is not None:
                gate.join()
            try:
                partial = _batch_outcome(handle, runs, machine)
            # what the guest reported cannot be read: the interrupt itself still stops us
            except Exception:
                raise intr from None
            partial.runs = [
                r if f"run_end_r{i}" in handle.reader.host_marks else None
                for i, r in enumerate(partial.runs, 1)
            ]
            raise BatchInterrupted(partial) from intr
        finally:
            handle.kill()
            if gate is not None:
                gate.join()
        out = _batch_outcome(handle, runs, machine)
        if gate is not None:
            if gate.ready_s is not None:
                out.boot_phases["host_ready_s"] = gate.ready_s
            if gate.waited_s is not None:
                out.boot_phases["gate_wait_s"] = gate.waited_s
            if gate.error is not None:
                raise gate.error
        return out
