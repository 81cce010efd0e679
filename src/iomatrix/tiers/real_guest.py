"""One guest-tier run in a real image (`[guest] image`, iomatrix.guest.real_image): boot the image
on a fresh overlay with the cell's disk under test, run the workload's fio job in it through the
guest agent, and turn what fio reported into a `RunOutcome` like the built-in guest's.

The runs of one cell share a boot (`run_real_batch`), each on its own fresh disk. The fio job is the
built-in guest's (`fio.jobs.guest_job`: O_DIRECT, libaio) with the disk the guest found by its
serial; it is written into the guest with guest-file-write and run by the image's own fio, its JSON
read from guest-exec's captured output. Recorded with every run: the image (path, sha256, source,
distribution, kernel) and the guest's own view of the disk under test (driver, queues, scheduler,
write cache).

Every workload runs so, a role's jobs (``database:data``, ``database:log``: custom jobs) included:
the same job builder as the built-in guest's, each job a run of its own. The filesystem workloads
(fs-read, fs-write) run the built-in guest's steps (`FS_STEPS`) on the plan's `guest_fs`, with its
tarball attached as a read-only disk.

`[guest] filesystem = "ext4"` (the plan setting ``guest_filesystem``): the guest makes an ext4 on
the disk under test (its inode tables and journal written at once, so no background
initialisation runs beside fio), mounts it, and the job runs on a file of it instead of the raw
disk, with O_DIRECT and the job's own fdatasync, through the guest's filesystem and journal; the
filesystem (mkfs options, mount options, free space) is recorded in the run's
``guest_filesystem``.

On a network backing (iSCSI, NFS, NBD) each run's disk under test is made by the backing's server
(the tier's `network_disks`, as for the built-in guest), opened by QEMU's own client with the same
`-blockdev` node (`DiskSpec.for_cell` on the `NetworkDisk`), recorded (`network_disk`,
`network_server`) and given back once QEMU has exited."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.backing.leftovers import forget
from iomatrix.backing.network import NetworkDisk
from iomatrix.errors import UserError
from iomatrix.fio.jobs import GUEST_DISK_PLACEHOLDER, IOPS_LOG_PREFIX, guest_job
from iomatrix.fio.parse import FioOutputError, checked_metrics, extract_json, parse_iops_log
from iomatrix.guest.agent import AgentTimeout
from iomatrix.guest.cmdline import tarball_args
from iomatrix.guest.fs_shape import FS_WRITE_COUNT, FS_WRITE_MB
from iomatrix.guest.job import TAR_SERIAL
from iomatrix.guest.real_image import RealImage
from iomatrix.guest.realboot import RealGuest, boot, disk_serial, disk_view
from iomatrix.guest.seed import TOOLS_SERIAL, seed_args, tools_args, write_seed, write_tools
from iomatrix.guest.stream import fs_result_from_block
from iomatrix.guest.tarball import ensure_tarball
from iomatrix.images import remove_image
from iomatrix.qemu_block import DISK_SERIAL, DiskSpec, out_of_space
from iomatrix.tiers.base import RunOutcome, RunRequest, RunsInterrupted, fresh_image

GUEST_RUN_DIR = "/run/iomatrix"
TOOLS_MOUNT = "/run/iomx-tools"
# iomatrix's first-boot set-up, the NoCloud seed's user-data (cloud-init runs it once, as does the
# Debian image's own seed unit): a cloud image may carry qemu-guest-agent without starting it; the
# marker says the seed was read.
SEED_USER_DATA = f"""#!/bin/sh
command -v systemctl >/dev/null 2>&1 && systemctl start qemu-guest-agent 2>/dev/null
mkdir -p {GUEST_RUN_DIR} && echo seeded > {GUEST_RUN_DIR}/seeded
"""
# The fio to run, with where it comes from: the image's own, else iomatrix's static fio on the
# read-only tools disk (no network needed); and whether the seed's user-data has run.
_FIO = f"""
seed=$([ -f {GUEST_RUN_DIR}/seeded ] && echo seed-read || echo seed-not-read-yet)
if command -v fio >/dev/null 2>&1; then echo "fio image $seed"; exit 0; fi
mkdir -p {TOOLS_MOUNT}
mountpoint -q {TOOLS_MOUNT} || mount -o ro /dev/disk/by-id/virtio-{TOOLS_SERIAL} {TOOLS_MOUNT} 2>/dev/null
[ -x {TOOLS_MOUNT}/fio ] && echo "{TOOLS_MOUNT}/fio tools-disk $seed" && exit 0
echo "the image has no fio and no tools disk is attached" >&2
exit 3
"""  # noqa: E501
# The least time a step in the guest gets, even past the run's time limit: the fio log's read after
# a job that ran to its limit.
STEP_FLOOR_S = 30.0
# The guest filesystem's mount point and the file fio runs on there.
FS_MOUNT = "/mnt/iomx-test"
FS_FILE = "iomatrix.fio"
# Inode tables and journal zeroed by mkfs itself: lazily, ext4lazyinit would write them in the
# background during the measurement.
MKFS_EXT4 = "mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0"
FS_KINDS = ("fs-read", "fs-write")
# The built-in guest's filesystem workloads (guest/init.sh, run_kind fs-read and fs-write), step
# for step, run by the image's shell through the agent: the same mkfs and mount options, the tarball
# (a read-only raw disk, serial TAR_SERIAL), the same untimed set-up and timed steps, each step's
# start and end from the guest's /proc/uptime. Arguments: the disk under test, the kind, the
# filesystem, the fs-write's write size (MiB) and count. Prints the steps as init.sh's fs block
# (guest.stream.fs_result_from_block reads it) with the timed part's span ("workload").
FS_STEPS = (
    r"""
