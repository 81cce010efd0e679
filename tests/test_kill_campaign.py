"""Issue 38's kill campaign: SIGKILL a sweep's whole process group while fio runs (on bare metal and
on QEMU's block layer), again and again; the next `run` and then `clean --workdir` must leave no fio
or qemu-storage-daemon of that workdir running and no loop device or mount of it. Before: 2 of 20
kills left the block layer's forked fio job processes running with parent 1, and neither `run` nor
`clean` removed them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import iomatrix_argv, needs, root_only, run_cli
from tests.kill_campaigns import loops_and_mounts

# quick-style: bare metal and the block layer on an ext4 loop filesystem, in one workdir, a plan per
# tier (the kills alternate between them: a sweep runs one run at a time, and its first run would be
# the same tier every time). Each run would write for 10 minutes, so every kill lands in a running
# sweep (an event decides when, never a delay) and a process that escaped the kill is still writing
# when the next `run` or `clean` is checked.
PLAN = """name = "kill-campaign-{tier}"
description = "one tier on a loop filesystem, killed while fio runs"
tier = ["{tier}"]
format = ["raw"]
cache = ["none", "writeback"]
aio = ["threads"]
workloads = ["rand-write-4k", "rand-read-4k"]
size = "16M"
image_size = "64M"
runtime = 600
time_budget = "2h"
retry_disturbed = false
[repetitions]
min = 50
max = 50
[[backing]]
type = "loopfs"
fs = "ext4"
size = "384M"
"""
KILLS = 6
# the bound on waiting for an event (a loaded 2-core host starts a sweep in well under this)
WAIT_S = 300
OURS = ("fio", "qemu-storage-daemon")


def _ours_running(work: Path) -> dict[int, str]:
    """fio and qemu-storage-daemon processes working in `work` (their cwd is a run directory in
    it)."""
    found = {}
    for p in psutil.process_iter(["name", "status"]):
        try:
            if (
                p.info["name"] in OURS
                and p.info["status"] != psutil.STATUS_ZOMBIE
                and Path(p.cwd()).is_relative_to(work)
            ):
                found[p.pid] = p.info["name"]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


WRITING_BYTES = 1 << 20  # fio's jobs run: the process doing the I/O has written this much


def _wait_for_fio(
    sweep: subprocess.Popen, block_layer: bool, writing: bool
) -> list[psutil.Process]:
    """The sweep's processes once a fio of it runs (`writing`: once it does I/O, through a
    qemu-storage-daemon for a block-layer run: then the daemon is the one writing the image)."""
    deadline = time.monotonic() + WAIT_S
    writer = "qemu-storage-daemon" if block_layer and writing else "fio"
    least = WRITING_BYTES if writing else 0
    while time.monotonic() < deadline and sweep.poll() is None:
        procs = _descendants(sweep.pid)
        names, written = set(), 0
        for p in procs:
            try:
                names.add(p.name())
                if p.name() == writer:
                    written = max(written, p.io_counters().write_chars)
            except psutil.NoSuchProcess:
                continue
        if "fio" in names and writer in names and written >= least:
            return procs
        time.sleep(0.05)
    raise AssertionError(
        f"no {'block-layer ' if block_layer else ''}fio of the sweep within {WAIT_S} s "
        f"(sweep exit status {sweep.poll()})"
    )


@pytest.mark.slow
@root_only
@needs("fio")
@needs("qemu-storage-daemon")
def test_killed_sweeps_leave_no_process_loop_device_or_mount_behind(tmp_path: Path) -> None:
    work = (tmp_path / "wk").resolve()
    for tier in ("baremetal", "blocklayer"):
        (tmp_path / f"{tier}.toml").write_text(PLAN.format(tier=tier))
    killed_children: list[psutil.Process] = []
    try:
        for kill in range(KILLS + 1):
            # Block layer while fio writes, bare metal while fio writes, block layer just after fio
            # started.
            tier, writing = [("blocklayer", True), ("baremetal", True), ("blocklayer", False)][
                kill % 3
            ]
            argv = [
                *iomatrix_argv(),
                "run",
                str(tmp_path / f"{tier}.toml"),
                "--db",
                str(tmp_path / f"{tier}.sqlite"),
                "--workdir",
                str(work),
            ]
            sweep = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
            try:
                procs = _wait_for_fio(sweep, block_layer=tier == "blocklayer", writing=writing)
                # This run reclaimed what the previous kill left: nothing of it runs any more.
                survivors = [
                    p.pid
                    for p in killed_children
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                ]
                assert survivors == [], (
                    f"kill {kill}: processes of the killed sweep still run: {survivors}"
                )
                killed_children = procs
            finally:
                # the whole group: the CLI and anything left in it
                os.killpg(sweep.pid, signal.SIGKILL)
                sweep.wait(timeout=60)
        out = run_cli("clean", "--workdir", str(work))
        assert out.returncode == 0, out.stdout + out.stderr
        assert _ours_running(work) == {}
        assert loops_and_mounts(work) == []
    finally:
        for pid in _ours_running(work):  # never leave a writer behind when the test fails
            os.kill(pid, signal.SIGKILL)
        run_cli("clean", "--workdir", str(work))
