"""A workload's shape read from its fio options (fio/shape.py): flushing, sync writes, read share,
randomness, block sizes and working set, for many of fio's spellings, per job and across the jobs of
one workload."""

from __future__ import annotations

import pytest

from iomatrix.fio.allowlist import validate_job_text
from iomatrix.fio.jobs import JobShape, baremetal_job, guest_job, nbd_job
from iomatrix.fio.shape import combined, fio_bytes, shape_of_text, shape_of_workload
from iomatrix.workloads import PRESETS


def one(text: str):
    shape = shape_of_text("w", text)
    assert len(shape.jobs) == 1, shape
    return shape.jobs[0]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("4k", 4096),
        ("4K", 4096),
        ("4KiB", 4096),
        ("4kb", 4096),
        ("1m", 1 << 20),
        ("1.5m", 3 << 19),
        ("2g", 2 << 30),
        ("512", 512),
        ("1t", 1 << 40),
        ("50%", None),
        ("4k-64k", None),
        ("", None),
    ],
)
def test_fio_sizes(value: str, expected: int | None) -> None:
    assert fio_bytes(value) == expected


@pytest.mark.parametrize(
    "options, every, how, sync",
    [
        ("fsync=1", 1, "fsync=1", False),
        ("fdatasync=32", 32, "fdatasync=32", False),
        ("fdatasync = 8", 8, "fdatasync=8", False),
        ("write_barrier=16", 16, "write_barrier=16", False),
        ("sync=1", 1, "sync=1", True),
        ("sync=dsync", 1, "sync=dsync", True),
        ("sync=sync", 1, "sync=sync", True),
        ("sync", 1, "sync", True),
        ("sync=true", 1, "sync=true", True),
    ],
)
def test_a_job_that_asks_for_durability_while_it_runs_flushes(
    options: str, every: int, how: str, sync: bool
) -> None:
    job = one(f"[j]\nrw=randwrite\n{options}\n")
    assert (
        job.flushes
        and job.flush_every == every
        and job.flush_option == how
        and job.sync_writes is sync
    )
    assert how in job.flush_words()


@pytest.mark.parametrize(
    "options",
    [
        "",
        "end_fsync=1",
        "fsync_on_close=1",
        "direct=1",
        "sync=0",
        "sync=none",
        "fsync=0",
        "fdatasync=0",
        "sync_file_range=write:8",
        "buffered=1\nend_fsync=true",
    ],
)
def test_a_job_that_never_flushes_while_it_runs(options: str) -> None:
    job = one(f"[j]\nrw=write\n{options}\n")
    assert not job.flushes and job.flush_every is None
    assert job.flush_words().startswith("never flushes")
    assert job.final_flush is ("end_fsync" in options or "fsync_on_close" in options)


@pytest.mark.parametrize("rw", ["read", "randread", "trim", "randtrim"])
def test_a_job_that_never_writes_never_flushes_whatever_it_asks(rw: str) -> None:
    job = one(f"[j]\nrw={rw}\nfsync=1\n")
    assert not job.flushes and not job.writes
    assert job.trims is ("trim" in rw)


@pytest.mark.parametrize(
    "text, share",
    [
        # fio's default rw is read
        ("[j]\nrw=randread\n", 1.0),
        ("[j]\nreadwrite=write\n", 0.0),
        ("[j]\n", 1.0),
        ("[j]\nrw=randrw\n", 0.5),
        ("[j]\nrw=rw\nrwmixread=70\n", 0.7),
        ("[j]\nrw=randrw\nrwmixwrite=20\n", 0.8),
        ("[j]\nrw=randtrim\n", 0.0),
        ("[j]\nrw=trimwrite\n", 0.0),
        ("[j]\nrw=randrw:8\nrwmixread=10\n", 0.1),
    ],
)
def test_read_share(text: str, share: float) -> None:
    assert one(text).read_share == pytest.approx(share)


@pytest.mark.parametrize(
    "text, random",
    [
        ("[j]\nrw=randwrite\n", 1.0),
        ("[j]\nrw=write\n", 0.0),
        ("[j]\nrw=write\npercentage_random=10\n", 0.1),
        ("[j]\nrw=randrw\npercentage_random=80,20\n", 0.8),
    ],
)
def test_random_share(text: str, random: float) -> None:
    assert one(text).random_share == pytest.approx(random)


@pytest.mark.parametrize(
    "options, reads, writes",
    [
        ("", ((4096, 1.0),), ((4096, 1.0),)),
        ("bs=64k", ((65536, 1.0),), ((65536, 1.0),)),
        ("blocksize=4k,1m", ((4096, 1.0),), ((1 << 20, 1.0),)),
        ("bs=,8k", ((4096, 1.0),), ((8192, 1.0),)),
        ("bssplit=8k/90:32k/10", ((8192, 0.9), (32768, 0.1)), ((8192, 0.9), (32768, 0.1))),
        ("bssplit=4k/50:64k,32k", ((4096, 0.5), (65536, 0.5)), ((32768, 1.0),)),
        ("bsrange=4k-64k", ((4096, 0.5), (65536, 0.5)), ((4096, 0.5), (65536, 0.5))),
    ],
)
def test_block_sizes(options: str, reads: tuple, writes: tuple) -> None:
    job = one(f"[j]\nrw=randrw\n{options}\n")

    def rounded(sizes: tuple) -> tuple:
        return tuple((b, round(s, 9)) for b, s in sizes)

    assert rounded(job.read_sizes) == reads and rounded(job.write_sizes) == writes