DISK=$1 KIND=$2 FS=$3 WRITE_MB=$4 WRITE_COUNT=$5
TAR=/dev/disk/by-id/virtio-@TAR@ M=@MOUNT@ R=@RUN@
now() { read -r _t _ < /proc/uptime; echo "$_t"; }
: > $R/steps
step() {
    _n=$1; shift; _s=$(now)
    "$@" > $R/step.out 2>&1 || {
        tail -n 5 $R/step.out >&2; echo "step $_n failed: $*" >&2; exit 3
    }
    echo "$_n $_s $(now)" >> $R/steps
}
make_fs() {
    case $FS in
        ext4) mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 $DISK ;;
        xfs) mkfs.xfs -q -f -K $DISK ;;
        *) return 1 ;;
    esac
}
mount_fs() {
    mkdir -p $M
    case $FS in
        ext4) mount -t ext4 -o noinit_itable $DISK $M ;;
        *) mount -t "$FS" $DISK $M ;;
    esac
}
copy_tar() { dd if=$TAR of=$M/src.tar bs=1M 2>/dev/null; }
extract_tar() { mkdir -p $M/tree && tar -xf $TAR -C $M/tree; }
walk_tree() { find $M -type f > /dev/null; }
list_tar() { tar -tvf $M/src.tar > /dev/null; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
big_write() {
    rm -f $M/bigfile; dd if=/dev/zero of=$M/bigfile bs=1M count="$WRITE_MB" conv=fsync 2>/dev/null
}
[ -b "$TAR" ] || { echo "the tarball disk ($TAR) is not attached" >&2; exit 3; }
step mkfs make_fs
step mount mount_fs
case $KIND in
    fs-read)
        step populate_extract extract_tar
        step populate_copy copy_tar
        step drop_caches drop_caches
        w0=$(now)
        step find walk_tree
        step tar_list list_tar
        ;;
    fs-write)
        w0=$(now)
        i=1
        while [ $i -le "$WRITE_COUNT" ]; do
            step "dd_$i" big_write
            step "sync_$i" sync
            i=$((i + 1))
        done
        rm -f $M/bigfile
        step extract extract_tar
        step sync sync
        ;;
    *) echo "unknown filesystem workload $KIND" >&2; exit 3 ;;
esac
w1=$(now)
printf '{"fs": "%s", "workload": [%s, %s], "steps": [' "$FS" "$w0" "$w1"
sep=""
while read -r n s e; do
    printf '%s{"name": "%s", "start": %s, "end": %s}' "$sep" "$n" "$s" "$e"
    sep=", "
