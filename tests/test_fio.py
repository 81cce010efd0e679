from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix import workloads as wl
from iomatrix.domain import CACHE
from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape, baremetal_job, guest_job
from iomatrix.fio.parse import FioOutputError, extract_json, report_metrics
from iomatrix.tiers import page_cache_method

SHAPE = JobShape(size_bytes=64 << 20, runtime_s=2)


def opts(job: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in job.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


@pytest.mark.parametrize(
    ("cache", "direct", "fdatasync", "end_fsync"),
    [
        ("writeback", "0", None, "1"),
        ("none", "1", None, "1"),
        ("writethrough", "0", "1", "1"),
        ("directsync", "1", "1", "1"),
        ("unsafe", "0", None, "0"),
    ],
)
def test_cache_modes_map_to_fio(
    cache: str, direct: str, fdatasync: str | None, end_fsync: str
) -> None:
    o = opts(
        baremetal_job(
            wl.PRESETS["rand-write-4k"], cache=cache, aio="threads", target="/x", shape=SHAPE
        )
    )
    assert o["direct"] == [direct]
    assert o.get("fdatasync", [None]) == [fdatasync]
    assert o["end_fsync"][0] == end_fsync


def test_unsafe_drops_the_workloads_own_flushes() -> None:
    db = wl.PRESETS["db-write-4k-fdatasync"]
    assert (
        opts(baremetal_job(db, cache="unsafe", aio="threads", target="/x", shape=SHAPE)).get(
            "fdatasync"
        )
        is None
    )
    assert opts(baremetal_job(db, cache="none", aio="threads", target="/x", shape=SHAPE))[
        "fdatasync"
    ] == ["1"]


@pytest.mark.parametrize(
    ("aio", "engine"), [("threads", "psync"), ("native", "libaio"), ("io_uring", "io_uring")]
)
def test_aio_maps_to_engine(aio: str, engine: str) -> None:
    o = opts(
        baremetal_job(wl.PRESETS["rand-read-4k"], cache="none", aio=aio, target="/x", shape=SHAPE)
    )
    assert o["ioengine"] == [engine]


def test_reads_are_prefilled_writes_are_not() -> None:
    assert "[prefill]" in baremetal_job(
        wl.PRESETS["rand-read-4k"], cache="none", aio="threads", target="/x", shape=SHAPE
    )
    assert "[prefill]" not in baremetal_job(
        wl.PRESETS["rand-write-4k"], cache="none", aio="threads", target="/x", shape=SHAPE
    )
    g = guest_job(wl.PRESETS["rand-read-4k"], shape=SHAPE)
    assert "filename=@DISK@" in g and "direct=1" in g and "[prefill]" in g


def test_every_cache_mode_has_semantics() -> None:
    assert set(CACHE) == {"none", "writeback", "writethrough", "directsync", "unsafe"}


def test_page_cache_method_is_stated() -> None:
    assert "O_DIRECT" in page_cache_method(
        wl.PRESETS["rand-read-4k"], tier="baremetal", cache="none", caches_dropped=True
    )
    assert "invalidate" in page_cache_method(
        wl.PRESETS["rand-read-4k"], tier="baremetal", cache="writeback", caches_dropped=False
    )
    assert page_cache_method(
        wl.PRESETS["rand-write-4k"], tier="guest", cache="none", caches_dropped=True
    ).startswith("n/a")


# -- parsing real fio 3.33 output captured on a Debian 12 host ---------------------------------


def load(data_dir: Path, name: str) -> str:
    return (data_dir / "fio" / name).read_text()


def test_parse_randread_skips_prefill(data_dir: Path) -> None:
    text = load(data_dir, "rand-read-4k.none.native.json")
    raw = json.loads(text)
    measure = next(j for j in raw["jobs"] if j["jobname"] == "measure")
    m = report_metrics(extract_json(text))
    assert m["read.iops"] == pytest.approx(measure["read"]["iops"])
    assert m["read.bw_mbps"] == pytest.approx(measure["read"]["bw_bytes"] / 1e6)
    assert m["read.clat_p99_us"] == pytest.approx(
        measure["read"]["clat_ns"]["percentile"]["99.000000"] / 1000
    )
    assert "write.iops" not in m  # the prefill's writes are not the measurement


def test_parse_fdatasync_latency(data_dir: Path) -> None:
    text = load(data_dir, "db-write-4k-fdatasync.writeback.threads.json")
    measure = next(j for j in json.loads(text)["jobs"] if j["jobname"] == "measure")
    m = report_metrics(extract_json(text))
    assert m["sync.count"] == measure["sync"]["lat_ns"]["N"] > 0
    assert m["sync.lat_mean_us"] == pytest.approx(measure["sync"]["lat_ns"]["mean"] / 1000)
    assert m["cpu.sys_pct"] == pytest.approx(measure["sys_cpu"])


def test_parse_mixed_has_both_directions(data_dir: Path) -> None:
    m = report_metrics(extract_json(load(data_dir, "mixed-70-30.none.io_uring.json")))
    assert m["total.iops"] == pytest.approx(m["read.iops"] + m["write.iops"])
    assert 0.6 < m["read.iops"] / m["total.iops"] < 0.8


def test_json_found_despite_noise_around_it(data_dir: Path) -> None:
    text = load(data_dir, "seq-write-1m.unsafe.threads.json")
    noisy = "fio: file hash not empty on exit\n{not json}\n" + text + "\nfio: trailing warning\n"
    assert extract_json(noisy)["jobs"] == json.loads(text)["jobs"]


def test_no_json_is_an_error() -> None:
    with pytest.raises(FioOutputError):
        extract_json("fio: engine libaio not loadable\n")


def test_custom_job_rejects_reserved_options(tmp_path: Path) -> None:
    f = tmp_path / "mine.fio"
    f.write_text("[mine]\nrw=randread\nfilename=/dev/sda\n")
    with pytest.raises(UserError, match=r"mine\.fio:3: option 'filename'"):
        wl.resolve(f"file:{f}")
    f.write_text("[mine]\nrw=randread\nbs=16k\n")
    w = wl.resolve("file:mine.fio", tmp_path)
    assert w.kind == "custom" and w.reads


def test_unknown_workload_lists_presets() -> None:
    with pytest.raises(UserError, match="rand-read-4k"):
        wl.resolve("randread")
