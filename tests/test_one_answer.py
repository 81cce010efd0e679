"""One answer everywhere, and a safe one by default (issue 38).

The end of `run`, `recommend`, `recommend --detail`, the HTML report and JSON say the same thing for
the same database: one function (report.recommend.answer_of) decides, and this file compares every
output with it. The answer considers only configurations that honour guest flushes unless the user
passes --allow-data-loss; a faster unsafe configuration is named in one line with its measured gain
and its risk.

Databases: `data/golden/quick-sweep.sqlite` (every workload unsettled: the tie-break's pick is
    leading, never
"Use:") and `data/answers/unsafe-fastest.sqlite`, a real block-layer sweep of cache=none against
cache=unsafe on fdatasync-bound writes (`unsafe-fastest.toml`; fio's raw JSON emptied to keep the
file small), where cache=unsafe is fastest by an order of magnitude."""

from __future__ import annotations

import functools
import html as htmllib
import json
import re
import shutil
from pathlib import Path

import pytest

from iomatrix.report.recommend import recommend
from iomatrix.report.render import end_of_run_text
from iomatrix.store import Store
from tests.conftest import DATA, run_cli

QUICK = DATA / "golden" / "quick-sweep.sqlite"
UNSAFE = DATA / "answers" / "unsafe-fastest.sqlite"


def _copy(src: Path, tmp_path: Path) -> Path:
    """A private copy: reading a database may leave -wal/-shm files beside it."""
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    return dst


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """One private copy of each database per module. Every command here only reads it, so the
    tests share the copy, and each answer rendered from it (_json, _outputs) is rendered once per
    module and asserted on by every test that reads it: several tests ask the same outputs."""
    d = tmp_path_factory.mktemp("answers")
    return {src: _copy(src, d) for src in (QUICK, UNSAFE)}


def _flat(text: str) -> str:
    """Wrapped prose read as one text."""
    return " ".join(text.split())


@functools.cache
def _outputs(db: Path, *extra: str) -> dict[str, str]:
    """Every place a user reads the answer, as flat text (HTML unescaped, tags dropped)."""
    out: dict[str, str] = {}
    for name, args in (
        ("recommend", ()),
        ("detail", ("--detail",)),
        ("markdown", ("--format", "markdown")),
    ):
        res = run_cli("recommend", "--db", str(db), *args, *extra)
        assert res.returncode == 0, res.stderr
        out[name] = _flat(res.stdout)
    page = db.with_name(f"{db.stem}{''.join(extra)}.html")
    res = run_cli("report", "--html", str(page), "--db", str(db), *extra)
    assert res.returncode == 0, res.stderr
    out["html"] = _flat(htmllib.unescape(re.sub(r"<[^>]+>", " ", page.read_text())))
    store = Store.open_existing(db)
    try:
        out["end of run"] = _flat(
            end_of_run_text(store, 1, 100, allow_data_loss="--allow-data-loss" in extra)
        )
    finally:
        store.close()
    return out


