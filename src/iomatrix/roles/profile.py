"""What a role is (its jobs, deciding figures and margin), a plan's own ``[role.NAME]`` table
parsed into one, and the built-in roles read from the TOML files of this package (the package's
docstring, :mod:`iomatrix.roles`, tells the whole story)."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from iomatrix.domain import did_you_mean
from iomatrix.domain.workload import Workload
from iomatrix.fio.allowlist import validate_job_text
from iomatrix.metrics import REGISTRY, metric_info

__all__ = [
    "CUSTOM_KEYS",
    "DEFAULT_MARGIN",
    "FIGURE_KEYS",
    "JOB_SEPARATOR",
    "MARGIN_RULE",
    "MAX_MARGIN",
    "BuiltinJob",
    "Figure",
    "Role",
    "builtin",
    "builtin_jobs",
    "builtin_names",
    "check_margin",
    "custom_role",
    "offered_iops",
    "role_workload",
    "role_workload_names",
]

DEFAULT_MARGIN = 0.05
# a margin of 50% calls nearly anything "equivalent": beyond it no answer means anything
MAX_MARGIN = 0.5
# Where a role job is named: "database:data" (ROLE:JOB).
JOB_SEPARATOR = ":"
CUSTOM_KEYS = ("jobs", "decides", "margin", "description", "answer_for")


@dataclass(frozen=True)
class Figure:
    """One deciding figure of a role: a metric of one of its jobs, and what it means in words."""

    job: str
    metric: str
    says: str
    # Its share when a trade-off is weighed (report/roles.py, stats/weighed.py): relative to the
    # role's other figures, normalised to sum 1; 1 each unless the role says otherwise.
    weight: float = 1.0

    @property
    def key(self) -> str:
        return f"{self.job}{JOB_SEPARATOR}{self.metric}"

    @property
    def higher_is_better(self) -> bool:
        return metric_info(self.metric).higher_is_better


@dataclass(frozen=True)
class Role:
    name: str
    description: str
    follows: str  # the published profile it follows (built in), "" for a user's role
    margin: float  # practical equivalence: within this fraction of the best counts as as good
    # the first decides; the others veto a choice worse than the margin on them
    figures: tuple[Figure, ...]
    jobs: tuple[tuple[str, str], ...]  # (job name, the workload that runs it)
    builtin: bool = True
    answer_for: str = ""  # "a database VM": the answer reads "For a database VM: use …"

    def workload_names(self) -> list[str]:
        return [w for _, w in self.jobs]

    def workload_of(self, job: str) -> str:
        return dict(self.jobs)[job]


FIGURE_KEYS = ("figure", "says", "weight")


def _weight(where: str, raw: object) -> float:
    """A figure's weight: a number above 0 (relative to the role's other figures)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw < float("inf"):
        raise ValueError(
            f"{where}.weight: {str(raw)[:40]}: must be a number above 0, relative to the role's "
            "other figures, e.g. 2 for the figure that counts twice"
        )
    return float(raw)


def _figure(where: str, raw: object, jobs: Sequence[str]) -> Figure:
    """A `decides` entry: "JOB:METRIC" or { figure = "JOB:METRIC", says = "…", weight = 2 }."""
    says, weight = "", 1.0
    if isinstance(raw, Mapping):
        unknown = set(raw) - set(FIGURE_KEYS)
        if unknown:
            raise ValueError(
                f"{where}: unknown key '{str(sorted(unknown)[0])[:40]}'; an entry of decides is "
                '"JOB:METRIC" or { figure = "JOB:METRIC", says = "what it means", weight = 1 }'
            )
        says = str(raw.get("says", ""))
        if "weight" in raw:
            weight = _weight(where, raw["weight"])
        raw = raw.get("figure")
    if not isinstance(raw, str) or JOB_SEPARATOR not in raw:
        raise ValueError(
            f'{where}: {str(raw)[:40]!r} is not a figure; write "JOB:METRIC", e.g. '
            f'"{jobs[0] if jobs else "data"}:read.clat_p99_us"'
        )
    job, metric = raw.split(JOB_SEPARATOR, 1)
    if job not in jobs:
        raise ValueError(
            f"{where}: no job '{job[:40]}' in this role (its jobs: {', '.join(jobs)})"
            f"{did_you_mean(job, jobs)}"
        )
    if metric not in REGISTRY or "*" in metric:
        raise ValueError(
            f"{where}: unknown metric '{metric[:40]}'{did_you_mean(metric, REGISTRY)} "
            "(fio's figures "
            "are e.g. read.clat_p99_us, write.iops, total.bw_mbps: docs/metrics.md)"
        )
    return Figure(job, metric, says or metric_info(metric).description, weight)


