"""librbd's writethrough-until-flush trap (issue 35): the decision rule on constructed ratios, the
sentence on a real sweep's database (`tests/data/answers/ceph-flush-trap.sqlite`: the built-in
`ceph` plan without its clients axis, run 2026-11-24 on a lab-started Ceph here), the librbd risk
lines, and a real sweep on a lab Ceph that records every cell the finding compares and leaves
nothing (the physics: bench/rbd_flush_physics.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psutil
import pytest

from iomatrix.matrix import estimate_seconds
from iomatrix.plan.load import load_plan
from iomatrix.protocols.rbd import Rbd
from iomatrix.report.flush_gate import WritebackGain, trap_finding
from iomatrix.runner import plan_expansion
from iomatrix.stats.compare import RatioCI
from tests.conftest import DATA, needs, run_cli

# librbd's cache, as the protocol describes it to the renderer
assert Rbd.flush_gated_cache is not None
GATE = Rbd.flush_gated_cache

DB = DATA / "answers" / "ceph-flush-trap.sqlite"


def _gain(
    workload: str,
    flushes: bool,
    until: str,
    r: float,
    lo: float,
    hi: float,
    policy: str = "writearound",
    context: tuple = (),
) -> WritebackGain:
    return WritebackGain(workload, flushes, policy, until, RatioCI(r, lo, hi), context)


FLAT = _gain("rand-write-4k", False, "on", 1.07, 0.80, 1.48)
FLUSHING = _gain("rand-write-4k-flush32", True, "on", 3.58, 2.92, 4.58)
OFF = _gain("rand-write-4k", False, "off", 6.48, 4.85, 8.84)


def test_the_trap_is_told_when_the_non_flushing_ratio_holds_1_and_a_flushing_one_is_faster() -> (
    None
):
    text = trap_finding([FLAT, FLUSHING, OFF], 0.05, GATE)
    assert text is not None
    assert "no faster than cache=none (1.07× (0.80–1.48))" in text
    # no shape words given
    assert "rand-write-4k-flush32, which flushes now and then, it was 3.58× (2.92–4.58)" in text
    assert "rbd_cache_writethrough_until_flush=off, on rand-write-4k, it was 6.48×" in text
    # no context named when the sweep varies none
    assert text.startswith("librbd stays writethrough")


@pytest.mark.parametrize(
    "gains, why",
    [
        (
            [_gain("rand-write-4k", False, "on", 1.6, 1.2, 2.1), FLUSHING, OFF],
            "writeback faster without flushes",
        ),
        ([FLAT], "nothing faster to contrast with"),
        (
            [FLAT, _gain("rand-write-4k-flush32", True, "on", 1.03, 0.9, 1.2)],
            "flushing workload not faster",
        ),
        (
            [FLAT, _gain("rand-write-4k-flush32", True, "on", 1.04, 1.01, 1.08)],
            "faster, but within the threshold",
        ),
        (
            [_gain("rand-write-4k", False, "on", 1.0, 0.05, 9.0), FLUSHING],
            "an imprecise interval shows nothing",
        ),
        (
            [FLAT, _gain("rand-write-4k-flush32", True, "on", 3.0, 2.0, 4.0, policy="writeback")],
            "the contrast is under another policy",
        ),
    ],
)
def test_nothing_is_said_when_the_figures_do_not_show_it(
    gains: list[WritebackGain], why: str
) -> None:
    assert trap_finding(gains, 0.05, GATE) is None, why


def test_a_slower_non_flushing_workload_is_flat_and_a_gaining_one_is_said_not_hidden() -> None:
    """On a loaded host writeback can measure below none without flushes (an interval under 1 counts
    as no faster); a non-flushing workload that gained anyway is named with its read share, not left
    out."""
    slower = _gain("file:app.fio", False, "on", 0.90, 0.86, 0.94)
    reader = WritebackGain(
        "file:mix.fio", False, "writearound", "on", RatioCI(1.4, 1.2, 1.6), read_share=0.7
    )
    text = trap_finding([slower, FLUSHING, reader], 0.05, GATE)
    assert text is not None
    assert (
        "on file:app.fio, which never flushes, QEMU cache=writeback was slower than "
        "cache=none (0.90×" in text
    )
    assert (
        "on file:mix.fio, which never flushes either, writeback was 1.40× (1.20–1.60): "
        "it reads 70% of its "
        "I/O, which librbd's cache serves even while writethrough"
    ) in text
    # no flat workload: nothing shows the trap
    assert trap_finding([reader, FLUSHING], 0.05, GATE) is None


def test_contexts_are_never_mixed_and_are_named_where_the_sweep_varies_them() -> None:
    one, two = (("clients", "1"),), (("clients", "2"),)
    mixed = [
        _gain("rand-write-4k", False, "on", 1.0, 0.9, 1.1, context=one),
        _gain("rand-write-4k-flush32", True, "on", 3.0, 2.5, 3.5, context=two),
    ]
    assert trap_finding(mixed, 0.05, GATE) is None
    both = [*mixed, _gain("rand-write-4k-flush32", True, "on", 2.0, 1.5, 2.5, context=one)]
    text = trap_finding(both, 0.05, GATE)
    # the count it holds at in words, a condition, never "with clients=1:" (issue 70), and the
    # count whose figures do not show it said too
    assert text is not None and text.startswith("at 1 client on the backend, librbd stays")
    assert "At 2 clients the figures do not show it. " in text and "clients=" not in text


def test_the_built_in_ceph_plan_measures_the_trap_within_its_budget() -> None:
    """`iomatrix run ceph`: librbd's policy × until-flush under cache=writeback beside cache=none
    (where librbd's cache is off, so its settings are pruned there), a workload that never flushes
    and one that does, from 1, 2 and 4 clients; its own estimate within 20 minutes at the most runs
    it allows."""
    plan, base = load_plan("ceph")
    exp = plan_expansion(plan, base, set())
    cells = [dict(c.items()) for c in exp.cells]
    wb = {
        (c["rbd_cache_policy"], c["rbd_cache_writethrough_until_flush"], c["clients"])
        for c in cells
        if c["cache"] == "writeback"
    }
    assert wb == {
        (p, u, n)
        for p in ("writearound", "writeback")
        for u in ("on", "off")
        for n in ("1", "2", "4")
    }
    assert {
        (c["rbd_cache_policy"], c["rbd_cache_writethrough_until_flush"])
        for c in cells
        if c["cache"] == "none"
    } == {("writearound", "on")}
    assert any("turns librbd's cache off for cache=none" in p.reason for p in exp.pruned)
    assert set(plan.workloads) == {"rand-write-4k", "rand-write-4k-flush32"}
    assert estimate_seconds(plan, exp)[1] <= 20 * 60


def test_a_real_ceph_sweep_tells_the_trap_in_every_output(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    shutil.copy(DB, db)
    doc = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)
    assert len(doc["findings"]) == 1
    finding = doc["findings"][0]
    assert (
        "on rand-write-4k, which never flushes, QEMU cache=writeback was no faster than cache=none"
        in finding
    )
    text = " ".join(run_cli("recommend", "--db", str(db)).stdout.split())
    # the first screen's short form (report/screen.py), the whole finding in Markdown and HTML
    assert "finding: librbd is writethrough until the first flush" in text, text
    md = " ".join(run_cli("recommend", "--db", str(db), "--format", "markdown").stdout.split())
    assert "finding: librbd stays writethrough" in md
    html = tmp_path / "r.html"
    assert run_cli("report", "--db", str(db), "--html", str(html)).returncode == 0
    page = html.read_text()
    assert 'class="finding">finding: librbd stays writethrough' in page
    # "Every run" names the later axes a cell sets (issue 36: not only the first eight columns),
    # by setting, not in the store key's slash form ("raw/off/writeback/threads/-/rbd+…"), and
    # what every run shares once
    every_run = page.split('id="runs"', 1)[1]
    assert (
        ">cache=writeback · rbd_cache_policy=writeback · rbd_cache_writethrough_until_flush=off"
        "</td>" in every_run
    )
    assert "every run, where the setting applies: format=raw preallocation=off" in every_run
    assert "/threads/" not in every_run


def test_librbd_cache_risks_name_librbd_not_the_host_page_cache(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    shutil.copy(DB, db)
    doc = json.loads(run_cli("recommend", "--db", str(db), "--format", "json").stdout)
    risks = [r for v in doc["verdicts"] if v.get("choice") for r in v.get("risks", [])]
    assert risks, doc
    crash = [r["text"] for r in risks if r["situation"] == "QEMU crash"]
    assert crash and all("librbd" in t and "page cache" not in t for t in crash), crash


# One run per cell: the test checks what the sweep records and leaves, not the speeds (the physics,
# with more runs: bench/rbd_flush_physics.py).
CEPH_SWEEP = """
tier = ["blocklayer"]
format = ["raw"]
cache = ["none", "writeback"]
rbd_cache_writethrough_until_flush = ["on", "off"]
workloads = ["rand-write-4k", "rand-write-4k-flush32"]
size = "32M"
image_size = "64M"
runtime = 1
null_ceiling = false
retry_disturbed = false  # what the sweep records is checked, not how clean its runs were
[repetitions]
min = 1
max = 1
[[backing]]
type = "rbd"
"""


def _ceph_processes(root: Path) -> list[int]:
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] in ("ceph-mon", "ceph-osd") and str(root) in " ".join(
            p.info["cmdline"] or []
        ):
            out.append(p.pid)
    return out


@pytest.mark.slow
@needs("ceph-mon")
@needs("qemu-storage-daemon")
def test_a_lab_ceph_sweep_measures_every_cache_and_flush_cell_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A real sweep on a lab-started Ceph across cache, rbd_cache_writethrough_until_flush and a
    flushing and a never-flushing workload stores a write IOPS figure for each of the cells the
    finding compares, and leaves no Ceph process and nothing in its workdir. The decision (the trap
    told or not) is tested on a captured lab-Ceph database above; the physics (the ratios
    themselves, which a loaded CI host bends: the never-flushing one measured 1.76 there, 1.1-1.3
    on a quiet host) is a measurement, in bench/rbd_flush_physics.py (issue 67)."""
    (tmp_path / "p.toml").write_text(CEPH_SWEEP)
    res = run_cli("run", "p.toml", "--db", "r.sqlite", cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    iops = {}
    for r in rows["sweeps"][0]["results"]:
        if r["metric"] == "write.iops":
            a = r["axes"]
            iops[(a["cache"], a.get("rbd_cache_writethrough_until_flush", "on"), r["workload"])] = (
                r["mean"]
            )
    compared = {
        ("none", "on", "rand-write-4k"),
        ("none", "on", "rand-write-4k-flush32"),
        ("writeback", "on", "rand-write-4k"),
        ("writeback", "on", "rand-write-4k-flush32"),
        ("writeback", "off", "rand-write-4k"),
    }
    assert compared <= iops.keys(), sorted(iops)
    assert all(iops[k] > 0 for k in compared), iops
    assert _ceph_processes(tmp_path) == []
    assert (
        run_cli("clean", "--workdir", str(tmp_path / "iomatrix-work"), cwd=tmp_path).returncode == 0
    )
    left = [
        p
        for p in (tmp_path / "iomatrix-work").rglob("*")
        if p.is_file() and ".iomatrix" not in p.parts
    ]
    assert left == [], left
