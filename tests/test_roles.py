"""Role profiles (iomatrix.roles, issue 53): each built-in role's jobs rendered into the fio jobs
every tier gives fio (golden files), the allowlist they pass, and a user's role table checked like
every plan key.

After a deliberate change of a role, regenerate with IOMATRIX_UPDATE_GOLDEN=1 and review the diff
(docs/roles.md traces each profile to the published one it follows: keep them in step)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix import roles
from iomatrix.fio.jobs import JobShape, baremetal_job, guest_job, nbd_job
from iomatrix.workloads import resolve

GOLDEN = Path(__file__).parent / "data" / "golden" / "roles"
# A tiny device's region: what a test image holds (the plan's size), one second per run.
SHAPE = JobShape(size_bytes=16 << 20, runtime_s=1.0, image_bytes=64 << 20)


def _rendered(name: str) -> str:
    w = resolve(name)
    parts = [
        "# --- baremetal (cache=none, aio=native)",
        baremetal_job(
            w, cache="none", aio="native", target="/TARGET", shape=SHAPE, custom_text=w.custom_text
        ),
        "# --- blocklayer (fio over NBD)",
        nbd_job(
            w, uri="nbd+unix:///disk?socket=nbd.sock", shape=SHAPE, custom_text=w.custom_text
        ).text,
        "# --- guest",
        guest_job(w, shape=SHAPE, custom_text=w.custom_text),
    ]
    return "\n".join(parts)


@pytest.mark.parametrize("name", roles.role_workload_names())
def test_role_job_golden(name: str) -> None:
    path = GOLDEN / f"{name.replace(':', '.')}.fio"
    text = _rendered(name)
    if os.environ.get("IOMATRIX_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), (
        f"{name}: rendering changed; regenerate with IOMATRIX_UPDATE_GOLDEN=1"
    )


def test_every_builtin_role_is_found_by_name_and_traced() -> None:
    assert {"database", "file-server", "vdi", "web", "backup", "log"} <= set(roles.builtin_names())
    doc = (Path(__file__).parent.parent / "docs" / "roles.md").read_text()
    for name in roles.builtin_names():
        role = roles.builtin(name)
        assert role is not None and role.follows and 0 < role.margin <= roles.MAX_MARGIN
        assert f"`{name}`" in doc, f"docs/roles.md says nothing of role {name}"
        for job, workload in role.jobs:
            w = resolve(workload)
            # Its primary metric is the role's first figure on that job (what ranks it in `rank` and
            # the report).
            first = next(f for f in role.figures if f.job == job)
            assert (w.primary_metric, w.higher_is_better) == (first.metric, first.higher_is_better)


def test_database_role_follows_xray_oltp_with_a_durable_log() -> None:
    data = resolve("database:data").custom_text or ""
    log = resolve("database:log").custom_text or ""
    for line in (
        "rw=randrw",
        "bssplit=8k/90:32k/10",
        "iodepth=8",
        "rate_iops=750,750",
        "rate_process=poisson",
    ):
        assert line in data.splitlines()
    for line in ("rw=write", "iodepth=1", "fdatasync=1"):
        assert line in log.splitlines()
    # Reads of a region never written would hit holes: the data job's region is written first, the
    # log's not.
    assert resolve("database:data").prefill and not resolve("database:log").prefill
    assert "[prefill]" in _rendered("database:data") and "[prefill]" not in _rendered(
        "database:log"
    )


def test_a_tiny_region_bounds_every_job() -> None:
    """Every job runs inside the cell's region at the plan's runtime: no size, offset or target of
    its own."""
    for name in roles.role_workload_names():
        text = resolve(name).custom_text or ""
        assert not any(k in text for k in ("size=", "offset=", "filename=", "zonesize")), name


def test_custom_role_table() -> None:
    role = roles.custom_role(
        "my-db",
        {
            "jobs": {"data": "jobs/oltp.fio", "log": "jobs/log.fio"},
            "decides": [
                "data:read.clat_p99_us",
                {"figure": "log:write.iops", "says": "commits per second", "weight": 3},
            ],
            "margin": 0.1,
        },
    )
    assert role.workload_names() == ["file:jobs/oltp.fio", "file:jobs/log.fio"]
    assert [f.key for f in role.figures] == ["data:read.clat_p99_us", "log:write.iops"]
    assert role.figures[1].says == "commits per second" and role.margin == 0.1 and not role.builtin
    # a trade-off between them is weighed 1 : 3 (report/recommend/roles.py, stats/weighed.py)
    assert [f.weight for f in role.figures] == [1.0, 3.0]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"jobs": {"data": "a.fio"}, "decides": ["dta:read.iops"]}, "no job 'dta' in this role"),
        ({"jobs": {"data": "a.fio"}, "decides": ["data:read.iopz"]}, "did you mean 'read.iops'"),
        (
            {"jobs": {"data": "a.fio"}, "decides": ["data:read.iops"], "margin": 5},
            "5: margin must be a fraction",
        ),
        ({"jobs": {"data": "a.fio"}, "decides": []}, "decides: must be a non-empty list"),
        (
            {"jobs": {"data": "a.fio"}, "decides": ["data:read.iops"], "margn": 0.1},
            "did you mean 'margin'",
        ),
        ({"jobs": {}, "decides": ["data:read.iops"]}, "jobs: must be a table of jobs"),
        (
            {"jobs": {"data": "a.fio"}, "decides": [{"figure": "data:read.iops", "weight": 0}]},
            "role.mine.decides[1].weight: 0: must be a number above 0",
        ),
        (
            {"jobs": {"data": "a.fio"}, "decides": [{"figure": "data:read.iops", "weight": "2"}]},
            "weight: 2: must be a number above 0, relative to the role's other figures",
        ),
        (
            {"jobs": {"data": "a.fio"}, "decides": [{"figure": "data:read.iops", "wieght": 2}]},
            "unknown key 'wieght'",
        ),
    ],
)
def test_bad_custom_role_table_one_line(table: dict, says: str) -> None:
    with pytest.raises(ValueError) as err:
        roles.custom_role("mine", table)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_unknown_role_name_did_you_mean() -> None:
    with pytest.raises(ValueError, match="unknown role 'databse' — did you mean 'database'"):
        roles.resolve_roles(["databse"], {})
    with pytest.raises(ValueError, match="'database' is a built-in role"):
        roles.custom_role("database", {})


# --- Roles in a plan: the `roles` key, [role.NAME] tables, --role, `iomatrix plan` ----------------

CUSTOM_PLAN = """
tier = ["blocklayer"]
roles = ["database", "my-db"]
workloads = ["rand-read-4k"]