def _figures(where: str, raw: object, jobs: Sequence[str]) -> tuple[Figure, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(
            f"{where}.decides: must be a non-empty list of figures, the deciding one first, e.g. "
            f'["{jobs[0] if jobs else "data"}:read.clat_p99_us"]'
        )
    figures = tuple(_figure(f"{where}.decides[{i + 1}]", r, jobs) for i, r in enumerate(raw))
    if len({f.key for f in figures}) != len(figures):
        raise ValueError(f"{where}.decides: a figure is named twice; name each once")
    return figures


MARGIN_RULE = f"margin must be a fraction between 0 and {MAX_MARGIN:g}, e.g. 0.05"


def check_margin(raw: object, where: str = "margin") -> float:
    """A margin of practical equivalence (a role's, the plan key `margin`, run/recommend --margin)
    as a fraction above 0 and at most MAX_MARGIN; ValueError naming `where` and the rule otherwise
    (2 is refused: it would be 200%, and read as 2% it would be a guess)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw <= MAX_MARGIN:
        raise ValueError(f"{where}: {str(raw)[:40]}: {MARGIN_RULE}")
    return float(raw)


def _margin(where: str, raw: object, default: float = DEFAULT_MARGIN) -> float:
    return default if raw is None else check_margin(raw, f"{where}.margin")


def _job_names(where: str, raw: object) -> list[str]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(
            f'{where}.jobs: must be a table of jobs, e.g. jobs = {{ data = "jobs/oltp.fio" }}'
        )
    for name in raw:
        if not str(name).replace("-", "").replace("_", "").isalnum() or len(str(name)) > 32:
            raise ValueError(
                f"{where}.jobs: job name {str(name)[:40]!r}: use letters, digits, '-' and '_' "
                "(at most 32)"
            )
    return [str(n) for n in raw]


def custom_role(name: str, raw: object, default_margin: float = DEFAULT_MARGIN) -> Role:
    """A plan's ``[role.NAME]`` table: jobs (fio job files, run as ``file:PATH`` workloads through
    the allowlist), decides (the deciding figure first) and margin (``default_margin`` when the
    table gives none). ValueError, one line naming the fix, else."""
    where = f"role.{name}"
    if name in builtin_names():
        raise ValueError(
            f"{where}: '{name}' is a built-in role; give yours another name, e.g. my-{name}"
        )
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a table with jobs, decides and margin (docs/roles.md)")
    unknown = [k for k in raw if k not in CUSTOM_KEYS]
    if unknown:
        raise ValueError(
            f"{where}: unknown key '{str(unknown[0])[:40]}'"
            f"{did_you_mean(unknown[0], CUSTOM_KEYS)}; "
            f"a role table holds {', '.join(CUSTOM_KEYS)}"
        )
    jobs = _job_names(where, raw.get("jobs"))
    paths = raw["jobs"]
    for job in jobs:
        path = paths[job]
        if not isinstance(path, str) or not path.strip() or path.startswith("file:"):
            raise ValueError(
                f'{where}.jobs.{job}: must be the path of an fio job file, e.g. "jobs/{job}.fio"'
            )
    figures = _figures(where, raw.get("decides"), jobs)
    description = str(raw.get("description", "")) or f"your role {name}"
    return Role(
        name,
        description,
        "",
        _margin(where, raw.get("margin"), default_margin),
        figures,
        tuple((j, f"file:{paths[j]}") for j in jobs),
        builtin=False,
        answer_for=str(raw.get("answer_for", "")) or f"your role {name}",
    )


@dataclass(frozen=True)
class BuiltinJob:
    """A built-in role's job: its fio options, and the workload that runs them."""

    role: str
    job: str
    description: str
    options: tuple[tuple[str, str], ...]

    @property
    def workload_name(self) -> str:
        return f"{self.role}{JOB_SEPARATOR}{self.job}"

    def fio_text(self) -> str:
        """The job section: time-based at the cell's runtime (fio.jobs bounds it), after the prefill
        when it reads (stonewall), with the role's options in the order written."""
        lines = [
            f"[{self.role}-{self.job}]",
            "stonewall",
            "time_based=1",
            *(f"{k}={v}" for k, v in self.options),
        ]
        return "\n".join(lines) + "\n"


