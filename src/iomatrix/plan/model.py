"""Plan model, validated with pydantic.

A plan lists the values of each matrix axis; the matrix module expands it into
cells and prunes the combinations that cannot run, with the reason.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from iomatrix.backing.network import plugin_spec_class
from iomatrix.backing.spec import (
    BACKING_TYPES,
    BUILT_IN_SPECS,
    BackingSpec,
    DirBacking,
    parse_size,
)
from iomatrix.domain import axes, did_you_mean
from iomatrix.errors import UserError
from iomatrix.plan import sections
from iomatrix.plan.current_cell import CurrentDisk, from_config
from iomatrix.roles import check_margin, plan_roles
from iomatrix.tiers import declaration, known_tier, reference_tier, tier_classes, tier_names
from iomatrix.vmconfig.reading import CurrentConfig

NAME_MAX = 100
# Plan names appear in file names, tables and the database: letters, digits and . _ - (no spaces, no
# slashes), starting with a letter or digit.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_SIZE_BYTES = 2**50  # 1 PiB: larger than any device or file a sweep could touch
MAX_DURATION_S = 30 * 24 * 3600.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$", re.I)


def parse_duration(value: str | float | int) -> float:
    """'10m' → seconds."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(value) if len(value) <= 40 else None
        if not m:
            raise ValueError(f"'{value[:40]}' is not a duration; write e.g. 90s, 10m or 2h")
        seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[(m.group(2) or "s").lower()]
    if not 0 < seconds <= MAX_DURATION_S:
        raise ValueError(
            f"duration {value!s:.40} is out of range; use more than 0 and at most 30 days"
        )
    return seconds


# Strict: a TOML plan has real types, so "5" for 5 or 'no' for false is a mistake to report, not to
# coerce (ints are still accepted where a number of seconds is expected).
_STRICT = ConfigDict(extra="forbid", strict=True)


MAX_REPETITIONS_PER_BOOT = 8  # in-boot repetitions, fixed or chosen by "auto"


class Repetitions(BaseModel):
    model_config = _STRICT
    min: Annotated[int, Field(ge=1, le=1000)] = 3
    max: Annotated[int, Field(ge=1, le=1000)] = 10
    # Per tier, e.g. { blocklayer = 20 }: once the repetition policy (or max) is done with a unit of
    # that tier, it keeps running, after the race and within the budget, until its 95% CI is within
    # ci_target or it has this many runs. For cheap tiers, so that every number quoted (losers and
    # baselines too) is precise.
    precision_max: dict[str, Annotated[int, Field(ge=1, le=1000)]] = {}
    # Which decided units run on for precision: "all", or "contenders" (not eliminated, no baseline)
    # and the cells a contender is quoted against (QEMU's default): the figures the first answer
    # quotes (scheduler.py).
    precision_for: Literal["all", "contenders"] = "all"

    @model_validator(mode="after")
    def _ordered(self) -> Repetitions:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be ≥ min ({self.min})")
        for tier, n in self.precision_max.items():
            if n <= self.max:
                raise ValueError(
                    f"precision_max for {tier} ({n}) must be more than max ({self.max}): it is the "
                    "number of runs a unit may reach after the policy is done with it"
                )
        return self


def _reference_tier_name() -> str:
    return reference_tier().name


def _with_tier_workloads(data: dict[str, Any]) -> dict[str, Any]:
    """A plan that names no workloads runs its tiers' own, when they have some
    (Tier.default_workloads: a consolidation plan's tile counts, the durability tier's workload); an
    explicit list is kept as written."""
    tiers = data.get("tier")
    if "workloads" in data or not isinstance(tiers, list):
        return data
    found: list[str] = []
    for name in tiers:
        tier = known_tier(name) if isinstance(name, str) else None
        if tier is not None:
            found += [w for w in tier.default_workloads(data) if w not in found]
    return {**data, "workloads": found} if found else data