def test_the_iometer_file_server_split_adds_up() -> None:
    job = one(
        "[j]\nrw=randrw\nrwmixread=80\nbssplit=512/10:1k/5:2k/5:4k/60:8k/2:16k/4:32k/4:64k/10\n"
    )
    assert sum(s for _, s in job.read_sizes) == pytest.approx(1.0) and dict(job.read_sizes)[
        4096
    ] == pytest.approx(0.6)


@pytest.mark.parametrize(
    "options, working_set",
    [
        ("size=1g", 1 << 30),
        ("filesize=64m\nnrfiles=4", 256 << 20),
        ("filesize=16m-64m\nnrfiles=2", 128 << 20),
        ("size=1g\nio_size=256m", 256 << 20),
        ("size=64m\nio_limit=1g", 64 << 20),
        ("size=50%", None),
        ("", None),
    ],
)
def test_working_set(options: str, working_set: int | None) -> None:
    assert one(f"[j]\nrw=randread\n{options}\n").working_set == working_set


def test_globals_apply_to_the_jobs_after_them_and_a_job_overrides_them() -> None:
    shape = shape_of_text(
        "w",
        "[global]\nrw=randwrite\nfdatasync=4\n[a]\n[b]\nfdatasync=0\n"
        "[global]\nrw=randread\n[c]\n[prefill]\nrw=write\n",
    )
    # the unmeasured prefill is no part of it
    assert [j.name for j in shape.jobs] == ["a", "b", "c"]
    a, b, c = shape.jobs
    assert a.flushes and not b.flushes and not c.writes and c.flush_every is None


def test_a_role_like_profile_is_mixed_and_weighs_its_jobs() -> None:
    """The module docstring's worked example: OLTP data (never flushes) plus a log (fdatasync every
    write)."""
    shape = shape_of_text(
        "database",
        "[global]\nsize=1g\n[data]\nrw=randrw\nrwmixread=70\n"
        "bssplit=8k/90:32k/10\niodepth=8\n[log]\nrw=write\nbs=32k\nfdatasync=1\n",
    )
    assert shape.flushes and shape.mixed and shape.working_set == 1 << 30
    assert shape.read_share == pytest.approx(8 * 0.7 / 9)
    assert (
        "job data never flushes" in shape.flush_words()
        and "job log flushes every write" in shape.flush_words()
    )
    paced = shape_of_text(
        "p", "[a]\nrw=randread\nrate_iops=300\niodepth=8\n[b]\nrw=randwrite\nrate_iops=100\n"
    )
    assert paced.read_share == pytest.approx(0.75) and not paced.flushes and not paced.mixed


def test_combining_two_job_files_as_one_workload() -> None:
    never = shape_of_text("file:a.fio", "[a]\nrw=randwrite\n")
    often = shape_of_text("file:b.fio", "[b]\nrw=randwrite\nfsync=8\n")
    both = combined("role", [never, often])
    assert not never.flushes and often.flushes and both.flushes and both.mixed


def test_the_page_cache_holds_a_working_set_by_ram() -> None:
    shape = shape_of_text("w", "[j]\nrw=randread\nsize=256m\n")
    assert shape.held_by(4 << 30, 0.5) is True
    assert shape.held_by(256 << 20, 0.5) is False
    assert (
        shape.held_by(None, 0.5) is None
        and shape_of_text("w", "[j]\n").held_by(4 << 30, 0.5) is None
    )


@pytest.mark.parametrize(
    "name, flushes", [(n, PRESETS[n].fdatasync > 0) for n in PRESETS if PRESETS[n].kind == "fio"]
)
def test_every_preset_has_a_shape_that_flushes_as_it_asks(name: str, flushes: bool) -> None:
    w = PRESETS[name]
    shape = shape_of_workload(w, 64 << 20)
    assert shape.flushes is flushes and shape.writes is w.writes
    assert shape.working_set == (w.image_bytes or 64 << 20)


CUSTOM = "[global]\nbs=8k\n[data]\nrw=randwrite\niodepth=4\n[log]\nrw=write\nfdatasync=2\n"


@pytest.mark.parametrize("cache", ["none", "writethrough", "directsync", "unsafe", "writeback"])
def test_a_stored_job_text_gives_the_workloads_shape_not_the_cells(cache: str) -> None:
    """What fio was given (stored with every run) holds the cell's [global] too: its final flush,
    O_DIRECT, and on bare metal cache=writethrough's fdatasync=1. The shape is the workload's own,
    on the cell's region."""
    job = validate_job_text(CUSTOM, "c.fio")
    shape = JobShape(size_bytes=32 << 20, runtime_s=1)
    texts = [
        baremetal_job(
            PRESETS["rand-write-4k"],
            cache=cache,
            aio="threads",
            target="/x",
            shape=shape,
            custom_text=job.text,
        ),
        guest_job(PRESETS["rand-write-4k"], shape=shape, custom_text=job.text),
        nbd_job(
            PRESETS["rand-write-4k"],
            uri="nbd+unix:///e?socket=s",
            shape=shape,
            custom_text=job.text,
        ).text,
    ]
    for text in texts:
        got = shape_of_text("file:c.fio", text, rendered=True)
        assert [(j.name, j.flushes, j.flush_every) for j in got.jobs] == [
            ("data", False, None),
            ("log", True, 2),
        ]
        assert got.working_set == 32 << 20 and got.mixed
    # read as a plain job file (not rendered), the cell's flush options would count: the flag is
    # what keeps them out
    wt = baremetal_job(
        PRESETS["rand-write-4k"],
        cache="writethrough",
        aio="threads",
        target="/x",
        shape=shape,
        custom_text=job.text,
    )
    assert shape_of_text("x", wt).jobs[0].flushes