def _builtin_jobs(name: str, raw: object) -> list[BuiltinJob]:
    where = f"built-in role {name}"
    _job_names(where, raw)
    assert isinstance(raw, Mapping)
    out = []
    for job, table in raw.items():
        options = {k: v for k, v in table.items() if k != "description"}
        out.append(
            BuiltinJob(
                name,
                job,
                str(table.get("description", "")),
                tuple((k, str(v)) for k, v in options.items()),
            )
        )
    return out


@functools.cache
def _builtin() -> dict[str, tuple[Role, tuple[BuiltinJob, ...]]]:
    found = {}
    for entry in sorted(resources.files("iomatrix.roles").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".toml"):
            continue
        name = entry.name.removesuffix(".toml")
        data = tomllib.loads(entry.read_text())
        jobs = _builtin_jobs(name, data.get("jobs"))
        figures = _figures(f"built-in role {name}", data.get("decides"), [j.job for j in jobs])
        role = Role(
            name,
            data["description"],
            data["follows"],
            _margin(f"built-in role {name}", data.get("margin")),
            figures,
            tuple((j.job, j.workload_name) for j in jobs),
            answer_for=data["answer_for"],
        )
        found[name] = (role, tuple(jobs))
    return found


def builtin_names() -> list[str]:
    return list(_builtin())


def builtin(name: str) -> Role | None:
    found = _builtin().get(name)
    return None if found is None else found[0]


def builtin_jobs(name: str) -> tuple[BuiltinJob, ...]:
    return _builtin()[name][1]


def _primary(role: Role, job: str) -> Figure | None:
    return next((f for f in role.figures if f.job == job), None)


def offered_iops(rate_iops: str | None, reads: bool, writes: bool) -> int | None:
    """The IOPS a job offers in all (Workload.rate_iops: each run says whether it reached them),
    from fio's `rate_iops`: one number, or "READ,WRITE" for the directions the job does. "750,750"
    for a job reading and writing: 1500."""
    if rate_iops is None:
        return None
    parts = [int(p) for p in rate_iops.split(",")]
    if len(parts) == 1:
        return parts[0]
    return (parts[0] if reads else 0) + (parts[1] if writes else 0)


def role_workload(name: str) -> Workload | None:
    """The workload of a built-in role's job by its name ("database:data"), None for any other name.

    It is a custom job (kind "custom": fio is given the allowlist's canonical text of its section)
    whose primary metric is the role's first figure on that job; a job that reads has its region
    written first (prefill)."""
    role_name, sep, job_name = name.partition(JOB_SEPARATOR)
    found = _builtin().get(role_name) if sep else None
    if found is None:
        return None
    role, jobs = found
    job = next((j for j in jobs if j.job == job_name), None)
    if job is None:
        return None
    checked = validate_job_text(job.fio_text(), f"built-in role {role_name}, job {job_name}")
    rw = dict(job.options).get("rw", "read")
    figure = _primary(role, job_name)
    metric = figure.metric if figure is not None else "total.iops"
    return Workload(
        name=name,
        description=f"{role_name} role, {job.description}",
        kind="custom",
        rw=rw,
        custom_text=checked.text,
        primary_metric=metric,
        rate_iops=offered_iops(dict(job.options).get("rate_iops"), checked.reads, checked.writes),
        rate_poisson=dict(job.options).get("rate_process") == "poisson",
        higher_is_better=metric_info(metric).higher_is_better,
        prefill=checked.reads,
    )


def role_workload_names() -> list[str]:
    """Every built-in role job's workload name, role by role."""
    return [w for role, _ in _builtin().values() for w in role.workload_names()]
