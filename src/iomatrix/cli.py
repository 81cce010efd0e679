"""The `iomatrix` command line: the app, `--version`, and how errors become one line and an exit
status.

Each subcommand is a module of `iomatrix.commands` that registers itself on the app.
"""

from __future__ import annotations

import errno
import inspect
import os
import sqlite3
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.markup import escape

from iomatrix import __version__
from iomatrix.commands import COMMANDS
from iomatrix.commands.run import SweepIncomplete
from iomatrix.dburl import redact_argv, redact_urls
from iomatrix.errors import UserError
from iomatrix.ui import console, err_console

# One BLAS thread, set before anything imports numpy (nothing above does): the statistics fit
# matrices of at most a few hundred rows, where OpenBLAS's thread pool only waits on itself, and on
# a loaded or shared host far worse: the 100-host fleet answer's blocked fit took 3.8 s with it and
# 0.04 s without (docs/benchmarks-history.md, "Issue 52: the central PostgreSQL store"); in a sweep,
# its threads would also compete with the I/O being measured. A value the user set stands.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Exit statuses (README, "Exit status"): 0 done; 1 internal error (a bug: the traceback is in a log
# file); 2 a problem the user can fix (bad plan, option, file); 3 a sweep ran but units gave up or
# every run failed; 130 interrupted. (`compare --fail-above` exits 4 for a regression and 5 for
# "cannot tell", commands/compare.py; `clean` exits 1 for a leftover.)
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_GAVE_UP = 3
EXIT_INTERRUPTED = 130

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        console.print(f"iomatrix {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Sweep VM disk configurations (format × cache × aio × bus × backing) with error bars."""


def _register_commands() -> None:
    for module in COMMANDS:
        module.register(app)
    _one_paragraph_summaries(app)


def _one_paragraph_summaries(typer_app: typer.Typer) -> None:
    """Each command's line in the command list is its docstring's first paragraph as one line, for
    the terminal to wrap: typer's rich help keeps a docstring's own line breaks there, which left
    orphan words ("estimates" / "it).") at 80 columns. The command's own --help is unchanged."""
    infos = [*typer_app.registered_commands]
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _one_paragraph_summaries(group.typer_instance)
            infos.append(group)
    for info in infos:
        own = getattr(info, "typer_instance", None)  # a group's help is its Typer's
        doc = next(
            (
                text
                for text in (
                    info.help,
                    own.info.help if own is not None else None,
                    info.callback.__doc__ if info.callback else None,
                )
                if isinstance(text, str)  # typer's unset fields are DefaultPlaceholder objects
            ),
            None,
        )
        if not isinstance(info.short_help, str) and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


_register_commands()


def crash_log_dir() -> Path:
    """Where full tracebacks of internal errors go: $XDG_CACHE_HOME/iomatrix/logs
    (~/.cache/iomatrix/logs)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iomatrix" / "logs"


def _write_crash_log(err: BaseException) -> Path | None:
    # A password given in a URL (`--db postgresql://u:secret@…`) is in argv and may be in a
    # message: neither reaches the log.
    text = redact_urls(
        f"iomatrix {__version__}\nargv: {redact_argv(sys.argv)!r}\ntime: "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n\n" + "".join(traceback.format_exception(err))
    )
    try:
        d = crash_log_dir()
        d.mkdir(parents=True, exist_ok=True)
        log = d / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        log.write_text(text)
        return log
    except OSError:
        return None


def _one_line(text: str, limit: int = 300) -> str:
    """`text` as one line of at most `limit` characters, the secrets of any URL in it hidden (every
    error line is made by this)."""
    line = " ".join(redact_urls(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> None:
    # Standalone mode: the CLI library prints usage errors and --help itself and turns typer.Exit
    # into the exit code; what is left for us is the user's own mistakes (UserError), Ctrl-C, and
    # anything unexpected, which becomes one line here and a full traceback in a log file.
    try:
        # Not standalone: the CLI library hands its usage errors (a bad option value, an unknown
        # option) to us, to be printed as one line like every other mistake instead of its usage
        # text and boxed panel.
        status = app(args=argv, prog_name="iomatrix", standalone_mode=False)
        if isinstance(status, int) and not isinstance(status, bool) and status != 0:
            # typer.Exit(n) raised by a command (compare's gate, clean's leftovers), or --help's 0
            sys.exit(status)
    # a usage error: exit 2 (typer.Exit and Abort are not among these)
    except typer.TyperException as err:
        _usage_error(err)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(EXIT_INTERNAL)
    except UserError as err:
        err_console.print(
            f"[red]error:[/] {escape(_one_line(err.one_line(), 1000))}", soft_wrap=True
        )
        sys.exit(EXIT_USER)
    except SweepIncomplete as err:
        err_console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
        sys.exit(EXIT_GAVE_UP)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except sqlite3.DatabaseError as err:
        from iomatrix.store.db import OPENED
        from iomatrix.store.integrity import is_file_damage

        if not is_file_damage(err):  # a query's own mistake: a bug
            _internal(err)

        where = ", ".join(dict.fromkeys(str(p) for p in OPENED)) or "a results database"
        err_console.print(
            f"[red]error:[/] {escape(_one_line(f'{where}: SQLite cannot read it ({err})'))} — "
            "restore it from a copy (sqlite3's .recover may save the rest into a new file)",
            soft_wrap=True,
        )
        sys.exit(EXIT_USER)
    except Exception as err:
        _internal(err)


def _usage_error(err: typer.TyperException) -> NoReturn:
    """A usage error as one line naming the command, the problem and where the help is."""
    # a bare `iomatrix` or `iomatrix guest`: the help is printed
    if type(err).__name__ == "NoArgsIsHelpError":
        sys.exit(EXIT_USER)
    ctx = getattr(err, "ctx", None)
    command = ctx.command_path if ctx is not None else "iomatrix"
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    err_console.print(
        f"[red]error:[/] {escape(_one_line(f'{command}: {message}'))} — "
        f"see '{escape(command)} --help'",
        soft_wrap=True,
    )
    sys.exit(getattr(err, "exit_code", EXIT_USER))


# OSErrors about a path the user gave (a name too long, a missing or read-only directory, no space):
# the user's to fix, so one line naming the fix and no crash log.
_PATH_ERRNOS: dict[int, str] = {
    errno.ENAMETOOLONG: "use a shorter name (a name is at most 255 bytes, a path 4096)",
    errno.ENOENT: "check the path: a directory in it does not exist",
    errno.ENOTDIR: "check the path: a part of it is a file, not a directory",
    errno.EISDIR: "give a file, not a directory",
    errno.EACCES: "check its permissions, or choose a place you may write",
    errno.EPERM: "check its permissions, or choose a place you may write",
    errno.EROFS: "choose a place on a writable filesystem",
    errno.ENOSPC: "free space on that filesystem, or choose another",
    errno.EDQUOT: "free space within your quota, or choose another filesystem",
    errno.ELOOP: "the path's symbolic links go round in a loop: give the real path",
}


def _internal(err: Exception) -> NoReturn:
    """One line for an error the user did not cause (the traceback in a log), or an OSError the host
    raised."""
    if isinstance(err, OSError) and err.strerror and err.errno in _PATH_ERRNOS:
        what = f"{err.strerror}" + (f": {err.filename}" if err.filename else "")
        err_console.print(
            f"[red]error:[/] {escape(_one_line(what))} — {escape(_PATH_ERRNOS[err.errno])}",
            soft_wrap=True,
        )
        sys.exit(EXIT_USER)
    log = _write_crash_log(err)
    where = f"full traceback in {log}" if log else f"no log could be written in {crash_log_dir()}"
    if isinstance(err, OSError) and err.strerror:
        # The host refused something (disk full, permission, read-only filesystem): the user can
        # act.
        what = f"{err.strerror}" + (f": {err.filename}" if err.filename else "")
        err_console.print(
            f"[red]error:[/] {escape(_one_line(what))} — {escape(where)}", soft_wrap=True
        )
        sys.exit(EXIT_USER)
    err_console.print(
        f"[red]internal error:[/] {escape(_one_line(f'{type(err).__name__}: {err}'))} — "
        f"{escape(where)}; please report it",
        soft_wrap=True,
    )
    sys.exit(EXIT_INTERNAL)
