"""Which plan a command names: a TOML file or a built-in plan, refused in one line when it is
neither. The first step of loading a plan (plan/load.py), apart from the plan models it imports
(pydantic, every backing's spec: ~0.3 s), so that `plan` and `run` refuse a mistyped plan at once
(bench/cli_startup.py)."""

from __future__ import annotations

from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.plans import builtin_names

# Old built-in names, kept working but not listed: they were named after the people whose published
# sweeps they reproduce, which says nothing about what they run.
PLAN_ALIASES = {"hallyn": "full-matrix-fs", "salter": "block-size-sweep"}


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, or with a NUL byte
        return False


def plan_source(name_or_path: str) -> tuple[Path | None, str | None]:
    """(the plan file, None) or (None, the built-in plan's name, an old name as its new one); a
    file that does not exist or an unknown name is a UserError. A `.toml` name, a name with a '/'
    or an existing file's name is a file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or exists(path) or "/" in name_or_path:
        if not exists(path):
            raise UserError(
                f"plan file {str(path)[:200]} does not exist",
                hint=f"give a TOML file or a built-in plan: {', '.join(builtin_names())}",
            )
        return path, None
    name = PLAN_ALIASES.get(name_or_path, name_or_path)
    if name not in builtin_names():
        shown = name_or_path if len(name_or_path) <= 60 else name_or_path[:59] + "…"
        raise UserError(
            f"unknown plan '{shown}'",
            hint=f"built-in plans: {', '.join(builtin_names())}; or a path to a TOML file",
        )
    return None, name
