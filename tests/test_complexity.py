"""No function of iomatrix is graded E or F by radon's cyclomatic complexity (E: 31–40 paths, F:
more).

Such functions are where bugs hide and where the next contributor is slowest; split them into
well-named pieces instead of raising the bar here."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit
from radon.metrics import mi_rank, mi_visit

SRC = Path(__file__).resolve().parent.parent / "src" / "iomatrix"


def test_no_function_graded_e_or_f() -> None:
    worst = []
    for path in sorted(SRC.rglob("*.py")):
        for block in cc_visit(path.read_text()):
            if cc_rank(block.complexity) in ("E", "F"):
                worst.append(
                    f"{path.relative_to(SRC)}:{block.lineno} {block.fullname} "
                    f"{cc_rank(block.complexity)} ({block.complexity})"
                )
    assert not worst, "split these functions:\n" + "\n".join(worst)


# Modules radon grades C by maintainability index (MI < 10: long, branchy, little commented
# structure) are the ones a newcomer cannot change safely (issue 36). None is allowed: runner.py,
# the last one (4.1), was split into `iomatrix.sweep` along its seams.

# Functions graded D by cyclomatic complexity (21-30 paths). The count may only go down: 26 on main
# when the ratchet was added, 25 once the splits of issue 36 landed, 18 after issue 48's (a plan's
# tier table, the racing round, the scheduler's resumed round, a weighted score's part, rank_sweep's
# refusals, a ranking's notes, the monitor's column fitting); lower this number whenever a change
# splits one, never raise it. 9 after issue 68's (the matrix's expansion, a fleet answer's
# statement, results by host, plan errors, the block-size charts, a sweep's cells × workloads, the
# fio allowlist, a device handed over, a libvirt disk); 8 once the merged tree's own splits
# landed (run_line, parse_current, the initramfs, the consolidation outcome, others'); 7 after
# issue 68's second round (axis_answers, classify, the screen's head and its workload line); 5 once
# a cell's analysis unit (stats/analysis_unit.py cell_unit: its boot grouping, its first-run
# effect) and the blocked analysis (stats/blocked.py: why no block analysis, the residuals'
# normality) gave parts to helpers.
MAX_D_FUNCTIONS = 5


def _functions_graded(rank: str) -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for block in cc_visit(path.read_text()):
            # A class's block sums its methods' paths: its methods are counted one by one instead.
            if not hasattr(block, "methods") and cc_rank(block.complexity) == rank:
                out.append(
                    f"{path.relative_to(SRC)}:{block.lineno} {block.fullname} ({block.complexity})"
                )
    return out


def test_no_module_graded_c_by_maintainability_index() -> None:
    graded = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        mi = mi_visit(path.read_text(), multi=True)
        if mi_rank(mi) == "C":
            graded.append(f"{rel}: maintainability index {mi:.1f} (C)")
    assert not graded, "split these modules along their seams:\n" + "\n".join(graded)


def test_the_number_of_d_functions_only_goes_down() -> None:
    found = _functions_graded("D")
    assert len(found) <= MAX_D_FUNCTIONS, (
        f"{len(found)} functions graded D, at most {MAX_D_FUNCTIONS}: split the "
        "new one\n" + "\n".join(found)
    )
