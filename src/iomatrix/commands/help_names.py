"""Readable names in `--help`: PLAN and DB_A for arguments, TEXT, INTEGER, PATH for option values,
nothing after a flag, instead of typer's own `{plan}`, `<str>`, `<list[Path]>` and `<bool>` (which
read as Python, not as a CLI).

typer has no setting for these, so its three display methods are wrapped once, when the commands are
registered. Choices (`<table|json|csv>`) and metavars a command sets itself are kept as they are.
"""

from __future__ import annotations

import re
from typing import Any

_TYPE_WORDS = {
    "str": "TEXT",
    "int": "INTEGER",
    "float": "NUMBER",
    "path": "PATH",
    "Path": "PATH",
    "datetime": "DATE",
}


def readable_type(shown: str | None) -> str | None:
    """'<str>' → 'TEXT', '<list[Path]>' → 'PATH', '<int>' → 'INTEGER'; choices and anything else
    unchanged."""
    if shown is None:
        return None
    m = re.fullmatch(r"<(?:list\[)?(\w+)\]?>", shown)
    return _TYPE_WORDS.get(m.group(1), shown) if m else shown


def install() -> None:
    """Wrap typer's display methods (idempotent)."""
    from typer import core

    if getattr(core.TyperOption, "_iomatrix_names", False):
        return
    option_type = core.TyperOption.display_type_rich
    argument_type = core.TyperArgument.display_type_rich

    def option_display(self: Any, ctx: Any) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        if self.is_flag or self.count:  # a flag takes no value: say nothing, not <bool>
            return None
        return readable_type(option_type(self, ctx))

    def argument_display(self: Any, ctx: Any) -> str | None:
        # the name itself says it (PLAN, DB_A)
        return None if self.metavar is None else str(self.metavar)

    def usage_name(self: Any) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    del argument_type
    core.TyperOption.display_type_rich = option_display  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = argument_display  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]
    # the name in the help panel, the usage line and "Missing argument 'DB_A'"
    core.TyperArgument.display_name_raw = property(  # type: ignore[assignment]
        lambda self: str(self.metavar or self.name).upper()
    )
    core.TyperOption._iomatrix_names = True  # type: ignore[attr-defined]
