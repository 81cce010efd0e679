"""Measure the host sampler's own CPU cost at 1 Hz and 10 Hz.

    python bench/sampler_cost.py [--seconds 20] [--device vda] [--pid PID] [--io-threads 64]

The sampler follows `--pid` (default: this process) as the load generator and, as the I/O path, a
child process holding `--io-threads` threads (default 64: QEMU's aio=threads pool at its maximum),
so every tick also reads the per-thread context-switch counters of /proc/<pid>/task/*/status that
cost per I/O needs.

Two measurements per rate:
  * thread: CPU time of the sampler thread itself (time.thread_time() inside
    the thread, exposed as HostSampler.cpu_seconds; the one baseline snapshot
    taken by start() in the caller's thread is not included);
  * process: this process's CPU time delta while the sampler runs and the main
    thread sleeps, minus the same delta over an equal idle period without a
    sampler (includes interpreter/GIL wake-up overhead).
Both are printed as % of one core. Target: < 1 % at 1 Hz. Prints numbers; not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from iomatrix.monitor.devices import resolve_device_chain
from iomatrix.monitor.sampler import HostSampler

TARGET_PCT_1HZ = 1.0


def _proc_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _idle_cpu(seconds: float) -> float:
    c0 = _proc_cpu()
    time.sleep(seconds)
    return _proc_cpu() - c0


def io_path_process(threads: int) -> subprocess.Popen[bytes]:
    """A stand-in I/O path: a process with `threads` idle threads (each has its own /proc task
    status)."""
    code = (
        "import threading, time\n"
        f"for _ in range({threads}): threading.Thread(target=time.sleep, args=(3600,), "
        "daemon=True).start()\n"
        "time.sleep(3600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(os.listdir(f"/proc/{proc.pid}/task")) < threads + 1:
        time.sleep(0.05)
    return proc


def measure(
    devices: list[str], hz: float, seconds: float, pid: int | None, io_pid: int | None
) -> tuple[float, float, int]:
    """(thread % of one core, process % of one core, samples)."""
    idle = _idle_cpu(min(seconds, 5.0)) * (seconds / min(seconds, 5.0))
    s = HostSampler(devices, interval=1.0 / hz)
    if pid is not None:
        s.attach_pid(pid, role="load")
    if io_pid is not None:
        s.attach_pid(io_pid)
    c0, w0 = _proc_cpu(), time.monotonic()
    s.start()
    time.sleep(seconds)
    samples = s.stop()
    wall = time.monotonic() - w0
    proc = max(0.0, _proc_cpu() - c0 - idle)
    return s.cpu_seconds / wall * 100.0, proc / wall * 100.0, len(samples)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="run length per rate (default 20)")
    ap.add_argument("--device", action="append", help="device chain (default: resolve /tmp)")
    ap.add_argument(
        "--pid", type=int, default=None, help="also sample this pid (default: this process)"
    )
    ap.add_argument("--rates", default="1,10", help="comma-separated Hz (default 1,10)")
    ap.add_argument(
        "--io-threads",
        type=int,
        default=64,
        help="threads of the stand-in I/O path process (0: no I/O path; default 64)",
    )
    args = ap.parse_args()
    devices = args.device or resolve_device_chain(Path("/tmp"))
    pid = args.pid if args.pid is not None else os.getpid()
    io = io_path_process(args.io_threads) if args.io_threads > 0 else None
    print(
        f"devices={devices} pid={pid} io-path threads={args.io_threads} seconds={args.seconds} "
        f"cpus={os.cpu_count()} python={sys.version.split()[0]}"
    )
    print(
        f"{'rate':>6} {'samples':>8} {'thread %core':>13} {'process %core':>14} {'per tick ms':>12}"
    )
    ok = True
    try:
        for hz in (float(x) for x in args.rates.split(",")):
            thread_pct, proc_pct, n = measure(
                devices, hz, args.seconds, pid, io.pid if io else None
            )
            per_tick_ms = thread_pct / 100.0 / hz * 1000.0
            print(
                f"{hz:>5g}Hz {n:>8d} {thread_pct:>12.3f}% {proc_pct:>13.3f}% {per_tick_ms:>12.3f}"
            )
            if hz == 1.0 and thread_pct >= TARGET_PCT_1HZ:
                ok = False
    finally:
        if io is not None:
            io.kill()
            io.wait()
    print(f"target: < {TARGET_PCT_1HZ}% of one core at 1 Hz -> {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
