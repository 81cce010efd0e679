"""The Debian guest image built here, booted under TCG and driven through its guest agent (issue 51;
slow: run with -m slow or -m '').

The image comes from the normal cache ($IOMATRIX_CACHE/guest/images or
~/.cache/iomatrix/guest/images): the first run builds it (mmdebstrap from the host's Debian mirror,
a few minutes, root), later runs reuse it. Each boot runs on a fresh overlay; the image's sha256 is
checked before and after. A cloud-like image made from it once per session (an MBR partition with
extlinux: `build_cloud_like`) is booted as a user's image through the firmware and its own boot
loader."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from iomatrix import children, roles
from iomatrix.fio.jobs import JobShape, guest_job
from iomatrix.guest.agent import AgentTimeout
from iomatrix.guest.cache import default_cache_dir
from iomatrix.guest.debian_image import (
    DebianImage,
    kernel_cmdline,
    sha256_of,
)
from iomatrix.guest.job import TAR_SERIAL
from iomatrix.guest.real_image import RealImage, resolve_image
from iomatrix.guest.realboot import ROOT_SERIAL, RealGuest, boot, disk_view
from iomatrix.guest.seed import seed_args, tools_args, write_seed, write_tools
from iomatrix.guest.static_fio import static_fio
from iomatrix.images import create_image
from iomatrix.qemu_block import DiskSpec
from iomatrix.tiers.base import RunOutcome
from iomatrix.tiers.real_guest import (
    FS_MOUNT,
    GUEST_RUN_DIR,
    RealRunContext,
    fio_outcome,
    run_in_guest,
    which_fio,
)
from tests.conftest import run_cli

pytestmark = pytest.mark.slow
DISK_BYTES = 64 << 20


def test_the_image_records_its_digest_kernel_and_packages(image: DebianImage) -> None:
    meta = json.loads((image.qcow2.parent / "image.json").read_text())
    assert meta["sha256"] == image.sha256 == sha256_of(image.qcow2)
    assert meta["distribution"].startswith("Debian 12.") and image.kernel_version.endswith(
        "-cloud-amd64"
    )
    names = {p.split()[0] for p in meta["packages"]}
    assert {
        "qemu-guest-agent",
        "fio",
        "systemd-sysv",
        f"linux-image-{image.kernel_version}",
    } <= names
    assert "cloud-init" not in names


# What each step in the booted guest may take before it counts as hung: a bound, not a speed
# target. Under TCG with other suites beside it (load 7+) a fresh boot's guest-exec of a sysfs walk
# took over 60 s (CI, 2026-11-26) while the guest's services were still starting.
IN_GUEST_LIMIT_S = 600.0


@dataclass
class Booted:
    """The Debian guest booted once for the module's in-guest checks, with its disk under test."""

    guest: RealGuest
    image: DebianImage
    fio_static: Path