def _with_table_settings(data: dict[str, Any]) -> dict[str, Any]:
    """A tier's own settings written in its table (TierDeclaration.table_settings: `[guest] image =
    "PATH"`) as the top-level plan settings they are (`guest_image`); a table left empty by that is
    no tier table."""
    out = dict(data)
    for tier in tier_classes():
        table = out.get(tier.name)
        if not tier.table_settings or not isinstance(table, dict):
            continue
        for key, setting in tier.table_settings.items():
            if key not in table:
                continue
            if setting in out:
                raise ValueError(
                    f"{tier.name}.{key} and {setting} name the same setting; keep one of them"
                )
            table = {k: v for k, v in table.items() if k != key}
            out[setting] = data[tier.name][key]
        if table:
            out[tier.name] = table
        else:
            del out[tier.name]
    return out


def _with_role_workloads(data: dict[str, Any]) -> dict[str, Any]:
    """A plan's roles (`roles = [...]`, `[role.NAME]` tables: iomatrix.roles) add their jobs to its
    workloads; a plan that names roles and no workloads runs only theirs. Every role table runs,
    named in `roles` or not."""
    names, custom = data.get("roles", []), data.get("role", {})
    if not names and not custom:
        return data
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            'roles: must be a list of role names, e.g. roles = ["database", "file-server"]'
        )
    if not isinstance(custom, dict):
        raise ValueError(
            "role: must be tables of your own roles, e.g. [role.my-db] with jobs, "
            "decides and margin"
        )
    jobs = [w for r in plan_roles(names, custom) for w in r.workload_names()]
    base = list(data["workloads"]) if isinstance(data.get("workloads"), list) else []
    return {**data, "workloads": base + [j for j in dict.fromkeys(jobs) if j not in base]}


def _nonempty_unique(values: list, axis: str) -> list:
    if not values:
        raise ValueError(f"axis '{axis}' needs at least one value")
    seen: list = []
    for v in values:
        if v in seen:
            raise ValueError(f"axis '{axis}' lists '{v}' twice")
        seen.append(v)
    return values


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _axis_list(axis: axes.Axis, raw: object) -> list[str]:
    """A plan's list of values of a registry axis, validated against the registry (messages in the
    form the plan loader prints for other keys: 'cache.1: 'nocache' is not valid; valid values:
    …')."""
    if not isinstance(raw, list):
        raise ValueError(f'{axis.name}: must be a list, e.g. ["a", "b"] (got {_short(raw)})')
    # a count: TOML integers (clients = [1, 2, 4]) are its values as text
    if axis.name == "clients":
        raw = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in raw]
    for i, v in enumerate(raw):
        if v not in axis.values:
            if axis.check_value is not None and isinstance(v, str):
                # a free-form value (rtt = "0.5ms"): its own one-line reason
                if why := axis.check_value(v):
                    raise ValueError(f"{axis.name}.{i}: {why}")
                continue
            valid = ", ".join(f"'{x}'" for x in axis.values)
            raise ValueError(
                f"{axis.name}.{i}: {_short(v)} is not valid; valid values: {valid}"
                f"{did_you_mean(v, axis.values)}"
            )
    try:
        return _nonempty_unique(list(raw), axis.name)
    except ValueError as err:
        raise ValueError(f"{axis.name}: {err}") from None


# The key of a tier table that names the tier's own workloads (beside its axes).
TIER_WORKLOADS = "workloads"


def _axis_table(where: str, raw: Mapping[Any, Any], keys: Collection[str]) -> dict[str, list[str]]:
    """The registry axes of a table as written, validated and in registry order (`where` prefixes
    messages)."""
    table: dict[str, list[str]] = {}
    for name, axis in ((a.name, a) for a in axes.plan_axes()):
        if name in raw and name in keys:
            try:
                table[name] = _axis_list(axis, raw[name])
            except ValueError as err:
                raise ValueError(f"{where}.{err}") from None
    return table