@functools.cache
def _json(db: Path, *extra: str) -> dict:
    res = run_cli("recommend", "--db", str(db), "--format", "json", *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize(
    "db, extra",
    [(QUICK, ()), (UNSAFE, ()), (UNSAFE, ("--allow-data-loss",))],
    ids=["unsettled", "unsafe-fastest", "allow-data-loss"],
)
def test_every_output_says_the_json_answer(
    db: Path, extra: tuple[str, ...], dbs: dict[Path, Path]
) -> None:
    db = dbs[db]
    data = _json(db, *extra)
    picks = data["headline"]["picks"]
    assert picks, data["headline"]
    outputs = _outputs(db, *extra)
    for p in picks:
        verb = "Use" if p["settled"] else "Use for now, the tie-break's pick"
        said = f"{verb}: {p['name']}"
        # the densest screen (laid out for the most crowded target's, issue 70): "Use for now"
        brief = f"Use for now: {p['name']}"
        for where, text in outputs.items():
            assert said in text or (not p["settled"] and brief in text), (where, said, text[:600])
    if not any(p["settled"] for p in picks):
        for where, text in outputs.items():
            assert "Use:" not in text, where
    # The detail says per workload what the headline says: settled answers are "use:", the others
    # "use for now:" the same leading cell, not told apart at this resolution (issue 71).
    for v in data["verdicts"]:
        if v["metric"] == "score" or v["answer"] is None:
            continue
        if v["answer"]["status"] == "provisional":
            assert v["choice"] is None and v["provisional"]["choice"]["cell"] == v["answer"]["cell"]
            said = "— not told apart at this resolution"
            assert "use for now: " in outputs["detail"] and said in outputs["detail"]
        else:
            assert v["choice"]["cell"] == v["answer"]["cell"]
    for d in data["headline"]["declined"]:
        for where, text in outputs.items():
            assert _flat(d) in text, (where, d)


def test_unsafe_is_not_the_default_answer_but_is_named_once_with_its_gain_and_risk(
    dbs: dict[Path, Path],
) -> None:
    db = dbs[UNSAFE]
    data = _json(db)
    assert [r["name"] for r in data["requirements"]] == ["power-loss-safe"] and data[
        "allow_data_loss"
    ] is False
    (v,) = data["verdicts"]
    assert "cache=none" in v["answer"]["cell"] and v["answer"]["status"] == "answer"
    declined = v["declined"]
    assert "cache=unsafe" in declined["cell"] and declined["fails"] == ["power-loss-safe"]
    assert declined["vs_answer"]["ratio"] > 1 and declined["opt_in"] == "--allow-data-loss"
    assert "lost" in declined["risk"]
    (line,) = data["headline"]["declined"]
    # its interval spans 2.4–150×: no figure, here as in every ratio (issue 49)
    assert "may gain over the answer, not measured precisely (" in line and "×" in line
    assert "--allow-data-loss" in line and "power loss" in line
    # the finding that unsafe's figures were memory's (it drops the log's flushes: the 2.4–150×) is
    # the one other place it is named, and no snippet sets it
    store = Store.open_existing(db)
    try:  # the finding in each of its forms (the crowded screen's one line too)
        rec = recommend(store, 1)
        findings = [*rec.findings, *(rec.first_findings or []), *rec.brief_findings]
    finally:
        store.close()
    assert all("drops the flushes" in f for f in findings) and findings
    for where, text in _outputs(db).items():
        for f in findings:
            text = text.replace(_flat(f), "")
        assert (
            'cache="unsafe"' not in text and "cache=unsafe" not in text.split("not chosen:")[0]
        ), where
        # once in the answer; the detail (--detail, Markdown) repeats it under its workload
        n = text.count("not chosen:")
        assert n == 1 if where in ("recommend", "end of run") else n >= 1, where


def test_allow_data_loss_lifts_the_requirement_and_names_unsafe_as_leading(
    dbs: dict[Path, Path],
) -> None:
    # 3 rounds, unsafe's runs swinging 1.9–118× over cache=none's: at the first look's level
    # (docs/statistics.md §10b) nothing separates them. Without the requirement, unsafe is the
    # measured leader, the tie-break (safety first) the pick; nothing is "not chosen" for a
    # requirement, since none is left.
    db = dbs[UNSAFE]
    data = _json(db, "--allow-data-loss")
    assert data["requirements"] == [] and data["allow_data_loss"] is True
    (v,) = data["verdicts"]
    assert (
        "cache=none" in v["answer"]["cell"]
        and v["answer"]["status"] == "provisional"
        and v["declined"] is None
    )
    text = _flat(run_cli("recommend", "--db", str(db), "--allow-data-loss", "--detail").stdout)
    assert (
        "Use for now, the tie-break's pick: cache=none" in text
        and "unsafe has the best geo. mean" in text
    )
    assert "not chosen" not in text


def test_an_explicit_requirement_keeps_the_safe_default(dbs: dict[Path, Path]) -> None:
    db = dbs[UNSAFE]
    data = _json(db, "--require", "migratable")
    assert [r["name"] for r in data["requirements"]] == ["power-loss-safe", "migratable"]
    assert "cache=none" in data["verdicts"][0]["answer"]["cell"]


def test_the_short_answer_names_its_objective(dbs: dict[Path, Path]) -> None:
    db = dbs[UNSAFE]
    for extra in ((), ("--format", "markdown")):
        res = run_cli("recommend", "--db", str(db), "--objective", "cpu-per-io", *extra)
        assert res.returncode == 0, res.stderr
        head = res.stdout.split("more: iomatrix recommend --detail")[0]
        assert "objective: cpu-per-io" in head, res.stdout
    assert _json(db, "--objective", "cpu-per-io")["headline"]["objective"] == "cpu-per-io"


def test_rank_names_no_leader_the_answer_does_not(dbs: dict[Path, Path]) -> None:
    """One leader everywhere (issue 49): where the answer names the tie-break's pick ("No answer
    yet, the tie-break's pick: raw · writeback"), `rank`'s table of the tier that answered never
    says another cell "leads" the same workload (the example: "qcow2 leads" beside "leading:
    raw")."""
    db = dbs[QUICK]
    data = _json(db)
    pick_of = {
        wg["workload"]: p["name"] for p in data["headline"]["picks"] for wg in p["workloads"]
    }
    res = run_cli("rank", "--db", str(db))
    assert res.returncode == 0, res.stderr
    # the tables, one per workload × tier, each headed "WORKLOAD · metric … · tier TIER"
    tables = re.split(r"\n(?=\S[^\n]* · tier \w+\n)", "\n" + res.stdout)
    checked = 0
    for table in tables:
        head = table.strip().splitlines()[0] if table.strip() else ""
        workload, tier = head.partition(" · ")[0], head.rsplit(" · tier ", 1)[-1]
        if workload not in pick_of or tier != "blocklayer":
            continue
        flat = _flat(table)
        # "X leads" is said of the pick alone; a better mean of another cell is said as such
        leaders = re.findall(r"(?:^|[:;.] )([^:;.]+?) leads\b", flat)
        checked += 1
        assert all(x == pick_of[workload] for x in leaders), (workload, leaders, pick_of[workload])
        # an unsettled table names the answer's pick as the pick
        if "not told apart yet at" in flat or "not told apart within the budget" in flat:
            assert f"picks {pick_of[workload]}" in flat, (workload, pick_of[workload])
    assert checked == len(pick_of), (checked, pick_of)


def test_a_ceph_sweep_whose_answers_differ_per_client_count_is_answered(tmp_path: Path) -> None:
    """The built-in ceph plan's sweep (tests/data/answers/ceph-clients.sqlite: 1, 2 and 4 clients
    on one rbd backend, answers that differ per client count) ends with an answer, as `iomatrix run
    ceph` printed none ("internal error: TypeError: unhashable type: 'dict'") until the trade-off
    line keyed the backing group's configurations by the group's name; that line is printed at
    most once (not at all since the client counts are one configuration's conditions, issue 70:
    tests/test_conditions_not_choices.py)."""
    db = tmp_path / "ceph-clients.sqlite"
    shutil.copy(DATA / "answers" / "ceph-clients.sqlite", db)
    res = run_cli("recommend", "--db", str(db))
    assert res.returncode == 0, res.stderr
    assert "internal error" not in res.stdout + res.stderr
    said = res.stdout.count("on rbd, the answers differ") + res.stdout.count("on rbd, a trade-off")
    assert said <= 1, res.stdout
