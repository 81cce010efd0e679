"""Issue 49, honest working sets: every answer whose working set fits in the host's page cache says
that a caching mode measured memory, not the disk — in the finding (reads and writes), on each ratio
between a page-cache cell and a direct one (text and JSON), and in `iomatrix plan`, which names the
key that measures the disk and its cost. A captured run of the built-in quick plan (128 MiB regions
on a 23.5 GiB host), and cells made here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from iomatrix.fio.shape import shape_of_text
from iomatrix.plan.load import builtin_names, load_plan
from iomatrix.report.headline import headline
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend import recommend
from iomatrix.report.render import headline_text, render_recommendation
from iomatrix.report.shape_findings import memory_served, page_cache_finding, page_cache_note
from iomatrix.runner import plan_expansion
from iomatrix.store import Store
from tests.conftest import DATA

# a real run of the built-in quick plan (its README)
QUICK = DATA / "quick-reversals" / "sweep-a.sqlite"


@pytest.fixture
def quick(tmp_path: Path) -> Store:
    db = tmp_path / "quick.sqlite"
    shutil.copy(QUICK, db)
    store = Store.open_existing(db)
    yield store
    store.close()


def test_the_quick_answer_says_writeback_measured_the_page_cache_for_reads_and_writes(
    quick: Store,
) -> None:
    rec = recommend(quick, 1)
    [full] = [f for f in rec.findings if "page cache" in f]
    # the writes a write cache took into memory are told beside the reads (they were not before
    # issue 49)
    assert "writes went to memory, to be written to the disk after the run" in full
    assert (
        "rand-write-4k (format=raw preallocation=off tier=blocklayer) (128 MiB, writes): "
        "cache=writeback 1.74× (" in full
    )
    assert (
        "rand-read-4k (format=qcow2 preallocation=off tier=blocklayer) (128 MiB, 100% "
        "reads): cache=writeback "
        "2.26× (1.94–2.62)" in full
    )
    # the first screen's short form: the working sets, the largest gain of an answering tier, the
    # key to measure the disk and where its cost is said
    [short] = [f for f in rec.first_findings or [] if "page cache" in f]
    assert short.startswith("the host page cache held the 128 MiB working sets of ")
    assert (
        "cache=writeback measured memory, not the disk (up to 2.26× (1.94–2.62) cache=none)"
        in short
    )
    assert "a plan size beyond twice the RAM ('iomatrix plan quick' says how and its cost)" in short
    screen = headline_text(headline(rec, "vm"), 100).splitlines()
    assert len(screen) <= 30 and all(len(x) <= 100 for x in screen)
    assert "finding: the host page cache held the 128 MiB working sets" in "\n".join(screen)


def test_json_carries_the_page_cache_on_each_ratio_it_applies_to(quick: Store) -> None:
    doc = json.loads(render_recommendation(recommend(quick, 1), "json"))
    marked = [
        (v["workload"], g)
        for v in doc["verdicts"]
        for part in (v, v.get("provisional") or {})
        for g in (*part.get("gains", []), *part.get("alternatives", []))
        if g.get("page_cache")
    ]
    # the writeback pick against its cache=none alternatives: memory against the disk
    assert any(g["cell"] and "cache=none" in g["cell"] for _, g in marked), marked
    assert all(
        g["page_cache"]
        == "cache=writeback measured memory, not the disk (128 MiB working set in RAM)"
        for _, g in marked
    )
    # like with like (writeback against writeback: qcow2 against raw) carries nothing
    same = [
        g
        for v in doc["verdicts"]
        for part in (v, v.get("provisional") or {})
        for g in part.get("alternatives", [])
        if g["cell"] and "cache=writeback" in g["cell"]
    ]
    assert same and all(g["page_cache"] is None for g in same)


def _cell(cid: int, cache: str, backing: str = "dir", **extra: str) -> CellWorkload:
    axes = {
        "tier": "blocklayer",
        "format": "raw",
        "cache": cache,
        "aio": "threads",
        "backing": backing,
        **extra,
    }
    return CellWorkload(
        cid, f"k{cid}", axes, {"backing_type": backing, "backing_label": backing}, "w", []
    )


@pytest.mark.parametrize(
    "job, cache, served",
    [
        ("[j]\nrw=randwrite\nsize=64m\n", "writeback", "writes"),
        # each write made durable: the disk's speed
        ("[j]\nrw=randwrite\nsize=64m\nfdatasync=1\n", "writeback", ""),
        # each flush writes the 15 before it out inside the measured time: the page cache batches
        # them, whatever the working set (measured on fs-write: guest/fs_shape.py)
        ("[j]\nrw=randwrite\nsize=64m\nfsync=16\n", "writeback", ""),
        # unsafe drops the flushes: every write stays in memory
        ("[j]\nrw=randwrite\nsize=64m\nfdatasync=1\n", "unsafe", "writes"),
        ("[j]\nrw=randwrite\nsize=64m\n", "writethrough", ""),  # QEMU flushes every write
        ("[j]\nrw=randrw\nsize=64m\n", "writethrough", "reads"),
        ("[j]\nrw=randrw\nsize=64m\n", "unsafe", "reads and writes"),
        ("[j]\nrw=randread\nsize=64m\n", "none", ""),
    ],
)
def test_what_the_page_cache_serves_follows_the_cache_mode_and_the_flushing(
    job: str, cache: str, served: str
) -> None:
    assert memory_served(_cell(1, cache), shape_of_text("w", job)) == served


def test_a_ratio_is_marked_only_across_the_page_cache_and_only_when_the_working_set_fits() -> None:
    shape = shape_of_text("w", "[j]\nrw=randread\nsize=64m\n")
    wb, none, wt = _cell(1, "writeback"), _cell(2, "none"), _cell(3, "writethrough")
    assert (
        page_cache_note(wb, none, shape, 8 << 30)
        == "cache=writeback measured memory, not the disk (64 MiB working set in RAM)"
    )
    assert page_cache_note(none, wb, shape, 8 << 30).startswith("cache=writeback measured memory")
    assert page_cache_note(wb, wt, shape, 8 << 30) == ""  # both from memory: like with like
    assert page_cache_note(wb, none, shape, 64 << 20) == ""  # 64 MiB on a 64 MiB host: not held
    assert page_cache_note(wb, none, shape, None) == ""  # RAM not recorded
    rbd = _cell(4, "writeback", "rbd")
    # librbd, no host page cache
    assert page_cache_note(rbd, _cell(5, "none", "rbd"), shape, 8 << 30) == ""


def test_a_flushing_writer_gets_no_page_cache_sentence_however_fast() -> None:
    """fdatasync after every write under writeback: each write reaches the disk, so a gain is no
    memory's."""

    def cell(cid: int, cache: str, iops: float) -> CellWorkload:
        c = _cell(cid, cache)
        c.samples["total.iops"] = [iops * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
        return c

    cws = [cell(1, "none", 1000), cell(2, "writeback", 3000)]
    flushing = {"w": shape_of_text("w", "[j]\nrw=randwrite\nsize=64m\nfdatasync=1\n")}
    assert page_cache_finding(cws, 0.05, flushing, lambda w: "total.iops", 8 << 30) is None
    absorbed = {"w": shape_of_text("w", "[j]\nrw=randwrite\nsize=64m\n")}
    text = page_cache_finding(cws, 0.05, absorbed, lambda w: "total.iops", 8 << 30)
    assert text is not None and "w (64 MiB, writes): cache=writeback 3.00×" in text


def test_plan_names_the_key_that_measures_the_disk_and_its_cost() -> None:
    from iomatrix.commands.plan import page_cache_line

    # quick-micro: quick's matrix with the micro-workloads (quick itself answers per role: its line
    # is checked below)
    p, base = load_plan("quick-micro")
    exp = plan_expansion(p, base, set())
    line = page_cache_line(p, exp, 8 << 30, "quick-micro")
    assert line is not None
    assert (
        "size = 128M, the region each run works on, fits in this host's page cache (8 GiB of RAM)"
        in line
    )
    assert (
        'set size = "16G" and image_size = "16G" (twice the RAM)' in line
        and "quick-micro.toml" in line
    )
    # rand-read-4k on bare metal and both block-layer formats under writeback, 3 runs each, 16 GiB
    # first
    assert (
        "its 3 reading units × 3 runs would each write those 16 GiB first (144 GiB at the least"
        in line
    )
    assert "beyond its 4.5m budget" in line
    # 128 MiB on a 128 MiB host: not held
    assert page_cache_line(p, exp, 128 << 20, "quick-micro") is None
    roles, base = load_plan("quick")
    line = page_cache_line(roles, plan_expansion(roles, base, set()), 8 << 30, "quick")
    assert line is not None and "quick.toml" in line and "runs longer than runtime" in line
    ceph, base = load_plan("ceph")  # librbd: no host page cache whatever the cache mode
    assert page_cache_line(ceph, plan_expansion(ceph, base, set()), 8 << 30, "ceph") is None


def test_every_built_in_plan_says_what_its_region_size_measures() -> None:
    from importlib import resources

    for name in builtin_names():
        text = (resources.files("iomatrix.plans") / f"{name}.toml").read_text()
        comments = " ".join(line for line in text.splitlines() if line.startswith("#"))
        assert re.search(r"\b(size|region size)\b", comments) and "page cache" in comments, name