def _tier_table(
    tier: str, raw: object
) -> tuple[dict[str, list[str]], dict[str, dict[str, list[str]]]]:
    """A tier table as written (``[blocklayer]`` with ``detect_zeroes = ["off", "on"]``): the axis
    values and workloads that tier sweeps instead of the plan-wide lists, validated against the
    registry and put in registry order (workloads last), so two plans that say the same thing dump
    the same; and its workload tables (``[blocklayer.seq-write-zeroes-1m]``): per workload, the axis
    values that workload runs with in that tier instead of the tier's. Whether the tier runs in the
    plan, acts on each axis and runs each workload is checked once the plan's tiers are known
    (Plan._tier_tables_fit)."""
    if not isinstance(raw, dict):
        raise ValueError(
            f"{tier}: must be a table of the {tier} tier's own axis values, e.g. [{tier}] with "
            f'cache = ["none"] (got {_short(raw)})'
        )
    known = {a.name for a in axes.plan_axes()}
    for key, value in raw.items():
        if key not in known and key != TIER_WORKLOADS and not isinstance(value, dict):
            close = difflib.get_close_matches(str(key), [*known, TIER_WORKLOADS], n=1, cutoff=0.6)
            hint = (
                f" — did you mean '{close[0]}'?"
                if close
                else f" (a [{tier}] table holds axes, workloads, and tables named by a workload)"
            )
            raise ValueError(f"{tier}: unknown key '{str(key)[:60]}'{hint}")
    if not raw:
        raise ValueError(
            f"{tier}: the [{tier}] table is empty; name the axes the {tier} tier sweeps "
            "on its own, "
            "or remove it"
        )
    table = _axis_table(tier, raw, known)
    if TIER_WORKLOADS in raw:
        table[TIER_WORKLOADS] = _tier_workloads(tier, raw[TIER_WORKLOADS])
    return table, _workload_tables(tier, raw, known)