@pytest.fixture(scope="module")
def booted(image: DebianImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    """One boot (111-330 s under TCG) shared by the checks that run in the guest: a 64 MiB raw disk
    under test on virtio-blk with 2 queues, the NoCloud seed and the tools disk. Afterwards the
    overlay and QEMU are gone and the image is unchanged."""
    tmp = tmp_path_factory.mktemp("debian-guest")
    fio_static, why = static_fio(default_cache_dir(), print, build=False)
    if fio_static is None:
        pytest.skip(f"iomatrix's static fio is not built ({why}): scripts/setup.sh builds it")
    before = sha256_of(image.qcow2)
    disk_img = tmp / "disk.raw"
    create_image(disk_img, "raw", "off", DISK_BYTES)
    disk = DiskSpec(str(disk_img), "raw", "none", "threads", "virtio-blk", more={"queues": "2"})
    seed = write_seed(
        tmp / "seed.iso",
        "iomx-test-1",
        "iomx-seeded",
        "#!/bin/sh\necho seeded > /run/iomatrix-seed/ran\n",
    )
    tools = write_tools(tmp / "tools.iso", fio_static)
    with boot(
        image.boot_image(), tmp / "run", [disk], extra_args=seed_args(seed) + tools_args(tools)
    ) as guest:
        print(f"Debian guest under TCG: agent answered {guest.boot_s} s after QEMU started")
        overlay = guest.overlay
        assert overlay.is_file() and overlay.parent == tmp / "run"
        pid = guest.proc.pid
        yield Booted(guest, image, fio_static)
    assert not overlay.exists() and pid not in children.live_pids()
    assert sha256_of(image.qcow2) == before == image.sha256
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_debian_guest_sees_its_disk_under_test_through_its_agent(booted: Booted) -> None:
    guest, image = booted.guest, booted.image
    assert (
        guest.exec(["uname", "-r"], timeout=IN_GUEST_LIMIT_S).stdout.strip() == image.kernel_version
    )
    view = disk_view(guest, timeout=IN_GUEST_LIMIT_S)
    # The guest's own sysfs: the disk under test on the virtio bus with the queues the cell gave it.
    assert view["driver"] == "virtio_blk" and "/virtio" in str(view["devpath"]), view
    assert view["queues"] == 2 and view["nproc"] == 2, view
    assert view["sectors"] == DISK_BYTES // 512 and view["name"] != "vda", view
    sched = guest.exec(
        ["cat", f"/sys/block/{view['name']}/queue/scheduler"], timeout=IN_GUEST_LIMIT_S
    )
    assert sched.ok and f"[{view['scheduler']}]" in sched.stdout, sched
    # One fio job on the disk under test, its JSON through guest-exec.
    fio = guest.exec(
        [
            "fio",
            "--name=t",
            f"--filename=/dev/{view['name']}",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--runtime=2",
            "--time_based",
            "--output-format=json",
        ],
        timeout=IN_GUEST_LIMIT_S,
    )
    assert fio.ok, fio.stderr
    job = json.loads(fio.stdout[fio.stdout.index("{") :])["jobs"][0]
    assert job["error"] == 0 and job["read"]["total_ios"] > 0
    # The NoCloud seed, read by the image's own unit (started by udev when the cidata disk appears).
    seeded = guest.sh(
        "for i in $(seq 60); do [ -f /run/iomatrix-seed/user-data.status ] && break; sleep 1; "
        "done; cat /run/iomatrix-seed/user-data.status /run/iomatrix-seed/ran; hostname",
        timeout=IN_GUEST_LIMIT_S,
    )
    assert seeded.stdout.split() == ["0", "seeded", "iomx-seeded"], seeded
    # An image without fio: iomatrix's static fio from the read-only tools disk, no network (the
    # overlay is the guest's, thrown away: the image is never written). The module's later checks
    # run that fio.
    assert guest.sh("rm -f /usr/bin/fio; ! command -v fio", timeout=IN_GUEST_LIMIT_S).ok
    command, source, _ = which_fio(guest)
    assert (command, source) == ("/run/iomx-tools/fio", "tools-disk")
    version = guest.exec([command, "--version"], timeout=IN_GUEST_LIMIT_S)
    assert version.ok and version.stdout.startswith("fio-"), version


ROLE_SHAPE = JobShape(size_bytes=32 << 20, runtime_s=2.0)


def _run_role_job(ctx: RealRunContext, guest: RealGuest, name: str) -> RunOutcome:
    """A role job as the real-guest tier runs it in a booted guest: the guest tier's job builder,
    fio through the agent, the tier's outcome."""
    w = roles.role_workload(name)
    assert w is not None
    job = guest_job(w, shape=ROLE_SHAPE, custom_text=w.custom_text)
    meta, output, log = run_in_guest(guest, ctx, job, 300, ROLE_SHAPE.size_bytes)
    phases = {"workload_s": meta["workload_host_s"]}
    out = fio_outcome(w.primary_metric, job, meta, (output, log, ""), phases)
    assert out.ok, (name, out.error, output[-2000:])
    return out


def test_a_roles_jobs_run_in_the_guest_on_an_ext4_made_on_its_disk(booted: Booted) -> None:
    """Each job of the database role runs in the real guest as its own run, on a file of an ext4
    the guest makes on the disk under test ([guest] filesystem = "ext4"), with the figures that
    decide the role measured. (A job on the raw disk under test, no filesystem, in a real image:
    the network-backing and user-image sweeps, tests/test_real_guest_network.py and
    test_a_sweep_in_a_user_image_with_its_own_boot_loader_stores_its_run_with_the_image; each role
    job's text as a guest runs it: tests/test_roles.py's golden job files; role jobs run by fio on
    a raw disk: tests/test_roles_sweep.py.)"""
    guest, image = booted.guest, booted.image
    role = roles.builtin("database")
    assert role is not None
    real = RealImage(
        image.boot_image(), image.sha256, "test", image.distribution, image.kernel_version
    )
    ctx = RealRunContext(real, "tcg", Path("/nonexistent"), 512)
    ctx.filesystem = "ext4"
    device = f"/dev/{disk_view(guest, timeout=IN_GUEST_LIMIT_S)['name']}"
    figures: dict[str, float] = {}
    for job_name, workload in role.jobs:
        out = _run_role_job(ctx, guest, workload)
        figures |= {f"{job_name}:{k}": v for k, v in out.metrics.items()}
        fs = out.meta["guest_filesystem"]
        assert fs["type"] == "ext4" and fs["device"] == device, fs
        assert fs["free_bytes"] >= ROLE_SHAPE.size_bytes
        # the job ran on the file of the mounted ext4, which holds the run's region
        seen = guest.sh(
            f"grep '^{device} {FS_MOUNT} ext4 ' /proc/mounts && stat -c %s {fs['file']}"
            f" && grep -c '^filename={fs['file']}$' {GUEST_RUN_DIR}/job.fio && umount "
            f"{FS_MOUNT} && blkid -o value -s TYPE {device}",
            timeout=IN_GUEST_LIMIT_S,
        )
        lines = seen.stdout.splitlines()
        assert seen.ok and lines[1:] == [str(ROLE_SHAPE.size_bytes), "1", "ext4"], seen
    deciding = {f.key: figures.get(f.key) for f in role.figures}
    print(f"database role in the Debian guest, on ext4: {deciding}")
    # every figure that decides the role came back, above zero
    assert all(figures.get(f.key, 0) > 0 for f in role.figures), figures
    assert figures["log:sync.count"] > 0  # the log's fdatasync per write reached fio's count


def test_a_guest_that_does_not_answer_in_time_is_one_line_with_its_console(
    image: DebianImage, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(AgentTimeout) as err, boot(image.boot_image(), run_dir, boot_limit_s=4):
        pass
    line = err.value.one_line()
    # the kernel's first lines, or (a host too loaded for the kernel to start in 4 s) that none came
    assert (
        "did not answer guest-ping within 4 s (the run's time limit); last console lines:" in line
        or line.startswith("no console output in 4 s (the run's time limit)")
    ) and "\n" not in line
    assert not (run_dir / "root-overlay.qcow2").exists()
    assert not [p for p in children.live_pids() if str(run_dir) in _cmdline(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


PLAN = """
tier = ["guest"]
format = ["qcow2"]
cache = ["none"]
bus = ["virtio-blk"]
roles = ["database"]
workloads = ["fs-read", "fs-write"]
size = "16M"
image_size = "256M"
runtime = 1
run_timeout = 1200
null_ceiling = false
retry_disturbed = false
[repetitions]
min = 1
max = 1
[guest]
image = "{image}"
filesystem = "ext4"
"""

ROLE_JOBS = ("database:data", "database:log")

FS_STEP_NAMES = {
    "fs-read": [
        "mkfs",
        "mount",
        "populate_extract",
        "populate_copy",
        "drop_caches",
        "find",
        "tar_list",
    ],
    "fs-write": [
        "mkfs",
        "mount",
        "dd_1",
        "sync_1",
        "dd_2",
        "sync_2",
        "dd_3",
        "sync_3",
        "extract",
        "sync",
    ],
}


def test_a_sweep_in_the_image_given_by_path_runs_role_jobs_and_filesystem_workloads_in_one_boot(
    image: DebianImage, tmp_path: Path
) -> None:
    """`[guest] image = PATH`: the built image given as a user's would be; one cell, four runs
    sharing one boot, each on its own fresh disk (the guest sees four distinct disks), through the
    agent. The database role's two jobs run on an ext4 the guest makes on the disk under test; each
    run is stored with the image's digest and kernel and the guest's own view of its disk, each
    job's figures under its name, and the role's answer given. fs-read and fs-write run the
    built-in guest's steps in the image (fs-read: fill a fresh ext4 from the tarball disk, drop its
    caches, time the tree walk and the tarball listing; fs-write: three large writes with sync, then
    extract the tarball and sync), stored with the same figures (workload.seconds, fs.timed_s,
    fs.untimed_s). The file given is only read; nothing of the runs is left.
    (One sweep: the role sweep and the filesystem-workload sweep were two tests, two boots.)"""
    before = sha256_of(image.qcow2)
    (tmp_path / "p.toml").write_text(PLAN.format(image=image.qcow2))
    proc = run_cli(
        "run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        rows = db.execute(
            "SELECT id, workload, status, boot_id, boot_position, meta_json, phases_json, error "
            "FROM runs ORDER BY boot_position"
        ).fetchall()
        samples = {
            r[1]: dict(db.execute("SELECT metric, value FROM samples WHERE run_id = ?", (r[0],)))
            for r in rows
        }
    assert sorted(r[1] for r in rows) == sorted([*ROLE_JOBS, *FS_STEP_NAMES]), rows
    assert all(r[2] == "ok" for r in rows), rows
    # the cell's four runs in one boot: each run after the first found the previous one's
    # filesystem unmounted and made its own on its own disk
    assert rows[0][3] is not None and len({r[3] for r in rows}) == 1, rows
    assert [r[4] for r in rows] == [0, 1, 2, 3], rows
    # (this sweep shows the real image's shared boot; repetitions_per_boot's rounds in one boot are
    # the scheduler's, whatever the guest: tests/test_rounds_per_boot.py)
    metas = {r[1]: json.loads(r[5]) for r in rows}
    views = [json.loads(r[5])["guest_disk"] for r in rows]
    phases = [json.loads(r[6]) for r in rows]
    print(f"one boot, four runs: phases {phases}, views {views}")
    # each run on its own disk: the guest saw four distinct disks under test
    assert len({v["name"] for v in views}) == 4 and len({v["devpath"] for v in views}) == 4, views
    assert all(v["sectors"] == (256 << 20) // 512 for v in views), views
    assert "boot_s" in phases[0] and not any("boot_s" in p for p in phases[1:])  # the first's boot
    for meta in metas.values():
        assert meta["boot_runs"] == 4 and meta["boot_phases"]["boot_s"] > 0
        assert meta["guest_prepared"].startswith("own fresh disk")
        img = meta["guest_image"]
        assert img["image_sha256"] == image.sha256 and img["kernel_version"] == image.kernel_version
        assert img["distribution"].startswith("Debian 12.") and img["boot"] == "direct kernel"
        assert meta["guest_disk"]["driver"] == "virtio_blk" and meta["guest_disk"]["queues"] >= 1
        # the filesystem workloads' tarball is a read-only disk of the boot
        assert f"serial={TAR_SERIAL}" in " ".join(meta["qemu_argv"])
    for job in ROLE_JOBS:
        meta = metas[job]
        assert meta["guest_fio"] == "image" and meta["guest_seed"] in (
            "seed-read",
            "seed-not-read-yet",
        )
        fs = meta["guest_filesystem"]
        assert fs["type"] == "ext4" and fs["file"] == f"{FS_MOUNT}/iomatrix.fio", fs
    assert "fio on a file of an ext4 made in the guest" in proc.stdout + proc.stderr
    for workload, names in FS_STEP_NAMES.items():
        steps, figures = metas[workload]["guest_fs_steps"], samples[workload]
        print(f"{workload} in the Debian guest: steps {steps}, figures {figures}")
        assert list(steps) == names
        assert figures["workload.seconds"] > 0 and figures["fs.timed_s"] > 0
        assert figures["fs.untimed_s"] >= steps["mkfs"] > 0
    # Each role job's figures stored under its name. (Under TCG the data job rarely reaches its
    # offered 1500 IOPS: such a run is kept with load.reached 0 and not ranked, so the role's answer
    # may say its deciding figure is missing.)
    for job, metric in (
        ("database:data", "read.clat_p99_us"),
        ("database:data", "write.clat_p99_us"),
        ("database:log", "write.iops"),
        ("database:log", "sync.count"),
    ):
        assert (samples[job].get(metric) or 0) > 0, (job, metric, samples[job])
    assert "load.reached" in samples["database:data"]
    # the answer names the guest its figures came from: the image given, by its digest (issue 51)
    rec = json.loads(
        run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    (role,) = rec["roles"]
    assert role["role"] == "database" and role["jobs"] == list(ROLE_JOBS)
    assert role["text"].startswith("For a database VM: "), role
    assert role["cell"] is not None or role["missing"], role
    if role["cell"] is not None:
        assert all(f["mean"] and f["mean"] > 0 for f in role["figures"]), role
    # one image, named apart by what fio ran on: the role's jobs on the guest's ext4, the
    # filesystem workloads (which make their own) recorded without one
    guests = [
        (g["kind"], g["image"], g["sha256"], g["kernel"], g.get("filesystem"), g["runs"])
        for g in rec["guests"]
    ]
    seen = (image.qcow2, image.sha256, image.kernel_version)
    assert sorted(guests, key=str) == [
        ("real image", str(seen[0]), seen[1], seen[2], "ext4", 2),
        ("real image", str(seen[0]), seen[1], seen[2], None, 2),
    ], guests
    assert sha256_of(image.qcow2) == before  # the file given was only read
    # no QEMU left; overlays and disks removed
    assert _processes_naming("qemu-system-x86_64", tmp_path) == []
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".raw", ".qcow2")]


def _processes_naming(name: str, path: Path) -> list[int]:
    """Live processes called `name` whose command line names `path` (what this test started)."""
    return [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == name and str(path) in " ".join(p.info["cmdline"] or [])
    ]


# --------------------------------------------------------------------------- a cloud-like image,
# booted through the firmware and its own boot loader

# A cloud image's layout, made from the Debian image built here (no cloud image is in the package
# archive, and the tests run offline): an MBR-partitioned raw disk with the Debian root in
# partition 1 at 1 MiB (where partitioning tools put it), marked active, syslinux's MBR code in the
# first 440 bytes and extlinux in the partition's boot sector and /boot/extlinux. No kernel beside
# it: given by path, iomatrix boots it through SeaBIOS and extlinux, as it would a user's image.
SYSLINUX_MBR = Path("/usr/lib/syslinux/mbr/mbr.bin")
SECTOR = 512
PART_START = 1 << 20
DISK_SIGNATURE = 0x10A7_1C00  # the MBR's disk identifier: PARTUUID 10a71c00-01 for partition 1


def _chs(lba: int) -> bytes:
    """The CHS address of `lba` in an MBR entry (255 heads, 63 sectors: what fdisk writes); past
    cylinder 1023 the maximum, and the boot code uses the entry's LBA fields."""
    cyl, rem = divmod(lba, 255 * 63)
    if cyl > 1023:
        return bytes((0xFE, 0xFF, 0xFF))
    head, sector = divmod(rem, 63)
    return bytes((head, ((cyl >> 2) & 0xC0) | (sector + 1), cyl & 0xFF))


def mbr(boot_code: bytes, start_lba: int, sectors: int) -> bytes:
    """The first sector: `boot_code` (at most 440 bytes), the disk signature, one active Linux
    partition (type 0x83) of `sectors` from `start_lba`, three empty entries, 0x55AA."""
    assert len(boot_code) <= 440
    entry = (
        b"\x80"
        + _chs(start_lba)
        + b"\x83"
        + _chs(start_lba + sectors - 1)
        + struct.pack("<II", start_lba, sectors)
    )
    return (
        boot_code.ljust(440, b"\0")
        + struct.pack("<IH", DISK_SIGNATURE, 0)
        + entry
        + bytes(48)
        + b"\x55\xaa"
    )


def test_the_mbr_holds_one_active_linux_partition_at_1_mib() -> None:
    sector = mbr(b"\xfa" * 440, 2048, 4194304)
    assert len(sector) == SECTOR and sector[440:444] == bytes.fromhex("001ca710")
    # active, CHS 0/32/33 (fdisk's for LBA 2048) to 261/53/48, type 83, LBA 2048, 2 GiB
    assert sector[446:462] == bytes.fromhex("80202100833570050008000000004000")
    assert sector[462:510] == bytes(48) and sector[510:] == b"\x55\xaa"


def _run(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True)
    assert res.returncode == 0, (argv, res.stderr)
    return res.stdout


@contextlib.contextmanager
def _partition_loop(disk: Path, offset: int, size: int) -> Iterator[str]:
    """A loop device of our own on the partition of `disk` at `offset` (no device-mapper or
    kpartx here), detached however the block ends."""
    loop = ""
    try:
        loop = _run(
            ["losetup", "--find", "--show", f"--offset={offset}", f"--sizelimit={size}", str(disk)]
        ).strip()
        yield loop
    finally:
        if loop:
            subprocess.run(["losetup", "--detach", loop], capture_output=True)


@contextlib.contextmanager
def _mounted(device: str, mnt: Path) -> Iterator[Path]:
    _run(["mount", "-t", "ext4", device, str(mnt)])
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def extlinux_conf(kernel_version: str) -> str:
    """Boot the image's own kernel and initramfs (its /boot) with the built image's command line,
    root on partition 1; extlinux's banner and what it loads on the serial console (the run's
    console.log)."""
    return (
        "SERIAL 0 115200\n"
        "DEFAULT debian\n"
        "PROMPT 0\n"
        "TIMEOUT 0\n"
        "LABEL debian\n"
        f"    KERNEL /boot/vmlinuz-{kernel_version}\n"
        f"    INITRD /boot/initrd.img-{kernel_version}\n"
        f"    APPEND {kernel_cmdline('/dev/vda1')}\n"
    )


def build_cloud_like(image: DebianImage, work: Path) -> Path:
    """`work`/cloud-like.qcow2 from the built image (only read): the layout above."""
    info = json.loads(
        _run(["qemu-img", "info", "-U", "--output=json", "-f", "qcow2", str(image.qcow2)])
    )
    root_bytes = int(info["virtual-size"])
    disk = work / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(PART_START + root_bytes)
    # the root filesystem into the partition, holes kept (the file is fresh: all zeros)
    _run(
        [
            "qemu-img",
            "convert",
            "-U",
            "-n",
            "--target-is-zero",
            "-f",
            "qcow2",
            str(image.qcow2),
            "--target-image-opts",
            f"driver=raw,offset={PART_START},size={root_bytes},file.driver=file,"
            f"file.filename={disk}",
        ]
    )
    mnt = work / "mnt"
    mnt.mkdir()
    # The root keeps ext4's 64bit feature (mke2fs's default): syslinux's Filesystem page says its
    # reader lacks it as of 6.03, but Debian's 6.04 snapshot booted it (tried 2026-11-26).
    with _partition_loop(disk, PART_START, root_bytes) as loop, _mounted(loop, mnt):
        for name in ("vmlinuz", "initrd.img"):
            assert (mnt / "boot" / f"{name}-{image.kernel_version}").is_file()
        (mnt / "boot/extlinux").mkdir()
        (mnt / "boot/extlinux/extlinux.conf").write_text(extlinux_conf(image.kernel_version))
        # ldlinux.sys and ldlinux.c32 into the directory, its boot sector into the partition's
        _run(["extlinux", "--install", str(mnt / "boot/extlinux")])
    mnt.rmdir()
    with open(disk, "r+b") as f:
        f.write(mbr(SYSLINUX_MBR.read_bytes()[:440], PART_START // SECTOR, root_bytes // SECTOR))
    qcow2 = work / "cloud-like.qcow2"
    _run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(disk), str(qcow2)])
    disk.rename(work / "cloud-like.raw")  # the same disk as a raw user image (sparse)
    return qcow2


@pytest.fixture(scope="session")
def cloud_like(image: DebianImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cloud-like image, built once per session (3-4 s) in a directory removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("a loop device and a mount make the cloud-like image: needs root")
    missing = [t for t in ("extlinux", "losetup", "mount") if shutil.which(t) is None]
    if missing or not SYSLINUX_MBR.is_file():
        pytest.skip(
            f"{missing or SYSLINUX_MBR} missing: scripts/setup.sh installs extlinux and "
            "syslinux-common"
        )
    work = tmp_path_factory.mktemp("cloud-like")
    try:
        yield build_cloud_like(image, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_user_image_with_its_own_boot_loader_boots_through_the_firmware(
    cloud_like: Path, image: DebianImage, tmp_path: Path
) -> None:
    """The cloud-like image given as a user's raw image is resolved as one (no kernel: QEMU gets
    none), and SeaBIOS, syslinux's MBR and extlinux boot the image's own kernel from its partition 1
    up to the agent; the file is only read. (The same disk as qcow2 is booted so by the sweep test
    below: the boot loader's bytes are the same, only the format node differs.)"""
    cloud_like = cloud_like.with_suffix(".raw")
    before = sha256_of(cloud_like)
    real = resolve_image(str(cloud_like))
    assert real.boot.kernel is None and real.boot.format == "raw" and real.sha256 == before
    assert real.as_metadata()["boot"] == "firmware and the image's boot loader"
    with boot(real.boot, tmp_path / "run", boot_limit_s=IN_GUEST_LIMIT_S) as guest:
        print(f"cloud-like image through the firmware: agent after {guest.boot_s} s")
        assert not {"-kernel", "-initrd", "-append"} & set(guest.argv), guest.argv
        assert f"virtio-blk-pci,drive=root,serial={ROOT_SERIAL},bootindex=0" in guest.argv
        cmdline = guest.exec(["cat", "/proc/cmdline"], timeout=IN_GUEST_LIMIT_S).stdout
        # extlinux names what it loaded (QEMU's -kernel does not): the image's own kernel file
        assert cmdline.startswith(f"BOOT_IMAGE=/boot/vmlinuz-{image.kernel_version} "), cmdline
        root = guest.exec(["findmnt", "-n", "-o", "SOURCE", "/"], timeout=IN_GUEST_LIMIT_S)
        assert root.stdout.strip() == "/dev/vda1", root
        uname = guest.exec(["uname", "-r"], timeout=IN_GUEST_LIMIT_S)
        assert uname.stdout.strip() == image.kernel_version
        # the boot loader's own lines on the serial console (its SERIAL directive), before the
        # kernel's
        console = (tmp_path / "run/console.log").read_text(errors="replace")
        loaded = f"Loading /boot/vmlinuz-{image.kernel_version}"
        assert "SYSLINUX 6." in console and loaded in console, console[:2000]
        overlay, pid = guest.overlay, guest.proc.pid
    assert not overlay.exists() and pid not in children.live_pids()
    assert sha256_of(cloud_like) == before


FIRMWARE_PLAN = """
tier = ["guest"]
format = ["raw"]
cache = ["none"]
bus = ["virtio-blk"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "32M"
runtime = 1
run_timeout = 900
null_ceiling = false
retry_disturbed = false
[repetitions]
min = 1
max = 1
[guest]
image = "{image}"
"""


def test_a_sweep_in_a_user_image_with_its_own_boot_loader_stores_its_run_with_the_image(
    cloud_like: Path, image: DebianImage, tmp_path: Path
) -> None:
    """`[guest] image = PATH` naming a partitioned image with a BIOS boot loader and no kernel
    beside it: iomatrix boots it without -kernel (the firmware and extlinux), reaches its agent
    through the NoCloud seed's boot, runs the cell's job in it and stores the run with the image's
    digest, the distribution and kernel read from the guest, and the guest's view of its disk; the
    user's file is unchanged and nothing of the run is left."""
    before = sha256_of(cloud_like)
    (tmp_path / "p.toml").write_text(FIRMWARE_PLAN.format(image=cloud_like))
    proc = run_cli(
        "run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        rows = db.execute("SELECT status, meta_json, phases_json, error FROM runs").fetchall()
    assert len(rows) == 1 and rows[0][0] == "ok", rows
    meta = json.loads(rows[0][1])
    print(f"firmware boot of a user image: phases {json.loads(rows[0][2])}")
    argv = meta["qemu_argv"]
    assert not {"-kernel", "-initrd", "-append"} & set(argv), argv
    assert f"virtio-blk-pci,drive=root,serial={ROOT_SERIAL},bootindex=0" in argv
    img = meta["guest_image"]
    assert img["image"] == str(cloud_like) and img["image_sha256"] == before
    assert img["image_source"] == f"the user's image {cloud_like}"
    assert img["boot"] == "firmware and the image's boot loader" and img["image_format"] == "qcow2"
    # read from the guest: nothing beside the file says them
    assert img["distribution"].startswith("Debian GNU/Linux 12"), img
    assert img["kernel_version"] == image.kernel_version, img
    view = meta["guest_disk"]
    assert view["driver"] == "virtio_blk" and view["sectors"] == (32 << 20) // 512, view
    assert meta["guest_fio"] == "image" and meta["guest_seed"] in (
        "seed-read",
        "seed-not-read-yet",
    )
    assert "guest_filesystem" not in meta  # no filesystem asked: fio on the raw disk under test
    rec = json.loads(
        run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    assert [(g["kind"], g["image"], g["sha256"], g["kernel"]) for g in rec["guests"]] == [
        ("real image", str(cloud_like), before, image.kernel_version)
    ]
    assert sha256_of(cloud_like) == before  # the user's file was only read
    assert _processes_naming("qemu-system-x86_64", tmp_path) == []
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".raw", ".qcow2")]
