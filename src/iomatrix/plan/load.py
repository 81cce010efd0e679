"""Load a plan from a built-in name or a TOML file, with one-line errors.

A plan is data that users share and download, so everything about the file is
checked before it is parsed: it must be a regular file of modest size outside the
kernel filesystems, valid UTF-8 and not absurdly nested; the parsed values are then
validated strictly (no "5" for 5, no 'no' for false) and every complaint is
rewritten into one plain line that names the key and the expected form.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from iomatrix.backing import spec as backing_spec
from iomatrix.domain import axes, did_you_mean
from iomatrix.errors import UserError
from iomatrix.plan.model import NAME_MAX, Plan, Repetitions
from iomatrix.plan.sections import setting_keys
from iomatrix.plan.source import plan_source
from iomatrix.plans import builtin_names  # noqa: F401 (read here by commands/plans.py and tests)
from iomatrix.textfile import read_small_text
from iomatrix.tiers import tier_names

MAX_PLAN_BYTES = 1024 * 1024  # a plan is a few hundred bytes; anything near this is not a plan
MAX_NESTING = 32  # plans nest two levels ([[backing]] options); tomllib recurses per level


def _all_keys() -> set[str]:
    keys = (
        (set(Plan.model_fields) - {"axis_settings", "tier_tables"})
        | set(axes.names())
        | set(Repetitions.model_fields)
        | setting_keys()
        | set(tier_names())
    )  # tier names: tier tables
    for name in dir(backing_spec):
        obj = getattr(backing_spec, name)
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            keys |= set(obj.model_fields)
    return keys


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TYPE_MESSAGES = {
    "string_type": "must be a string in quotes",
    "bool_type": "must be true or false (unquoted)",
    "int_type": "must be a whole number (unquoted)",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number (unquoted)",
    "list_type": 'must be a list, e.g. ["a", "b"]',
    "dict_type": "must be a table, e.g. [repetitions] or { min = 3 }",
    "model_type": "must be a table, e.g. [repetitions] or { min = 3 }",
    "model_attributes_type": 'must be a table, e.g. [[backing]] with type = "dir"',
    "finite_number": "must be a finite number (not inf or nan)",
    "missing": "is required",
    "int_parsing_size": "is too large",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": "≥", "less_than": "<", "less_than_equal": "≤"}


def _describe_one(e: dict[str, Any]) -> tuple[str, str]:
    """(key path, plain message) for one pydantic error."""
    loc = [str(x) for x in e["loc"] if not str(x).startswith("function-")]
    # Discriminated unions put the chosen type in the path ('backing.0.loopfs.size'): drop it.
    if len(loc) >= 2 and loc[0] == "backing" and loc[1].isdigit():
        loc = [f"backing[{int(loc[1]) + 1}]", *loc[3:]]
    kind = e["type"]
    if kind == "extra_forbidden":
        return ".".join(loc[:-1]), _unknown_key(loc, str(e["loc"][-1]))
    return ".".join(loc), _value_message(kind, e.get("input"), e.get("ctx") or {}, e["msg"])


def _unknown_key(loc: list[str], bad: str) -> str:
    """An unknown key's message, with the known key it is closest to."""
    if loc[:-1] and loc[-2] in setting_keys() and loc[-2] in tier_names() and bad in axes.names():
        # A tier whose settings table bears its name (the consolidation tier's [consolidation])
        # has no tier table of its own axis values: that table is its settings.
        return (
            f"unknown key '{bad}': the [{loc[-2]}] table holds the {loc[-2]} tier's "
            "settings, not axis "
            f"values; write {bad} at the plan's top level"
        )
    close = [
        k for k in difflib.get_close_matches(bad, sorted(_all_keys()), n=2, cutoff=0.6) if k != bad
    ]
    return f"unknown key '{bad[:60]}'" + (f" — did you mean '{close[0]}'?" if close else "")


def _value_message(kind: str, value: object, ctx: dict[str, Any], msg: str) -> str:
    """A refused value's message by pydantic's error type: the valid values, the bound, the type."""
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace(" or ", ", ")
        hint = (
            did_you_mean(value, re.findall(r"'([^']*)'", expected))
            if isinstance(value, str)
            else ""
        )
        return f"{_short(value)} is not valid; valid values: {expected}{hint}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {limit} (got {_short(value)})"
    if kind in ("string_too_long", "too_long"):
        return f"is too long (at most {ctx.get('max_length', '?')} characters)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _type_tag_message(kind, ctx)
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return f"is too large ({len(str(abs(value)))} digits)"
    if kind in _TYPE_MESSAGES:
        got = "" if kind == "missing" else f" (got {_short(value)})"
        return _TYPE_MESSAGES[kind] + got
    return str(msg).removeprefix("Value error, ")