def _tier_workloads(tier: str, names: object) -> list[str]:
    """A tier table's ``workloads = [...]``: a non-empty list of distinct names."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f'{tier}.workloads: must be a list of workload names, e.g. ["rand-read-4k"] '
            f"(got {_short(names)})"
        )
    try:
        return _nonempty_unique(list(names), "workloads")
    except ValueError as err:
        raise ValueError(f"{tier}.workloads: {err}") from None


def _workload_tables(tier: str, raw: dict, known: set[str]) -> dict[str, dict[str, list[str]]]:
    """A tier table's workload tables (``[blocklayer.seq-write-zeroes-1m]``), each validated against
    the registry: per workload, the axis values it runs with in that tier."""
    per_workload: dict[str, dict[str, list[str]]] = {}
    for workload, sub in raw.items():
        if not isinstance(sub, dict) or workload in known:
            continue
        where = f"{tier}.{str(workload)[:60]}"
        for key in sub:
            if key not in known:
                close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
                hint = (
                    f" — did you mean '{close[0]}'?"
                    if close
                    else f" (a [{where}] table holds the axis values workload {workload} runs "
                    f"with in the {tier} "
                    "tier)"
                )
                raise ValueError(f"{where}: unknown key '{str(key)[:60]}'{hint}")
        if not sub:
            raise ValueError(
                f"{where}: the [{where}] table is empty; name the axes workload {workload} sweeps "
                f"in the {tier} tier, or remove it"
            )
        per_workload[workload] = _axis_table(where, sub, known)
    return per_workload


def _without_unset(out: dict[str, Any]) -> dict[str, Any]:
    """A plan's dump without the keys later releases added, where unset (`current`, `margin`) or
    empty (`roles`, `role`): a plan that does not use them dumps, and fingerprints, as it did before
    they existed."""
    for key in ("current", "margin"):
        if out.get(key, ...) is None:
            del out[key]
    for key in ("roles", "role"):
        if not out.get(key, True):
            del out[key]
    return out


class Plan(BaseModel):
    """What a sweep runs. Every axis is a list of values; the matrix is their product."""

    model_config = _STRICT

    name: str
    description: str = ""
    # Tier names come from the tier registry (iomatrix.tiers): a new tier needs no change here.
    # Default: the reference tier (bare metal).
    tier: list[str] = Field(default_factory=lambda: [_reference_tier_name()])
    # The values of every other axis of the registry (iomatrix.domain.axes): written in the plan as
    # top-level keys (cache = ["none"]), gathered here by `_gather_axes`, and written back as
    # top-level keys when the plan is dumped (so a new axis changes no stored plan and no
    # fingerprint of a plan that does not name it).
    axis_settings: dict[str, list[str]] = Field(default_factory=dict, exclude=True)
    # Tier tables: per tier, the axis values (and workloads) it sweeps instead of the plan-wide
    # ones. Written in the plan as a table named by the tier ([blocklayer] with detect_zeroes =
    # ["off", "on"]): that tier sweeps them, the others keep the plan-wide list (the axis's default
    # where the plan names none), so an axis one tier measures best does not multiply the others'
    # cells. Gathered by `_gather_axes`, dumped back as those tables (a plan without one dumps and
    # fingerprints as it did before tier tables existed).
    tier_tables: dict[str, dict[str, list[str]]] = Field(default_factory=dict, exclude=True)
    # Workload tables, per tier: the axis values one workload runs with in that tier instead of the
    # tier's ([blocklayer.seq-write-zeroes-1m] with detect_zeroes = ["off", "on"]): a question one
    # workload answers does not multiply the cells of the tier's other workloads. Dumped inside
    # their tier table.
    workload_tables: dict[str, dict[str, dict[str, list[str]]]] = Field(
        default_factory=dict, exclude=True
    )
    backing: list[BackingSpec] = Field(default_factory=lambda: [DirBacking(type="dir")])
    workloads: list[str] = ["rand-read-4k", "rand-write-4k"]
    # Roles (iomatrix.roles, docs/roles.md): built-in role names, and the plan's own role tables
    # ([role.NAME]: jobs, decides, margin). Their jobs are added to `workloads` when the plan is
    # read (_with_role_workloads); left out of the dump when empty, so a plan without roles dumps
    # and fingerprints as it did before.
    roles: list[str] = Field(default_factory=list)
    role: dict[str, dict[str, Any]] = Field(default_factory=dict)
    repetitions: Repetitions = Repetitions()
    # CI half-width target, as a fraction of the mean (0.05 = ±5%): the ci-width policy stops there.
    ci_target: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.05
    # How repetitions beyond `min` are spent: "racing" stops repeating cells that are significantly
    # worse than the best by more than `threshold` (and baselines at their minimum); "ci-width"
    # repeats every cell until its CI reaches ci_target.
    repetition_policy: Literal["racing", "ci-width"] = "racing"
    # Practical threshold: cells within this fraction of the best are tied with it (for the
    # workloads no role runs: a role's job is tied at its role's margin, docs/roles.md).
    threshold: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.05
    # Margin of practical equivalence (docs/roles.md): a cell shown within it of the best (TOST) is
    # equivalent, and the answer then keeps what you run (else the default). Unset: each role's own
    # (5% for the built-in roles), 5% for the other workloads. Set (or `run --margin`): every
    # workload's and every built-in role's; a role table's own `margin` stays that role's. Left out
    # of the dump when unset (the fingerprint stays as it was).
    margin: float | None = None
    # A run the host samples show was disturbed by other processes (CPU pressure, steal) is run once
    # more at the end of its round, within the budget; false on a host that is always shared, where
    # it only costs time.
    retry_disturbed: bool = True
    # Wall-clock budget of the sweep (e.g. "10m"), its set-up included: no repetition beyond `min`
    # starts that would end after it (at its unit's pace so far). Minimum repetitions always
    # complete.
    time_budget: str = "30m"
    # Data region each run touches, and how long each measured job runs.
    size: str = "256M"
    # fio counts runtime in milliseconds: below 0.1 s it would round to 0, which fio reads as "no
    # limit".
    runtime: Annotated[float, Field(ge=0.1, le=3600, allow_inf_nan=False)] = 5.0
    ramp: Annotated[float, Field(ge=0, le=600, allow_inf_nan=False)] = 0.0
    # Disk image size for the tiers that create one per run (guest, blocklayer); ≥ size.
    image_size: str = "1G"
    # Guest and blocklayer tiers: add null-co cells, the ceiling of the virtual I/O path.
    null_ceiling: bool = True
    guest_fs: Literal["ext4", "xfs"] = "ext4"
    guest_memory_mb: Annotated[int, Field(ge=128, le=16384)] = 512
    # In-boot repetition: how many rounds one guest boot serves (each run still on its own fresh
    # image). 1 = one run of each workload of a cell per boot; more amortises the boot over more
    # runs. "auto": start with 2 and let the measured between-/within-boot variances and boot/run
    # costs choose (stats/two_level.py).
    repetitions_per_boot: int | str = 1
    # Skip sync + drop_caches before each run (measure warm caches on purpose).
    keep_caches_warm: bool = False
    # Seconds a single run may take before it is killed and recorded as failed.
    run_timeout: Annotated[float, Field(ge=1, le=7 * 24 * 3600, allow_inf_nan=False)] = 300.0
    # The user's current disk configuration (`run --current vm.xml`, plan/current_cell.py): measured
    # as a cell of its own in every tier. Left out of the dump when absent, so a plan without it
    # dumps as it always did.
    current: CurrentDisk | None = None
    # The tiers' own settings (Tier.plan_settings: the durability tier's cuts, the consolidation
    # tier's [consolidation] table), validated by _tier_settings and dumped at the top level by
    # _dump_tier_settings.
    _settings: Any = None

    @model_validator(mode="wrap")
    @classmethod
    def _tier_settings(cls, data: object, handler: ModelWrapValidatorHandler[Plan]) -> Plan:
        if not isinstance(data, dict):
            return handler(data)
        own, settings = sections.split(
            _with_role_workloads(_with_tier_workloads(_with_table_settings(data)))
        )
        errors = []
        values = None
        try:
            values = sections.settings_model().model_validate(settings)
        except ValidationError as err:
            errors = sections.error_details(err)
        try:
            plan = handler(own)
        except ValidationError as err:
            errors = sections.error_details(err) + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        plan._settings = values
        for tier in tier_classes():
            tier.check_plan(plan)
        return plan

    @model_validator(mode="before")
    @classmethod
    def _gather_axes(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        for internal in ("axis_settings", "tier_tables", "workload_tables"):
            if internal in data:
                raise ValueError(f"unknown key '{internal}'")
        # Every axis, its plan default where the plan does not name it: two plans that sweep the
        # same values are equal whether a value was written or defaulted (a resumed sweep re-reads
        # its stored, complete plan).
        settings = {
            a.name: _axis_list(a, data[a.name])
            if a.name in data
            else [str(v) for v in a.plan_default]
            for a in axes.plan_axes()
        }
        parsed = {k: _tier_table(k, v) for k, v in data.items() if k in tier_names()}
        rest = {k: v for k, v in data.items() if k not in settings and k not in parsed}
        return {
            **rest,
            "axis_settings": settings,
            "tier_tables": {k: t for k, (t, _) in parsed.items()},
            "workload_tables": {k: w for k, (_, w) in parsed.items() if w},
        }

    @model_serializer(mode="wrap")
    def _dump(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """The plan as written: its own fields, every registry axis and every tier setting at the
        top level."""
        out = _without_unset(handler(self))
        if info.exclude_defaults and self.backing == [DirBacking(type="dir")]:
            # the backing serializer (plug-in specs) keeps pydantic from leaving the default out:
            # a plan on the default backing fingerprints as it did before (resume across releases)
            out.pop("backing", None)
        tier_settings = self._tier_settings_model().model_dump(
            mode=info.mode,
            by_alias=bool(info.by_alias),
            exclude_unset=info.exclude_unset,
            exclude_defaults=info.exclude_defaults,
            exclude_none=info.exclude_none,
            round_trip=info.round_trip,
        )
        for setting in {s for t in tier_classes() for s in t.table_settings.values()}:
            # A table setting (`[guest] image`) left out of the dump when unset, as `current`: a
            # plan without it dumps and fingerprints as it did before it existed.
            if tier_settings.get(setting, ...) is None:
                del tier_settings[setting]
        for a in axes.plan_axes():
            values = self.axis_values(a.name)
            # A later axis at its default is left out even of a full dump: the stored plan (and the
            # fingerprint of every setting that earlier releases used) stays what it was before the
            # axis existed.
            if (info.exclude_defaults or not a.always_named) and values == list(a.plan_default):
                continue
            if info.include is not None and a.name not in info.include:
                continue
            out[a.name] = values
        for tier, table in self.tier_tables.items():
            if info.include is None or tier in info.include:
                out[tier] = {k: list(v) for k, v in table.items()}
                for workload, values in self.workload_tables.get(tier, {}).items():
                    out[tier][workload] = {k: list(v) for k, v in values.items()}
        out.update(tier_settings)
        return out

    def axis_values(
        self, axis: str, tier: str | None = None, workload: str | None = None
    ) -> list[str]:
        """The values the plan sweeps of `axis` (its plan default when the plan does not name it);
        with `tier`, the values that tier sweeps (its tier table's, where it has one for the axis);
        with `workload` too, the values that workload runs with in that tier (its workload table's,
        where it has one for the axis)."""
        if (
            tier is not None
            and workload is not None
            and axis in self.workload_tables.get(tier, {}).get(workload, {})
        ):
            return list(self.workload_tables[tier][workload][axis])
        if tier is not None and axis in self.tier_tables.get(tier, {}):
            return list(self.tier_tables[tier][axis])
        if axis == "tier":
            return list(self.tier)
        if axis == "backing":
            return [b.label() for b in self.backing]
        if axis in self.axis_settings:
            return list(self.axis_settings[axis])
        return [str(v) for v in axes.get(axis).plan_default]

    def tier_workloads(self) -> dict[str, list[str]]:
        """The tiers that run workloads of their own (their tier table's `workloads`), with those
        names."""
        return {
            t: list(table[TIER_WORKLOADS])
            for t, table in self.tier_tables.items()
            if TIER_WORKLOADS in table
        }

    def workloads_of(self, tier: str) -> list[str]:
        """The workloads `tier` runs: its tier table's, or the plan's."""
        return self.tier_workloads().get(tier, list(self.workloads))

    def _tier_settings_model(self) -> BaseModel:
        # a plan made without validation (model_construct): the tiers' defaults
        if self._settings is None:
            self._settings = sections.settings_model()()
        return self._settings

    def setting(self, key: str) -> Any:
        """A tier's own plan setting (Tier.plan_settings), e.g. the durability tier's `cuts`."""
        return getattr(self._tier_settings_model(), key)

    def set_setting(self, key: str, value: Any) -> None:
        """For a tier's check_plan: complete one of its settings (it counts as set, as if
        written)."""
        setattr(self._tier_settings_model(), key, value)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > NAME_MAX:
            raise ValueError(f"is {len(v)} characters long; use at most {NAME_MAX}")
        if not _NAME.match(v):
            raise ValueError(
                f"'{v[:40]}' may contain only letters, digits, '.', '_' and '-', starting with a "
                "letter or digit"
            )
        return v

    @field_validator("tier", "workloads")
    @classmethod
    def _axis_values(cls, v: list, info) -> list:  # type: ignore[no-untyped-def]
        return _nonempty_unique(v, info.field_name)

    @field_validator("tier")
    @classmethod
    def _tiers(cls, v: list[str]) -> list[str]:
        known = tier_names()
        for t in v:
            if t not in known:
                raise ValueError(
                    f"'{t}' is not valid; valid values: {', '.join(known)}{did_you_mean(t, known)}"
                )
        return v

    @field_validator("backing", mode="wrap")
    @classmethod
    def _plugin_backings(cls, v: Any, handler: Callable[[Any], Any]) -> Any:
        """A table of a protocol the built-in union does not hold (a plug-in's) is read by that
        protocol's spec; the others by the union, in their places."""
        if not isinstance(v, list) or all(plugin_spec_class(b, BACKING_TYPES) is None for b in v):
            return handler(v)
        classes = [plugin_spec_class(b, BACKING_TYPES) for b in v]
        own = {i: c.model_validate(v[i]) for i, c in enumerate(classes) if c is not None}
        rest = iter(handler([b for i, b in enumerate(v) if i not in own]))
        return [own[i] if i in own else next(rest) for i in range(len(v))]

    @field_serializer("backing", mode="wrap")
    def _dump_backings(
        self, v: list[Any], handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        # (a plug-in protocol's spec dumps itself: the union's serializer does not know it)
        if all(type(b) in BUILT_IN_SPECS for b in v):
            return handler(v)
        return [
            b.model_dump(mode=info.mode, exclude_defaults=info.exclude_defaults)
            if type(b) not in BUILT_IN_SPECS
            else handler([b])[0]
            for b in v
        ]

    @field_validator("backing")
    @classmethod
    def _backings(cls, v: list[BackingSpec]) -> list[BackingSpec]:
        if not v:
            raise ValueError("axis 'backing' needs at least one value")
        labels = [b.label() for b in v]
        dupes = {x for x in labels if labels.count(x) > 1}
        if dupes:
            raise ValueError(
                f"backings share the label {sorted(dupes)}; give each a distinct 'name'"
            )
        return v

    @field_validator("size", "image_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if len(v) > 40 or parse_size(v) > MAX_SIZE_BYTES:
            raise ValueError(f"'{v[:40]}' is larger than 1 PiB; write e.g. 256M or 4G")
        if parse_size(v) <= 0:
            raise ValueError(f"'{v}' must be larger than 0")
        return v

    @property
    def adaptive_rounds_per_boot(self) -> bool:
        return self.repetitions_per_boot == "auto"

    @property
    def start_rounds_per_boot(self) -> int:
        """The rounds one boot serves from the start ("auto" starts with 2, the least that tells the
        variation within a boot from that between boots)."""
        return 2 if self.repetitions_per_boot == "auto" else int(self.repetitions_per_boot)

    @field_validator("repetitions_per_boot", mode="before")
    @classmethod
    def _per_boot(cls, v: object) -> int | str:
        if v == "auto" or (
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_REPETITIONS_PER_BOOT
        ):
            return v  # type: ignore[return-value]
        raise ValueError(
            f"{str(v)[:40]!r} is not valid; valid values: 1 to "
            f'{MAX_REPETITIONS_PER_BOOT}, or "auto"'
        )

    @field_validator("margin", mode="before")
    @classmethod
    def _margin(cls, v: object) -> float | None:
        return None if v is None else check_margin(v, "margin")

    @field_validator("time_budget")
    @classmethod
    def _budget(cls, v: str) -> str:
        parse_duration(v)
        return v

    @model_validator(mode="after")
    def _image_holds_data(self) -> Plan:
        if any(declaration(t).uses_images for t in self.tier) and parse_size(
            self.image_size
        ) < parse_size(self.size):
            raise ValueError(f"image_size ({self.image_size}) must be ≥ size ({self.size})")
        return self

    @model_validator(mode="after")
    def _tier_tables_fit(self) -> Plan:
        for tier, table in self.tier_tables.items():
            if tier not in self.tier:
                raise ValueError(
                    f"{tier}: a [{tier}] table, but the plan does not run the {tier} "
                    "tier (its tiers: "
                    f"{', '.join(self.tier)}); add {tier} to `tier` or remove the table"
                )
            layers = declaration(tier).layers
            for name in table:
                if name == TIER_WORKLOADS or axes.get(name).applies_to(layers):
                    continue
                where = [t for t in self.tier if axes.get(name).applies_to(declaration(t).layers)]
                fix = (
                    f"move it to the [{where[0]}] table or the plan's top level"
                    if where
                    else "remove it"
                )
                raise ValueError(
                    f"{tier}.{name}: the {tier} tier does not act on {name} "
                    f"({axes.get(name).summary}),"
                    f" so it cannot sweep it; {fix}"
                )
        for tier, per_workload in self.workload_tables.items():
            runs = self.workloads_of(tier)
            layers = declaration(tier).layers
            for workload, values in per_workload.items():
                where = f"{tier}.{workload}"
                if workload not in runs:
                    raise ValueError(
                        f"{where}: a [{where}] table, but the {tier} tier does not run workload "
                        f"{workload} (its workloads: {', '.join(runs)}); add it to the "
                        "workloads or "
                        "remove the table"
                    )
                for name in values:
                    if not axes.get(name).applies_to(layers):
                        raise ValueError(
                            f"{where}.{name}: the {tier} tier does not act on {name} "
                            f"({axes.get(name).summary}), so it cannot sweep it; remove it"
                        )
        return self

    @model_validator(mode="after")
    def _precision_tiers(self) -> Plan:
        unknown = [t for t in self.repetitions.precision_max if t not in self.tier]
        if unknown:
            raise ValueError(
                f"repetitions.precision_max names tier(s) {', '.join(unknown)} that this "
                "plan does not "
                f"run (its tiers: {', '.join(self.tier)}); remove them or add them to `tier`"
            )
        return self

    @property
    def size_bytes(self) -> int:
        return parse_size(self.size)

    @property
    def image_size_bytes(self) -> int:
        return parse_size(self.image_size)

    @property
    def time_budget_s(self) -> float:
        return parse_duration(self.time_budget)

    def backing_by_label(self) -> dict[str, BackingSpec]:
        return {b.label(): b for b in self.backing}

    def canonical_json(self) -> str:
        data = self.model_dump(mode="json")
        # a later key at its default: earlier releases' JSON
        if data["repetitions"]["precision_for"] == "all":
            del data["repetitions"]["precision_for"]
        return json.dumps(data, sort_keys=True)

    def fingerprint(self) -> str:
        """Identifies 'the same plan' for resuming a sweep: the settings that differ from their
        defaults, so a release that adds a plan key (with a default) still resumes the sweeps an
        older release left unfinished. (The price: a default that changes between releases applies
        to the rest of a resumed sweep.)"""
        explicit = json.dumps(self.model_dump(mode="json", exclude_defaults=True), sort_keys=True)
        return hashlib.sha256(explicit.encode()).hexdigest()[:16]

    def legacy_fingerprints(self) -> list[str]:
        """Fingerprints earlier releases gave this plan (every setting, defaults included), so their
        unfinished sweeps of it resume too."""
        return [hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]]


def with_current(plan: Plan, cfg: CurrentConfig) -> Plan:
    """`plan` with `cfg` as its current configuration (a copy; the tiers' settings kept)."""
    return plan.model_copy(update={"current": from_config(cfg)})


def with_margin(plan: Plan, margin: float | None) -> Plan:
    """`plan` with `margin` (`run --margin`, checked where it was parsed) as its margin of practical
    equivalence; `plan` itself without one."""
    return plan if margin is None else plan.model_copy(update={"margin": margin})


def with_roles(plan: Plan, roles: list[str], source: str) -> Plan:
    """`plan` with `roles` (`run --role`, repeatable) added to its own: validated like the plan key,
    their jobs added to the plan's workloads. A copy; `plan` itself when no role is given."""
    if not roles:
        return plan
    data = plan.model_dump(mode="json")
    data["roles"] = [*data.get("roles", []), *(r for r in roles if r not in data.get("roles", []))]
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(f"--role: {str(first['msg']).removeprefix('Value error, ')}") from None
