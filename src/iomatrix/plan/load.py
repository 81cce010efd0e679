"""Load a plan from a built-in name or a TOML file, with one-line errors."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from iomatrix.errors import UserError
from iomatrix.plan.model import Plan


def builtin_names() -> list[str]:
    return sorted(p.name.removesuffix(".toml") for p in resources.files("iomatrix.plans").iterdir()
                  if p.name.endswith(".toml"))


def _describe_validation(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"] if not str(x).startswith("function-after"))
    msg = first["msg"]
    value = first.get("input")
    if first["type"] in ("literal_error", "enum"):
        expected = first.get("ctx", {}).get("expected", "")
        msg = f"'{value}' is not valid; valid values: {expected.replace(' or ', ', ')}"
    elif first["type"] == "extra_forbidden":
        msg = f"unknown key '{first['loc'][-1]}'"
    elif first["type"] == "union_tag_invalid":
        msg = f"{msg}"
    msg = msg.removeprefix("Value error, ")
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{source}: {loc}: {msg}{more}" if loc else f"{source}: {msg}{more}"


def plan_from_dict(data: dict, source: str) -> Plan:
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        raise UserError(_describe_validation(err, source)) from None


def load_plan(name_or_path: str) -> tuple[Plan, Path | None]:
    """A built-in plan by name, or a TOML plan file. Returns the plan and its file's directory."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists() or "/" in name_or_path:
        if not path.is_file():
            raise UserError(f"plan file {path} does not exist",
                            hint=f"give a TOML file or a built-in plan: {', '.join(builtin_names())}")
        text = path.read_text()
        source, base = str(path), path.resolve().parent
    else:
        if name_or_path not in builtin_names():
            raise UserError(f"unknown plan '{name_or_path}'",
                            hint=f"built-in plans: {', '.join(builtin_names())}; or a path to a TOML file")
        text = (resources.files("iomatrix.plans") / f"{name_or_path}.toml").read_text()
        source, base = f"built-in plan '{name_or_path}'", None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        # tomllib's message ends with "(at line L, column C)", or "(at end of document)".
        msg = str(err)
        if msg.endswith("(at end of document)"):
            lines = text.splitlines() or [""]
            msg = msg.replace("(at end of document)",
                              f"(at end of document: line {len(lines)}, column {len(lines[-1]) + 1})")
        raise UserError(f"{source}: malformed TOML: {msg}") from None
    data.setdefault("name", path.stem if base else name_or_path)
    return plan_from_dict(data, source), base
