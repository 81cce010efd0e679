"""The subcommands of `iomatrix`, one module each; every module has `NAME` and `register(app)`.

`COMMANDS` lists them in the order `iomatrix --help` shows them. A command module imports only what
its options need (typer, `options.py`); everything heavy (numpy, scipy, the store, the runner, rich
tables) is imported inside the command's body, so that `iomatrix --help` stays fast.

Not commands: `options.py` (shared options), `common.py` (shared steps), `progress.py` (the display
of `run`), `help_names.py` (readable value names in `--help`)."""

from __future__ import annotations

from types import ModuleType

from iomatrix.commands import (
    clean,
    compare,
    guest,
    history,
    merge,
    monitor,
    plan,
    plans,
    publish,
    rank,
    recommend,
    report,
    results,
    run,
)
from iomatrix.commands.help_names import install as _readable_help_names

_readable_help_names()

COMMANDS: tuple[ModuleType, ...] = (
    plans,
    plan,
    run,
    results,
    rank,
    compare,
    monitor,
    clean,
    recommend,
    report,
    merge,
    publish,
    history,
    guest,
)