[role.my-db]
description = "our PostgreSQL"
jobs = { data = "jobs/pg-data.fio" }
decides = ["data:read.clat_p99_us"]
margin = 0.1
"""


def _plan_dir(tmp_path: Path, text: str) -> Path:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "pg-data.fio").write_text(
        "[pg]\nrw=randrw\nrwmixread=70\nbs=8k\niodepth=4\n"
    )
    plan = tmp_path / "roles.toml"
    plan.write_text(text)
    return plan


def test_custom_role_from_a_plan(tmp_path: Path) -> None:
    from iomatrix.plan.load import load_plan
    from iomatrix.sweep.expansion import resolve_workloads

    plan, base = load_plan(str(_plan_dir(tmp_path, CUSTOM_PLAN)))
    assert plan.workloads == [
        "rand-read-4k",
        "database:data",
        "database:log",
        "file:jobs/pg-data.fio",
    ]
    # The job file goes through the allowlist like any file: workload (canonical text, relative to
    # the plan).
    resolved = {w.name: w for w in resolve_workloads(plan, base)}
    assert "rwmixread=70" in (resolved["file:jobs/pg-data.fio"].custom_text or "")
    # The dumped plan (what a sweep stores and a resume re-reads) reads back the same: the jobs are
    # not doubled.
    from iomatrix.plan.model import Plan

    again = Plan.model_validate(plan.model_dump(mode="json"))
    assert again.workloads == plan.workloads and again.fingerprint() == plan.fingerprint()
    assert [r.name for r in roles.plan_roles(again.roles, again.role)] == ["database", "my-db"]


def test_a_plan_without_roles_dumps_as_before() -> None:
    from iomatrix.plan.load import load_plan

    plan, _ = load_plan("quick-micro")  # quick's matrix with micro-workloads, no role
    dumped = plan.model_dump(mode="json")
    assert "roles" not in dumped and "role" not in dumped


def test_roles_only_plan_runs_only_the_roles(tmp_path: Path) -> None:
    from iomatrix.plan.load import load_plan

    plan, _ = load_plan(str(_plan_dir(tmp_path, 'tier = ["blocklayer"]\nroles = ["backup"]\n')))
    assert plan.workloads == ["backup:write", "backup:read"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('roles = ["databse"]\n', "roles.toml: unknown role 'databse' — did you mean 'database'?"),
        (
            'roles = ["my-db"]\n[role.my-db]\njobs = { data = "jobs/pg-data.fio" '
            '}\ndecides = ["data:read.clat_p99"]\n',
            "roles.toml: role.my-db.decides[1]: unknown metric 'read.clat_p99' — did you "
            "mean 'read.clat_p99_us'",
        ),
        (
            '[role.my-db]\njobs = { data = "jobs/pg-data.fio" }\ndecides = '
            '["data:read.iops"]\nmargin = "5%"\n',
            "roles.toml: role.my-db.margin: 5%: margin must be a fraction between 0 and "
            "0.5, e.g. 0.05",
        ),
        ('rolse = ["database"]\n', "unknown key 'rolse'"),
    ],
)
def test_bad_role_table_gets_one_line(tmp_path: Path, text: str, says: str) -> None:
    from tests.conftest import run_cli

    plan = _plan_dir(tmp_path, 'tier = ["blocklayer"]\n' + text)
    out = run_cli("plan", str(plan), cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_plan_shows_roles_and_their_jobs(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    out = run_cli(
        "plan", str(_plan_dir(tmp_path, CUSTOM_PLAN)), "--role", "vdi", cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "role database: jobs database:data, database:log; decided by commits per second" in text
    assert "role my-db: jobs data = file:jobs/pg-data.fio;" in text and "margin 10%" in text
    assert "role vdi: jobs vdi:read, vdi:write" in text
    bad = run_cli("plan", "quick", "--role", "fileserver", cwd=tmp_path, timeout=120)
    assert (
        bad.returncode == 2
        and "--role: unknown role 'fileserver' — did you mean 'file-server'?" in bad.stderr
    )


def test_poisson_paced_load_reached_within_its_own_noise() -> None:
    """A Poisson-paced run is offered λT ± √(λT) I/Os: 77% of 130 IOPS over 1 s is within 3 sd
    (reached), 69% is not; a deterministic pace keeps the plain 95% rule."""
    from iomatrix.metrics import offered_load_metrics

    def reached(iops: float, poisson: bool) -> float:
        return offered_load_metrics({"total.iops": iops, "job.runtime_s": 1.0}, 130, poisson)[
            "load.reached"
        ]

    assert (reached(100, True), reached(90, True), reached(100, False), reached(124, False)) == (
        1,
        0,
        0,
        1,
    )
    assert resolve("vdi:read").rate_poisson and resolve("vdi:read").rate_iops == 130
    assert not resolve("rand-read-4k-rate2000").rate_poisson


def test_quick_runs_its_default_roles_and_estimates_them() -> None:
    """`quick` answers per role by default (docs/roles.md): its units are the database and
    file-server jobs in quick-micro's cells but the null-co ceiling (its minimum runs go to the
    roles' deciding pairs), and `iomatrix plan` estimates them as it does those."""
    from iomatrix.matrix import estimate_seconds
    from iomatrix.plan.load import load_plan
    from iomatrix.runner import plan_expansion

    quick, base = load_plan("quick")
    assert quick.roles == ["database", "file-server"]
    exp = plan_expansion(quick, base, set())
    assert {u.workload.name for u in exp.units} == {
        "database:data",
        "database:log",
        "file-server:files",
    }
    micro, micro_base = load_plan("quick-micro")
    micro_exp = plan_expansion(micro, micro_base, set())
    assert {u.workload.name for u in micro_exp.units} == {
        "rand-read-4k",
        "rand-write-4k",
        "seq-write-1m",
    }
    assert not quick.null_ceiling and micro.null_ceiling
    assert {u.cell for u in exp.units} == {u.cell for u in micro_exp.units} - {
        u.cell for u in micro_exp.units if u.cell.is_null_ceiling
    }
    assert len(exp.units) == 18 and len(micro_exp.units) == 21
    low, high = estimate_seconds(quick, exp)
    # three jobs a cell as in quick-micro, one cell fewer: a shorter minimum
    assert 0 < low < estimate_seconds(micro, micro_exp)[0]
    assert high == quick.time_budget_s  # the 4.5-minute budget bounds the rest
