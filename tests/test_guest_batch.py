"""Several runs per guest boot, and the microvm machine: real boots under TCG (slow)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.fio.jobs import JobShape
from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts
from iomatrix.guest.job import BatchRun, GuestJob
from iomatrix.guest.process import live_guest_pids, run_guest, run_guest_batch
from iomatrix.images import create_image
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec
from iomatrix.runner import plan_expansion
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.tiers.guest import GuestTier
from iomatrix.workloads import resolve
from tests.conftest import iomatrix_argv, needs, qemu_pids_using, run_cli, sigint_default

pytestmark = [pytest.mark.slow, needs("qemu-system-x86_64")]
TCG = "tcg"


def fio_job(runtime: int = 1) -> str:
    return (
        f"[t]\nfilename=@DISK@\nrw=randwrite\nbs=4k\ndirect=1\nioengine=psync\nsize=16m\n"
        f"runtime={runtime}\ntime_based=1\n"
    )


@pytest.fixture(scope="module")
def art() -> GuestArtifacts:
    return ensure_artifacts()


def _images(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        img = tmp_path / f"d{i}.qcow2"
        create_image(img, "qcow2", "off", 64 << 20)
        out.append(img)
    return out


def _allocated(img: Path) -> int:
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(img)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return int(info["actual-size"])


@pytest.mark.parametrize("machine", ["microvm", "pc"])
def test_three_runs_in_one_boot_each_on_its_own_disk(
    art: GuestArtifacts, tmp_path: Path, machine: str
) -> None:
    imgs = _images(tmp_path, 3)
    before = [_allocated(i) for i in imgs]
    runs = [
        BatchRun(
            DiskSpec(str(i), "qcow2", "none", "threads", "virtio-blk"), GuestJob("fio", fio_job())
        )
        for i in imgs
    ]
    out = run_guest_batch(art, TCG, runs, tmp_path / "boot", run_timeout=120, machine=machine)
    assert out.error is None, out.console_tail
    assert out.machine == machine and f"-machine {machine}" in " ".join(out.qemu_argv)
    assert all(r is not None and r.ok for r in out.runs), [r and r.error for r in out.runs]
    disks = [r.disk_info["disk"] for r in out.runs]  # type: ignore[union-attr,index]
    assert disks == ["vda", "vdb", "vdc"]  # serials iomx-t01..03 in order, one disk each
    files = [r.fio_json["jobs"][0]["job options"]["filename"] for r in out.runs]  # type: ignore[union-attr,index]
    assert files == ["/dev/vda", "/dev/vdb", "/dev/vdc"]
    for r in out.runs:
        assert r is not None and r.fio_json["jobs"][0]["write"]["total_ios"] > 0
        # wall_s is on the host clock (marks stamped on arrival), workload_s on the guest's: allow
        # jitter.
        assert r.phases["workload_s"] >= 1.0 and r.phases["wall_s"] >= r.phases["workload_s"] - 0.25
    # The boot's cost sits on the first run; later runs cost their workload plus a little.
    assert "boot_to_workload_s" in out.runs[0].phases  # type: ignore[union-attr]
    assert "boot_to_workload_s" not in out.runs[1].phases  # type: ignore[union-attr]
    # Each run wrote to its own image.
    assert all(_allocated(i) > b for i, b in zip(imgs, before, strict=True))
    assert not live_guest_pids()


def test_the_gate_holds_the_first_run_until_the_host_is_ready(
    art: GuestArtifacts, tmp_path: Path
) -> None:
    imgs = _images(tmp_path, 2)
    runs = [
        BatchRun(
            DiskSpec(str(i), "qcow2", "none", "threads", "virtio-blk"), GuestJob("fio", fio_job())
        )
        for i in imgs
    ]
    calls: list[float] = []

    def ready() -> None:  # the host's clean-up of a previous boot, made long on purpose
        time.sleep(6)
        calls.append(time.monotonic())

    out = run_guest_batch(
        art, TCG, runs, tmp_path / "boot", run_timeout=120, machine="microvm", host_ready=ready
    )
    assert out.error is None, out.console_tail
    assert all(r is not None and r.ok for r in out.runs), [r and r.error for r in out.runs]
    assert len(calls) == 1 and out.boot_phases["host_ready_s"] >= 6.0
    # `ready` starts at QEMU's spawn: the first run cannot have reached its workload before it
    # returned, however fast the guest booted.
    first = out.runs[0].phases  # type: ignore[union-attr]
    assert first["qemu_start_s"] + first["boot_to_workload_s"] >= out.boot_phases["host_ready_s"]
    assert "gate_wait_s" in out.boot_phases
    assert "@@IOMX:MARK:gate_open:" in (tmp_path / "boot" / "results.log").read_text()
    assert not live_guest_pids()


def test_a_failing_host_ready_still_lets_the_boot_end_and_is_reported(
    art: GuestArtifacts, tmp_path: Path
) -> None:
    imgs = _images(tmp_path, 2)
    runs = [
        BatchRun(
            DiskSpec(str(i), "qcow2", "none", "threads", "virtio-blk"), GuestJob("fio", fio_job())
        )
        for i in imgs
    ]

    def ready() -> None:
        raise OSError("cannot remove the previous images")

    with pytest.raises(OSError, match="cannot remove"):
        run_guest_batch(
            art, TCG, runs, tmp_path / "boot", run_timeout=120, machine="microvm", host_ready=ready
        )
    assert not live_guest_pids()


# Seconds a run of the hung-boot test may take: the hung run waits all of them. In the CI run of
# 323ed9d (3 workers on 2 cores) the test took 38.6 s with 30 here: both boots with their 1 s runs
# took under 9 s together. 15 was too few on a VM half as fast for TCG, in a loaded clean-clone
# suite (2026-11-29, 533d28e: "guest run 1 of 3 did not finish within 15 s", the first run, boot
# included); 40 is more than twice that.
HUNG_RUN_TIMEOUT_S = 40


class _HangingSecondRun(GuestTier):
    """The real guest tier; only the job of the first request of workload 'rand-read-4k' hangs."""

    hung = False

    def _job(self, req: RunRequest) -> GuestJob:
        job = super()._job(req)
        if req.workload.name == "rand-read-4k" and not _HangingSecondRun.hung:
            _HangingSecondRun.hung = True
            return GuestJob("fio", fio_job(600))
        return job


def test_guest_tier_retries_the_runs_a_hung_boot_never_started(tmp_path: Path) -> None:
    """A run that hangs in a boot of three kills that boot: the run before it is kept, the hung run
    fails with its timeout, and the run after it, which never started (run_guest_batch gives it back
    as None), is run by the tier in a new boot, as that boot's first run. The timeout is short: the
    first run (the boot included) and the retry's boot each finish in a few seconds under TCG, and
    the hung run waits the whole timeout."""
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["guest"],
            "format": ["qcow2"],
            "cache": ["none"],
            "bus": ["virtio-blk"],
            "size": "16M",
            "image_size": "64M",
            "runtime": 1,
            "null_ceiling": False,
            "workloads": ["rand-write-4k", "rand-read-4k", "seq-write-1m"],
        }
    )
    units = plan_expansion(plan, None, set()).units
    order = {"rand-write-4k": 0, "rand-read-4k": 1, "seq-write-1m": 2}
    units = sorted(units, key=lambda u: order[u.workload.name])
    tier = _HangingSecondRun(plan, RunOptions(workdir=tmp_path / "work", accel="tcg"))
    tier.open()
    try:
        reqs = [
            RunRequest(
                cell=u.cell,
                workload=resolve(u.workload.name),
                target=Target("dir", tmp_path),
                shape=JobShape(plan.size_bytes, plan.runtime),
                run_dir=tmp_path / "runs" / str(i),
                timeout_s=HUNG_RUN_TIMEOUT_S,
            )
            for i, u in enumerate(units)
        ]
        outs = tier.run_batch(reqs)
    finally:
        tier.close()
    assert [o.ok for o in outs] == [True, False, True], [o.error for o in outs]
    assert f"run 2 of 3 did not finish within {HUNG_RUN_TIMEOUT_S} s" in (outs[1].error or "")
    # The first two shared the hung boot; the third ran in a new boot, as its first run.
    assert outs[0].boot_id == outs[1].boot_id != outs[2].boot_id
    assert (outs[0].boot_position, outs[1].boot_position, outs[2].boot_position) == (0, 1, 0)
    assert all(o.meta["machine"] == "microvm" for o in outs)
    assert not list(tmp_path.glob("iomatrix-*.qcow2")), "images left behind"
    assert not live_guest_pids()


def test_microvm_boots_and_pc_stays_for_ide(art: GuestArtifacts, tmp_path: Path) -> None:
    img = _images(tmp_path, 1)[0]
    out = run_guest(
        art,
        TCG,
        DiskSpec(str(img), "qcow2", "none", "threads", "virtio-scsi"),
        GuestJob("fio", fio_job()),
        tmp_path / "scsi",
        timeout=120,
        machine="microvm",
    )
    assert out.ok, f"{out.error}\n{out.console_tail}"
    assert out.disk_info["disk"] == "sda"  # type: ignore[index]
    assert "virtio-scsi-device" in " ".join(out.qemu_argv)


def test_sweep_stores_each_run_of_a_boot_with_its_boot_and_position(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        'tier = ["guest"]\nformat = ["qcow2"]\ncache = ["none"]\nbus = ["virtio-blk"]\n'
        'workloads = ["rand-write-4k", "rand-read-4k", "seq-write-1m"]\nsize = '
        '"16M"\nimage_size = "64M"\n'
        "runtime = 1\nrun_timeout = 120\nnull_ceiling = false\n"
        # No retry of a run the loaded host disturbed (a second boot of the three runs): that the
        # retries of a shared boot run in a new boot of their own is
        # tests/test_runner_inprocess.py::test_the_retries_of_a_shared_boot_share_the_next_boot.
        "retry_disturbed = false\n"
        "[repetitions]\nmin = 1\nmax = 1\n"
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    con = sqlite3.connect(tmp_path / "r.sqlite")
    rows = con.execute(
        "SELECT workload, status, boot_id, boot_position, round, round_position, "
        "json_extract(meta_json, '$.machine'), json_extract(meta_json, '$.round_order') "
        "FROM runs ORDER BY boot_position"
    ).fetchall()
    assert len(rows) == 3 and {r[1] for r in rows} == {"ok"}
    assert len({r[2] for r in rows}) == 1 and rows[0][2]  # one boot
    assert [r[3] for r in rows] == [0, 1, 2]
    # position in round = in boot
    assert [r[5] for r in rows] == [0, 1, 2] and {r[4] for r in rows} == {1}
    assert {r[6] for r in rows} == {"microvm"} and {r[7] for r in rows} == {"cell"}
    assert sorted(r[0] for r in rows) == ["rand-read-4k", "rand-write-4k", "seq-write-1m"]
    assert not [p for p in (tmp_path / "iomatrix-work").rglob("*") if p.suffix == ".qcow2"]


def test_ctrl_c_in_a_shared_boot_keeps_its_finished_runs_and_leaves_nothing(tmp_path: Path) -> None:
    """Ctrl-C after the first of three runs of one boot: that run is stored, QEMU and every image
    are gone, and the resumed sweep runs only the two that never finished."""
    (tmp_path / "p.toml").write_text(
        'tier = ["guest"]\nformat = ["qcow2"]\ncache = ["none"]\nbus = ["virtio-blk"]\n'
        'workloads = ["rand-write-4k", "rand-read-4k", "seq-write-1m"]\nsize = '
        '"16M"\nimage_size = "64M"\n'
        # 2 s runs: the interrupt, sent within a 0.2 s poll of the first run's end, comes while
        # the second runs
        "runtime = 2\nrun_timeout = 240\nnull_ceiling = false\nretry_disturbed = false\n"
        "[repetitions]\nmin = 1\nmax = 1\n"
    )
    # Its own process group, signalled as a whole: what Ctrl-C in a terminal does.
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--accel", "tcg"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    try:
        deadline = time.monotonic() + 300
        first_ended = False
        while not first_ended and time.monotonic() < deadline and proc.poll() is None:
            first_ended = any(
                "@@IOMX:MARK:run_end_r1" in p.read_text(errors="replace")
                for p in tmp_path.rglob("results.log")
            )
            time.sleep(0.2)
        assert first_ended, "the boot's first run never ended"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    con = sqlite3.connect(tmp_path / "r.sqlite")
    kept = con.execute("SELECT workload, status, boot_id, boot_position FROM runs").fetchall()
    con.close()
    assert kept and all(k[1] == "ok" and k[2] and k[3] == i for i, k in enumerate(kept)), kept
    assert len(kept) < 3, "the interrupt came after the whole boot"
    assert qemu_pids_using(tmp_path) == []
    assert not [p for p in tmp_path.rglob("*.qcow2")], "images left behind"
    resumed = run_cli(
        "run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=900
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    con = sqlite3.connect(tmp_path / "r.sqlite")
    after = con.execute("SELECT workload FROM runs WHERE status = 'ok'").fetchall()
    assert sorted(w for (w,) in after) == ["rand-read-4k", "rand-write-4k", "seq-write-1m"]