def _type_tag_message(kind: str, ctx: dict[str, Any]) -> str:
    """A [[backing]] whose type is missing or not one of the valid ones."""
    tags = str(ctx.get("expected_tags", "")).replace("'", "")
    if set(tags.split(", ")) == set(backing_spec.BACKING_TYPES):
        # the backing union holds the local types: a network protocol's spec is its own
        tags = ", ".join(backing_spec.valid_types())
    # type = "directory": the tag given is not one of them
    if kind == "union_tag_invalid" and tags:
        tag = str(ctx.get("tag", ""))
        return (
            f"type = {tag[:40]!r} is not valid; valid values: "
            f"{tags}{did_you_mean(tag, tags.split(', '))}"
        )
    return f"needs type = one of {tags}" if tags else "needs a valid type"


def _describe_validation(err: ValidationError, source: str) -> str:
    # An unknown key is the likeliest cause of the other complaints (a typo'd required key): say it
    # first.
    errors = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    key, msg = _describe_one(dict(errors[0]))
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {key}: {msg}{more}" if key else f"{source}: {msg}{more}"


def plan_from_dict(data: dict, source: str) -> Plan:
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        raise UserError(_describe_validation(err, source)) from None
    except RecursionError:
        raise UserError(f"{source}: nested too deeply") from None


def _nesting(text: str) -> int:
    """An upper bound on the nesting depth of arrays and inline tables (brackets outside strings
    are not told apart, so strings full of brackets can only make this larger)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def _read_plan_file(path: Path) -> str:
    return read_small_text(
        path,
        label=f"plan file {path}",
        noun="plan",
        a_noun="a plan",
        limit=MAX_PLAN_BYTES,
        hint="give a TOML plan file (UTF-8 text)",
    )


def _safe_name(stem: str) -> str:
    """A plan name derived from a file name: safe characters only, at most NAME_MAX long."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "plan"
    return name[:NAME_MAX]


def load_plan(name_or_path: str) -> tuple[Plan, Path | None]:
    """A built-in plan by name, or a TOML plan file. Returns the plan and its file's directory."""
    path, name = plan_source(name_or_path)
    if path is not None:
        text = _read_plan_file(path)
        source, base, default_name = str(path), path.resolve().parent, _safe_name(path.stem)
    else:
        assert name is not None  # plan_source names a file or a built-in plan
        text = (resources.files("iomatrix.plans") / f"{name}.toml").read_text()
        source, base, default_name = f"built-in plan '{name}'", None, name
    if _nesting(text) > MAX_NESTING:
        raise UserError(
            f"{source}: arrays or tables nested more than {MAX_NESTING} deep, not a plan"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        # tomllib's message ends with "(at line L, column C)", or "(at end of document)".
        msg = str(err)
        if msg.endswith("(at end of document)"):
            lines = text.splitlines() or [""]
            msg = msg.replace(
                "(at end of document)",
                f"(at end of document: line {len(lines)}, column {len(lines[-1]) + 1})",
            )
        raise UserError(f"{source}: malformed TOML: {msg}") from None
    except (ValueError, RecursionError) as err:  # e.g. an integer beyond Python's digit limit
        why = "a number with thousands of digits" if "digits" in str(err) else str(err)[:120]
        raise UserError(f"{source}: unreadable TOML: {why}") from None
    data.setdefault("name", default_name)
    _numbers_as_axis_values(data)
    if base is not None:
        _dir_paths_from(data, base, source)
    return plan_from_dict(data, source), base


def _numbers_as_axis_values(table: dict[str, Any], depth: int = 0) -> None:
    """`queues = [1, 2]` as `queues = ["1", "2"]`: an axis whose values are numbers may be written
    as numbers (in the plan's top level and its tier and workload tables)."""
    for axis in axes.plan_axes():
        raw = table.get(axis.name)
        if isinstance(raw, list):
            table[axis.name] = [
                str(v) if type(v) is int and str(v) in axis.values else v for v in raw
            ]
    if depth < 2:
        for value in table.values():
            if isinstance(value, dict):
                _numbers_as_axis_values(value, depth + 1)


def _dir_paths_from(data: dict[str, Any], base: Path, source: str) -> None:
    """A dir backing's relative `path` is relative to the plan file's directory, not to where
    iomatrix runs."""
    backings = data.get("backing")
    for i, b in enumerate(backings if isinstance(backings, list) else []):
        if isinstance(b, dict) and b.get("type") == "dir" and b.get("path") == "":
            # Path("") is ".": an empty path would quietly mean the directory iomatrix runs in.
            raise UserError(
                f"{source}: backing[{i + 1}].path is empty",
                hint="name a directory, or leave 'path' out for the working directory",
            )
        if (
            isinstance(b, dict)
            and b.get("type") == "dir"
            and isinstance(b.get("path"), str)
            and b["path"]
            and not Path(b["path"]).is_absolute()
        ):
            b["path"] = str(base / b["path"])
