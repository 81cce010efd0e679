"""What the guest's filesystem workloads (fs-read, fs-write) ask of the disk, as a shape
(fio/shape.py's IoShape): what the page-cache finding is decided by (report/shape_findings.py;
issue 70: full-matrix-fs picked cache=writethrough for fs-read with no word that its figures were
memory's).

They are no fio job, so no job text tells their shape; their steps do (guest/init.sh and
tiers/real_guest.py's FS_STEPS, the same steps), on a fixed tree: the built-in tarball
(guest/tarball.py, ``DEFAULT_SIZE``), whatever the plan's ``size``. Each runs on a fresh disk
after the host's caches were dropped.

* **fs-read**: untimed, mkfs, mount, extract the tarball into a tree and copy it as one file
  (``2 × DEFAULT_SIZE`` written through the cell's cache mode), then the guest drops its own caches;
  timed, ``find`` walks the tree and ``tar -tvf`` lists the copy (GNU tar seeks over each member's
  data on a regular file: it reads headers and metadata). So its reads read what was just written:
  under a mode that keeps the host page cache (writeback, writethrough, unsafe) the written tree is
  there from the start (``reads_written``), and its working set is the tree's, not the plan's size
  (``fixed_set``).
* **fs-write**: timed, ``FS_WRITE_COUNT`` writes of ``FS_WRITE_MB`` MiB (``dd bs=1M conv=fsync``:
  a flush after each, then ``sync``), then the tarball extracted and ``sync``: every write is made
  durable inside the timed span (one flush per ``FS_WRITE_MB`` writes of 1 MiB), so the page cache
  only batches them, except under cache=unsafe, which drops the flushes.

Measured (the 2026-11-29 full-matrix-fs sweep on this project's 2-core TCG host, 844 runs: the
host disk's counters the monitor sampled each second, medians per cache mode):

* fs-read, its run's last 4 s (the timed steps and the guest's exit): the host disk read **0 MB**
  under writeback (49 runs), writethrough (45) and unsafe (57), against **21 MB** under none (129)
  and **20 MB** under directsync (120): the caching modes' reads came from the host page cache.
* fs-write, its whole run: **460 MB** reached the disk under writeback (60 runs) and 434–467 MB
  under none, directsync and writethrough, against **1 MB** under unsafe (54), whose dirty pages
  peaked at 531 MB: unsafe's writes stayed in memory; writeback's did not.

tests/test_fs_shapes.py checks both against a captured slice of that sweep."""

from __future__ import annotations

from iomatrix.fio.shape import IoShape, JobIo
from iomatrix.guest.tarball import DEFAULT_SIZE

# fs-write's large sequential writes: each FS_WRITE_MB MiB (written as 1 MiB blocks), FS_WRITE_COUNT
# of them (guest.job.GuestJob's defaults, tiers/real_guest.py's arguments to FS_STEPS).
FS_WRITE_MB, FS_WRITE_COUNT = 128, 3
_MIB = 1 << 20
# What fs-read's set-up writes and its timed steps read: the extracted tree and the tarball's copy.
FS_READ_SET = 2 * DEFAULT_SIZE
# Where the working sets come from (IoShape.fixed_set): not the plan's size.
_FIXED = "the built-in guest's tree"


def fs_shape(kind: str) -> IoShape | None:
    """The shape of the filesystem workload `kind` (module docstring); None for another kind."""
    if kind == "fs-read":
        job = JobIo(
            name="find-and-tar-list",
            reads=True,
            writes=False,
            read_share=1.0,
            random_share=1.0,  # a tree's metadata and the copy's headers, wherever they lie
            region_bytes=FS_READ_SET,
        )
        return IoShape(kind, (job,), reads_written=True, fixed_set=_FIXED)
    if kind == "fs-write":
        job = JobIo(
            name="dd-and-extract",
            reads=False,
            writes=True,
            write_sizes=((_MIB, 1.0),),
            flush_every=FS_WRITE_MB,
            flush_option=f"dd conv=fsync every {FS_WRITE_MB} MiB, sync after the extract",
            region_bytes=FS_WRITE_MB * _MIB + DEFAULT_SIZE,
        )
        return IoShape(kind, (job,), fixed_set=_FIXED)
    return None
