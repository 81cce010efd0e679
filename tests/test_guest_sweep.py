"""A real guest matrix under TCG: 2 cache modes × 2 buses × 2 formats, beside bare metal and the
null ceiling; and the verdict on that sweep: the guest's ratios to bare metal and to the ceiling,
the scores tried, the snippets and the report's chart legend. One sweep serves both tests (the
module is one xdist group: tests/conftest.py's WHOLE_MODULES)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import needs, run_cli

pytestmark = [pytest.mark.slow, needs("qemu-system-x86_64"), needs("fio")]

MATRIX = """
tier = ["guest", "baremetal"]
format = ["raw", "qcow2"]
cache = ["none", "writeback"]
bus = ["virtio-blk", "virtio-scsi"]
workloads = ["rand-write-4k"]
size = "32M"
image_size = "128M"
runtime = 0.5  # what is checked is that every cell ran, was timed and sampled: not its figure
run_timeout = 120
# Both rounds of a cell in one TCG boot (10 boots, not 20: the first run carries the boot's phases, the second its
# own), and no retry of a run the loaded host disturbed (each a boot more): every cell still runs twice.
repetitions_per_boot = 2
retry_disturbed = false
[repetitions]
min = 2
max = 2
"""  # noqa: E501

# The verdict is read as tests/test_verdict.py reads its bare-metal sweep's (LOOSE: every cell tied
# with the leader, so the tie-break gives one answer), at the sweep's 2 runs per cell: the verdict's
# parts (ratios, scores tried, snippets) are checked, not how settled its figures are.
VERDICT = (
    "--min-runs",
    "2",
    "--max-noise",
    "5",
    "--threshold",
    "0.95",
    "--tie-break",
    "safety,simplicity,performance",
)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the sweep's directory, holding r.sqlite and iomatrix-work; the run's output, stdout and
    stderr)."""
    d = tmp_path_factory.mktemp("guest-matrix")
    (d / "m.toml").write_text(MATRIX)
    proc = run_cli("run", "m.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=d, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return d, proc.stdout + proc.stderr


def test_guest_matrix_with_baseline_and_ceiling(matrix: tuple[Path, str]) -> None:
    tmp_path, output = matrix
    # every output warns that TCG figures are not KVM figures, a run's once: its answer carries
    # the warning, and a second on stderr after it said the same again
    assert len(re.findall(r"TCG\s+\(software\s+emulation\)", output)) == 1, output[-3000:]

    doc = json.loads(
        run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    cells = doc["sweeps"][0]["cells"]
    guest = [c for c in cells if c["axes"]["tier"] == "guest" and c["axes"]["backing"] != "null"]
    null = [c for c in cells if c["axes"]["backing"] == "null"]
    bare = [c for c in cells if c["axes"]["tier"] == "baremetal"]
    got = {(c["axes"]["format"], c["axes"]["cache"], c["axes"]["bus"]) for c in guest}
    assert got == {
        (f, c, b)
        for f in ("raw", "qcow2")
        for c in ("none", "writeback")
        for b in ("virtio-blk", "virtio-scsi")
    }
    assert {c["axes"]["bus"] for c in null} == {"virtio-blk", "virtio-scsi"}
    assert {c["axes"]["cache"] for c in bare} == {"none", "writeback"}
    for c in guest + null:
        assert c["ok_runs"] == 2, c
        assert c["accel"] == ["tcg"]
        # phases are timed separately; the workload is the measured figure
        for phase in ("qemu_start_s", "boot_to_workload_s", "workload_s", "wall_s"):
            assert c["phases"][phase]["mean"] > 0, (phase, c["phases"])
        # left out of a run whose end mark was read after QEMU exited (a loaded host), never 0
        assert c["phases"].get("shutdown_s", {"mean": 1.0})["mean"] > 0, c["phases"]
        assert c["phases"]["workload_s"]["mean"] < c["phases"]["wall_s"]["mean"]
        assert "proc.cpu_pct" in c["monitor"], "the QEMU process was sampled"
    assert any("shutdown_s" in c["phases"] for c in guest + null), "no shutdown was timed"
    rows = doc["sweeps"][0]["results"]
    iops = {(r["axes"]["tier"], r["cell"]): r for r in rows if r["metric"] == "write.iops"}
    assert all(r["mean"] > 0 and r["n"] == 2 for r in iops.values())

    table = run_cli("results", "--db", "r.sqlite", cwd=tmp_path)
    assert table.returncode == 0
    # (cells are named by the axes that vary: "qcow2 · …", the null-co ceiling by its format and
    # backing)
    assert (
        "baremetal" in table.stdout and "format=null" in table.stdout and "qcow2" in table.stdout
    ), table.stdout

    # every cell eligible (noise limit off), so comparisons are made and the test used is named
    ranked = run_cli(
        "rank", "--db", "r.sqlite", "--min-runs", "2", "--max-noise", "100", cwd=tmp_path
    )
    assert ranked.returncode == 0, ranked.stderr
    # the analysis used is named (blocked by round, or Welch when rounds are too few) with its
    # correction
    assert "RCBD" in ranked.stdout or "Friedman" in ranked.stdout or "Welch" in ranked.stdout, (
        ranked.stdout
    )
    assert "Holm" in ranked.stdout
    assert "ceiling (null-co" in ranked.stdout and "vs bare metal" in ranked.stdout

    # nothing left behind: no QEMU, no image, no mount
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True).stdout == b""
    assert not [
        p for p in (tmp_path / "iomatrix-work").rglob("*") if p.suffix in (".raw", ".qcow2")
    ]


@needs("chromium")
def test_guest_sweep_verdict_has_bare_metal_and_ceiling_ratios(
    matrix: tuple[Path, str], tmp_path: Path
) -> None:
    db = matrix[0] / "r.sqlite"
    res = run_cli("recommend", "--db", str(db), *VERDICT, "--format", "json")
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    scores = {v["workload"]: v for v in rec["verdicts"][1:]}
    # guests: scores are tried
    assert set(scores) == {"weighted-read", "weighted-write", "weighted-mixed"}
    assert "needs bare-metal results for seq-read-1m" in scores["weighted-read"]["missing"]
    v = rec["verdicts"][0]
    assert v["tier"] == "guest" and v["choice"]["cell"].startswith("format=raw ")
    assert v["to_baremetal"]["ratio"] > 0 and v["to_ceiling"]["ratio"] > 0
    # the ceiling of the chosen cell's bus
    assert v["to_ceiling"]["cell"] == "format=null bus=virtio-blk backing=null"
    qemu = next(s for s in v["snippets"]["snippets"] if s["tool"] == "qemu")["text"]
    assert "driver=raw" in qemu and "virtio-blk-pci" in qemu
    html = tmp_path / "g.html"
    assert run_cli("report", "--html", str(html), "--db", str(db), *VERDICT).returncode == 0
    text = html.read_text()
    # chart legend
    assert re.search(r">\s*bare metal\s*<", text) and re.search(r">\s*ceiling\s*<", text)
    from tests.browser import check_report_renders

    check_report_renders(html, tmp_path)