done < $R/steps
printf ']}\n'
""".replace("@TAR@", TAR_SERIAL)
    .replace("@MOUNT@", FS_MOUNT)
    .replace("@RUN@", GUEST_RUN_DIR)
)
# os-release's PRETTY_NAME and the kernel release, one a line.
_FACTS = '. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"; uname -r'
# Before each run in a booted guest, as the built-in guest's init does before each run of a shared
# boot: the filesystem an earlier run of the boot mounted is unmounted (its journal written now, not
# during this run), that run's job and IOPS log removed (a fio that fails must not leave the earlier
# log to be read as its own), and the guest's page cache written back and dropped (what an earlier
# run read or wrote is not cached for this one). Each run also has its own fresh disk.
PREPARE_RUN = f"""set -e
mkdir -p {GUEST_RUN_DIR}
if mountpoint -q {FS_MOUNT}; then umount {FS_MOUNT}; fi
rm -f {GUEST_RUN_DIR}/job.fio {GUEST_RUN_DIR}/{IOPS_LOG_PREFIX}_*.log
sync
echo 3 > /proc/sys/vm/drop_caches
"""
# What every run records of that (meta.guest_prepared).
GUEST_PREPARED = (
    "own fresh disk; earlier filesystem unmounted, its files removed; page cache dropped"
)
# A run's failure after which its boot serves no further run: a command that did not finish in time
# may still run in the guest (beside the next run), and a closed agent socket means QEMU is gone.
BOOT_LOST: tuple[type[BaseException], ...] = (AgentTimeout, OSError)
# The tier's maker of a boot's network disks (`GuestTier._network_disks`): a fresh disk per run on
# the backing's server, each given back when the stack closes, with what to record of it.
NetworkDisks = Callable[
    [list[RunRequest], contextlib.ExitStack], list[tuple[NetworkDisk, dict[str, Any]]]
]


@dataclass
class RealRunContext:
    """What a real-guest run needs from its tier."""

    image: RealImage
    accel: str
    workdir: Path
    memory_mb: int
    # "ext4": the job runs on a file of an ext4 made on the disk under test in the guest; None or
    # "none": on the raw disk.
    filesystem: str | None = None
    # the filesystem the fs-read and fs-write workloads make (the plan's guest_fs)
    fs_workload_fs: str = "ext4"
    # QEMU arguments every boot gets: the NoCloud seed and the tools disk (`attach_media`).
    extra_args: list[str] = field(default_factory=list)
    media_dir: Path | None = None
    # told a line every 30 s while a guest boots (realboot.boot); None: nothing said
    log: Callable[[str], None] | None = None

    def attach_media(self, fio: Path | None) -> None:
        """Write the seed (and, with iomatrix's static fio, the tools disk) for this sweep's
        boots."""
        self.media_dir = self.workdir / "real-guest-media"
        self.media_dir.mkdir(parents=True, exist_ok=True)
        seed = write_seed(
            self.media_dir / "seed.iso", "iomatrix-run", "iomatrix-guest", SEED_USER_DATA
        )
        self.extra_args = seed_args(seed)
        if fio is not None:
            self.extra_args += tools_args(write_tools(self.media_dir / "tools.iso", fio))

    def remove_media(self) -> None:
        if self.media_dir is not None:
            shutil.rmtree(self.media_dir, ignore_errors=True)
            self.media_dir = None


def _refusal(req: RunRequest, filesystem: str | None) -> str | None:
    if filesystem not in (None, "none") and req.cell.is_null_ceiling:
        return "the null ceiling has no data to hold a filesystem"
    if req.workload.kind in FS_KINDS and req.cell.is_null_ceiling:
        return "the null ceiling has no data to hold a filesystem"
    return None


def guest_filesystem(
    guest: RealGuest, filesystem: str, device: str, size_bytes: int, timeout_s: float = 600.0
) -> tuple[str, dict[str, Any]]:
    """(the file the job runs on, what to record) once `filesystem` (ext4) is made on `device`
    inside the guest and mounted; one line when it cannot be, or holds less than the run's
    region."""
    res = guest.sh(
        f"{MKFS_EXT4} {device} && mkdir -p {FS_MOUNT} && mount -t {filesystem} {device} "
        f"{FS_MOUNT} && stat -f -c '%a %S' {FS_MOUNT} && grep ' {FS_MOUNT} ' /proc/mounts",
        timeout=timeout_s,
    )
    lines = res.stdout.splitlines()
    if res.exitcode != 0 or len(lines) < 2:
        last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest: {filesystem} on the disk under test ({device}) failed: {last}",
            hint="the image needs e2fsprogs (mkfs.ext4) and a kernel with ext4",
        )
    blocks, block_bytes = (int(w) for w in lines[0].split())
    free = blocks * block_bytes
    if free < size_bytes:
        raise UserError(
            f"guest: the {filesystem} on the disk under test has {free >> 20} MiB free, the "
            f"run's region (size) is {size_bytes >> 20} MiB",
            hint="raise image_size or lower size in the plan",
        )
    record = {
        "type": filesystem,
        "device": device,
        "mkfs": f"{MKFS_EXT4} {device}",
        "mount_options": lines[1].split()[3] if len(lines[1].split()) > 3 else "",
        "file": f"{FS_MOUNT}/{FS_FILE}",
        "free_bytes": free,
    }
    return record["file"], record


def run_in_guest(
    guest: RealGuest,
    ctx: RealRunContext,
    job: str,
    timeout_s: float,
    size_bytes: int,
    serial: str = DISK_SERIAL,
) -> tuple[dict[str, Any], str, str]:
    """(meta, fio's stdout and stderr, its iops log) of the job run in the booted guest, on the
    raw disk under test with `serial` or (`ctx.filesystem`) on a file of a filesystem made on it.
    The guest is first made ready (`PREPARE_RUN`: an earlier run's filesystem unmounted, its files
    removed, the page cache dropped). Every step gets what is left of `timeout_s`: right after its
    boot a TCG guest on a loaded host can take minutes for a command (a fixed 60 s failed a run at
    load 7)."""
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(STEP_FLOOR_S, deadline - time.monotonic())

    view = prepare_run(guest, ctx, serial, left)
    fio, fio_from, seed = which_fio(guest, left())
    target, fs_meta = f"/dev/{view['name']}", None
    if ctx.filesystem not in (None, "none"):
        target, fs_meta = guest_filesystem(guest, str(ctx.filesystem), target, size_bytes, left())
    text = job.replace(GUEST_DISK_PLACEHOLDER, target)
    guest.agent.write_file(f"{GUEST_RUN_DIR}/job.fio", text.encode())
    t0 = time.monotonic()
    res = guest.sh(f"cd {GUEST_RUN_DIR} && exec {fio} --output-format=json job.fio", timeout=left())
    meta = {
        "guest_disk": view,
        "guest_image": ctx.image.as_metadata(),
        "workload_host_s": round(time.monotonic() - t0, 3),
        "fio_exit": res.exitcode,
        "guest_fio": fio_from,
        "guest_seed": seed,
        "guest_prepared": GUEST_PREPARED,
    }
    if fs_meta is not None:
        meta["guest_filesystem"] = fs_meta
    log = guest.sh(
        f"cat {GUEST_RUN_DIR}/{IOPS_LOG_PREFIX}_iops.log 2>/dev/null", timeout=left()
    ).stdout
    return meta, res.stdout + res.stderr, log


def prepare_run(
    guest: RealGuest, ctx: RealRunContext, serial: str, left: Callable[[], float]
) -> dict[str, Any]:
    """Make the booted guest ready for a run (`PREPARE_RUN`), note its distribution and kernel in
    `ctx.image` once, and return its view of the disk under test with `serial`; each step bounded
    by `left()`."""
    prepared = guest.sh(PREPARE_RUN, timeout=left())
    if not prepared.ok:
        last = ((prepared.stderr or prepared.stdout).strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest: making the guest ready for the run failed: {last}",
            hint="read the run's console.log",
        )
    facts = guest.sh(_FACTS, timeout=left()).stdout.splitlines()
    if len(facts) >= 2 and not (ctx.image.distribution and ctx.image.kernel_version):
        ctx.image = ctx.image.with_guest_facts(facts[0], facts[1])
    return disk_view(guest, serial, timeout=left())


def run_fs_in_guest(
    guest: RealGuest, ctx: RealRunContext, kind: str, timeout_s: float, serial: str = DISK_SERIAL
) -> tuple[dict[str, Any], str]:
    """(meta, the steps' output) of the filesystem workload `kind` (fs-read, fs-write) run in the
    booted guest on the disk under test with `serial` (`FS_STEPS`, the built-in guest's steps);
    the guest is first made ready as for a fio job. One line when a step fails."""
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(STEP_FLOOR_S, deadline - time.monotonic())

    view = prepare_run(guest, ctx, serial, left)
    fs = ctx.fs_workload_fs
    t0 = time.monotonic()
    args = [f"/dev/{view['name']}", kind, fs, str(FS_WRITE_MB), str(FS_WRITE_COUNT)]
    res = guest.exec(["/bin/sh", "-c", FS_STEPS, "iomatrix-fs", *args], timeout=left())
    if res.exitcode != 0:
        last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest: {kind} on {fs} failed: {last}",
            hint="the image needs mkfs for the filesystem (plan setting guest_fs), tar and dd",
        )
    meta = {
        "guest_disk": view,
        "guest_image": ctx.image.as_metadata(),
        "workload_host_s": round(time.monotonic() - t0, 3),
        "guest_prepared": GUEST_PREPARED,
    }
    return meta, res.stdout


def fs_outcome(
    job: str, meta: dict[str, Any], output: str, console: str, phases: dict[str, float]
) -> RunOutcome:
    """The outcome of a filesystem workload run in the guest, as the built-in guest's: the timed
    steps' span (guest clock) as workload.seconds, ``fs.timed_s`` and ``fs.untimed_s``, each step's
    time in meta ``guest_fs_steps``."""
    text = output.strip().splitlines()[-1] if output.strip() else ""
    result = fs_result_from_block(text)
    try:
        span = json.loads(text)["workload"]
        workload_s = round(float(span[1]) - float(span[0]), 3)
    except (ValueError, KeyError, IndexError, TypeError):
        result = None
    if result is None:
        return RunOutcome(
            ok=False,
            phases=phases,
            job_text=job,
            raw_output=output,
            console_tail=console,
            error="guest: the filesystem workload printed no steps",
            meta=meta,
        )
    meta["guest_fs_steps"] = result["steps"]
    phases = {**phases, "workload_s": workload_s}
    metrics = {f"fs.{k}": float(result[k]) for k in ("timed_s", "untimed_s")}
    metrics["workload.seconds"] = workload_s
    metrics.update({f"phase.{k}": float(v) for k, v in phases.items()})
    return RunOutcome(
        ok=True,
        metrics=metrics,
        phases=phases,
        job_text=job,
        raw_output=output,
        console_tail=console,
        meta=meta,
    )


def which_fio(guest: RealGuest, timeout_s: float = 60.0) -> tuple[str, str, str]:
    """(the fio command, where it came from: "image" or "tools-disk", whether the seed's user-data
    has run: "seed-read" or "seed-not-read-yet": cloud-init runs it late in the boot, and a run does
    not wait for it); one line when the image has no fio and no tools disk brings one."""
    res = guest.sh(_FIO, timeout=timeout_s)
    words = res.stdout.split()
    if res.exitcode != 0 or len(words) != 3:
        raise UserError(
            f"guest: {res.stderr.strip() or 'no fio found'}",
            hint="install fio in the image, or let iomatrix build its static fio "
            "(scripts/setup.sh)",
        )
    return words[0], words[1], words[2]


def run_real(
    req: RunRequest,
    ctx: RealRunContext,
    image_bytes: int,
    network_disks: NetworkDisks | None = None,
) -> RunOutcome:
    """One run of `req` in the real image: a fresh disk under test, one boot, the fio job, the
    outcome."""
    (out,) = run_real_batch(
        [req], ctx, lambda _: image_bytes, shared=False, network_disks=network_disks
    )
    assert out is not None  # a boot of one run settles it
    return out


def run_real_batch(
    reqs: list[RunRequest],
    ctx: RealRunContext,
    image_bytes: Callable[[RunRequest], int],
    host_ready: Callable[[], None] | None = None,
    shared: bool = True,
    network_disks: NetworkDisks | None = None,
) -> list[RunOutcome | None]:
    """Runs of one cell in one boot of the real image, in order: each its own fresh disk under
    test (serial `disk_serial(position)`), the guest made ready before each (`PREPARE_RUN`),
    `host_ready` (the runner's sync + drop caches) once the guest is up, before the first run.

    `shared`: each run records the boot (`boot_id`, `boot_position`, meta `boot_runs` and
    `boot_phases`) and its own span (`started_at`, `finished_at`; the first run's holds the boot).
    Bounded: the boot by the first run's time limit, each run by its own (the first's less the
    boot). A boot that never comes up fails every run with its one line; a run that does not finish
    in time (or QEMU gone) fails, and the runs after it are left None (not started: the tier may
    run them in a new boot). Ctrl-C: `RunsInterrupted` with the runs that finished.

    On a network backing `network_disks` makes each run's disk on the server; they are given back
    after QEMU has exited (the boot's block ends before the stack closes), however the boot ends."""
    outs, jobs = _jobs_or_refusals(reqs, ctx)
    if not jobs:
        if host_ready is not None:
            host_ready()
        return outs
    order = list(jobs)
    boot_id = uuid.uuid4().hex[:12]
    first = reqs[order[0]]
    run_dir = first.run_dir.parent / f"boot-{boot_id}" if shared else first.run_dir
    # filled as they are made: the ones made are removed however the boot ends
    images: list[tuple[Path | NetworkDisk | None, bool]] = []
    # a network backing's disks, given back when it closes; what each run records of its disk
    network_stack = contextlib.ExitStack()
    net_metas: list[dict[str, Any]] = [{} for _ in order]
    try:
        run_reqs = [reqs[i] for i in order]
        if network_disks is not None and first.target.kind == "network":
            made = network_disks(run_reqs, network_stack)
            disks = _network_specs(run_reqs, image_bytes, made, images, net_metas)
        else:
            disks = _fresh_disks(run_reqs, ctx, image_bytes, boot_id if shared else None, images)

        def done(pos: int, out: RunOutcome) -> None:
            out.meta.update(net_metas[pos])
            outs[order[pos]] = out  # at once: a Ctrl-C during the next run keeps it

        _BootRuns(ctx, shared, boot_id).boot_and_run(
            run_dir,
            disks,
            [(reqs[i], jobs[i], img) for i, (img, _) in zip(order, images, strict=True)],
            host_ready,
            done,
        )
    # the disks could not be made, or the guest did not come up: every run not finished fails
    except (UserError, OSError) as err:  # OSError: the agent's socket closed under it (QEMU died)
        line = err.one_line() if isinstance(err, UserError) else f"guest agent: {err}"
        _fail_unfinished(outs, order, (ctx, line, jobs), images, net_metas)
    except KeyboardInterrupt as intr:
        if shared:
            raise RunsInterrupted(outs) from intr
        raise
    finally:
        _remove_disks(ctx, images)
        network_stack.close()  # QEMU has exited: the boot's block ended above
    if shared and all(o is not None and o.ok for o in outs):
        shutil.rmtree(run_dir, ignore_errors=True)  # a failed boot keeps its console.log and argv
    return outs


def _jobs_or_refusals(
    reqs: list[RunRequest], ctx: RealRunContext
) -> tuple[list[RunOutcome | None], dict[int, str]]:
    """(the outcomes so far: a refused run's, None for the others; index → fio job of the
    others)."""
    outs: list[RunOutcome | None] = [None] * len(reqs)
    jobs: dict[int, str] = {}
    for i, req in enumerate(reqs):
        refused = _refusal(req, ctx.filesystem)
        if refused:
            outs[i] = RunOutcome(ok=False, error=refused, meta=_base_meta(ctx))
        elif req.workload.kind in FS_KINDS:
            jobs[i] = f"{req.workload.kind} on {ctx.fs_workload_fs}"  # as the built-in guest's
        else:
            jobs[i] = guest_job(req.workload, shape=req.shape, custom_text=req.workload.custom_text)
    return outs, jobs


def _fresh_disks(
    reqs: list[RunRequest],
    ctx: RealRunContext,
    image_bytes: Callable[[RunRequest], int],
    boot_id: str | None,
    made: list[tuple[Path | NetworkDisk | None, bool]],
) -> list[DiskSpec]:
    """Each run's fresh disk under test, appended to `made` as it is created (named by the boot and
    the run's position in a shared boot: the runs of one workload would otherwise share a name)."""
    for pos, req in enumerate(reqs):
        prefix = f"iomatrix-{boot_id}-{pos}" if boot_id is not None else "iomatrix"
        made.append(fresh_image(req, ctx.workdir, image_bytes(req), prefix))
    return [
        DiskSpec.for_cell(req.cell, img, image_bytes(req))
        for req, (img, _) in zip(reqs, made, strict=True)
    ]


def _fail_unfinished(
    outs: list[RunOutcome | None],
    order: list[int],
    why: tuple[RealRunContext, str, dict[int, str]],
    images: list[tuple[Path | NetworkDisk | None, bool]],
    net_metas: list[dict[str, Any]],
) -> None:
    """Settle every run of `order` not finished yet as failed with the boot's one line (`why`: the
    context, the line, the runs' fio jobs), each with its disk's record."""
    ctx, line, jobs = why
    for pos, i in enumerate(order):
        if outs[i] is None:
            image = images[pos][0] if pos < len(images) else None
            failed = _failed(ctx, line, jobs[i], image)
            failed.meta.update(net_metas[pos])
            outs[i] = failed


def _network_specs(
    reqs: list[RunRequest],
    image_bytes: Callable[[RunRequest], int],
    made: list[tuple[NetworkDisk, dict[str, Any]]],
    images: list[tuple[Path | NetworkDisk | None, bool]],
    net_metas: list[dict[str, Any]],
) -> list[DiskSpec]:
    """Each run's disk under test on the network disk the server `made` for it (QEMU's own client,
    the node the built-in guest and the block layer give it), noted in `images` (not ours to remove:
    the server takes it back) and its record in `net_metas`."""
    images.extend((disk, False) for disk, _ in made)
    net_metas[:] = [meta for _, meta in made]
    return [
        DiskSpec.for_cell(req.cell, disk, image_bytes(req))
        for req, (disk, _) in zip(reqs, made, strict=True)
    ]


def _remove_disks(
    ctx: RealRunContext, images: list[tuple[Path | NetworkDisk | None, bool]]
) -> None:
    for img, ours in images:
        if ours and isinstance(img, Path):
            remove_image(img)
            forget(ctx.workdir, img)


def _failed(
    ctx: RealRunContext, line: str, job: str, image: Path | NetworkDisk | None
) -> RunOutcome:
    """A run that failed with `line` (and why its disk's backing may have run out of room)."""
    full = out_of_space(image)
    return RunOutcome(
        ok=False, error=line + (f" — {full}" if full else ""), job_text=job, meta=_base_meta(ctx)
    )


def _base_meta(ctx: RealRunContext) -> dict[str, Any]:
    return {"machine": "pc", "guest_kind": "real image", "guest_image": ctx.image.as_metadata()}


def _tarball_disk(runs: list[tuple[RunRequest, str, Path | NetworkDisk | None]]) -> list[str]:
    """The filesystem workloads' tarball as a read-only disk, when a run of the boot has one."""
    if not any(req.workload.kind in FS_KINDS for req, _, _ in runs):
        return []
    return tarball_args(ensure_tarball(), "pc")


class _BootRuns:
    """The runs of one booted real guest, one after another (`run_real_batch`)."""

    def __init__(self, ctx: RealRunContext, shared: bool, boot_id: str) -> None:
        self.ctx, self.shared, self.boot_id = ctx, shared, boot_id
        self.boot_phases: dict[str, float] = {}

    def boot_and_run(
        self,
        run_dir: Path,
        disks: list[DiskSpec],
        runs: list[tuple[RunRequest, str, Path | NetworkDisk | None]],
        host_ready: Callable[[], None] | None,
        done: Callable[[int, RunOutcome], None],
    ) -> None:
        """Boot with `disks` (bounded by the first run's time limit), `host_ready` once the guest
        is up, then each run in turn, each told to `done(position, outcome)` as it ends; stops after
        a run that lost the boot."""
        first = runs[0][0]
        # before the first run's span: made once and cached, as the built-in guest's
        extra_args = self.ctx.extra_args + _tarball_disk(runs)
        # the first run's span starts with the boot: (monotonic, host clock)
        self.since, self.since_clock = time.monotonic(), time.time()
        with boot(
            self.ctx.image.boot,
            run_dir,
            disks,
            self.ctx.accel,
            self.ctx.memory_mb,
            boot_limit_s=first.timeout_s,
            wrapper=first.wrapper,
            extra_args=extra_args,
            log=self.ctx.log,
        ) as guest:
            if first.on_process is not None:
                first.on_process(guest.proc.pid)
            t = time.monotonic()
            if host_ready is not None:
                host_ready()
            self.boot_phases = {
                "boot_s": guest.boot_s,
                "host_ready_s": round(time.monotonic() - t, 3),
            }
            for pos, (req, job, image) in enumerate(runs):
                out, lost = self.one(guest, pos, (req, job, image), len(runs))
                done(pos, out)
                if lost:
                    return

    def one(
        self,
        guest: RealGuest,
        pos: int,
        run: tuple[RunRequest, str, Path | NetworkDisk | None],
        boot_runs: int,
    ) -> tuple[RunOutcome, bool]:
        """(the outcome of the run at `pos`: its request, fio job and disk; whether the boot is lost
        with it)."""
        req, job, image = run
        meta = _base_meta(self.ctx) | {"qemu_argv": guest.argv}
        # the first run's limit held its boot, as a run of its own boot does
        limit = req.timeout_s - (guest.boot_s if pos == 0 else 0.0)
        lost = False
        log: str | None = None  # fio's iops log; None for a filesystem workload
        try:
            if req.workload.kind in FS_KINDS:
                run_meta, output = run_fs_in_guest(
                    guest, self.ctx, req.workload.kind, max(1.0, limit), disk_serial(pos)
                )
            else:
                run_meta, output, log = run_in_guest(
                    guest, self.ctx, job, max(1.0, limit), req.shape.size_bytes, disk_serial(pos)
                )
            meta.update(run_meta)
        except (UserError, OSError) as err:
            lost = isinstance(err, BOOT_LOST) or guest.stopped() is not None
            full = out_of_space(image)
            line = err.one_line() if isinstance(err, UserError) else f"guest agent: {err}"
            out = RunOutcome(
                ok=False,
                error=line + (f" — {full}" if full else ""),
                job_text=job,
                console_tail=guest.console_lines(40),
                meta=meta,
            )
        else:
            phases = {"workload_s": meta["workload_host_s"]}
            if pos == 0:
                phases = {"boot_s": guest.boot_s, **phases}
            # its share of the boot: from the previous run's end (the boot's start for the first)
            phases["wall_s"] = round(time.monotonic() - self.since, 3)
            console = guest.console_lines(40)
            out = (
                fs_outcome(job, meta, output, console, phases)
                if log is None
                else fio_outcome(
                    req.workload.primary_metric, job, meta, (output, log, console), phases
                )
            )
        self.since, started = time.monotonic(), self.since_clock
        self.since_clock = time.time()
        if self.shared:
            out.boot_id, out.boot_position = self.boot_id, pos
            out.started_at, out.finished_at = started, self.since_clock
            out.meta.update({"boot_runs": boot_runs, "boot_phases": self.boot_phases})
        return out, lost


def fio_outcome(
    primary_metric: str,
    job: str,
    meta: dict[str, Any],
    guest_output: tuple[str, str, str],
    phases: dict[str, float],
) -> RunOutcome:
    """The outcome of a job run in the guest from what it left (`guest_output`: fio's output, its
    iops log, the console's last lines): its metrics when fio measured the workload's primary
    metric, else one line saying what fio reported."""
    output, log, console = guest_output
    try:
        metrics = checked_metrics(extract_json(output), output, primary_metric)
    except FioOutputError as err:
        return RunOutcome(
            ok=False,
            phases=phases,
            job_text=job,
            raw_output=output,
            console_tail=console,
            error=f"guest fio: {err}",
            meta=meta,
        )
    series = parse_iops_log(log) if log else []
    if series:
        meta["iops_series"] = series
    metrics["workload.seconds"] = phases["workload_s"]
    metrics.update({f"phase.{k}": float(v) for k, v in phases.items()})
    return RunOutcome(
        ok=True,
        metrics=metrics,
        phases=phases,
        job_text=job,
        raw_output=output,
        console_tail=console,
        meta=meta,
    )
