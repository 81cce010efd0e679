"""Imports each named module first, each in a process of its own, several at once.

Run by tests/test_import_graph.py (``python -P import_first.py MODULE...``, the package's top level
named first): prints one line per module that cannot be imported first, its name, a tab and the
error, and nothing for the others.

Each module gets a forked process in which nothing of the package was imported before but the
packages that hold it (and what they import): the process for ``a.b.c`` is forked from the one that
imported ``a.b`` first and stopped there. That is exactly where a fresh interpreter stands when it
starts running ``a.b.c``: ``import a.b.c`` imports ``a``, then ``a.b``, then runs ``a.b.c``. So
every module is imported first as ``python -c "import a.b.c"`` would, while each package's own
imports run once, not once per module under it.

Modules from outside the package (the standard library, pydantic, numpy, ...) are imported once, in
the first process, before any fork: a survey process imports every module of the package and names
what else it loaded. They are not what is tested, and importing them afresh for each of ~300 modules
would take minutes of CPU. (So, as before, a module that uses ``scipy.stats`` after a bare ``import
scipy`` is not caught here when another module imported ``scipy.stats``.)

At most one process per CPU imports at a time (tokens in a pipe): a package's process gives its
token back once its own import is done and, while its modules' processes run, only waits."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import warnings


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".replace("\n", " ")[:500]


def _survey(modules: list[str]) -> list[str]:
    """The modules from outside the package that importing all of it loads, in the order loaded."""
    package = modules[0].split(".")[0]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        for name in modules:
            # A failure here is reported by that module's own process.
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
        outside = [m for m in sys.modules if m != package and not m.startswith(package + ".")]
        os.write(write_end, "\n".join(outside).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        names = pipe.read().decode().split("\n")
    os.waitpid(pid, 0)
    return [n for n in names if n and n not in sys.modules and not n.startswith("__")]


def main(modules: list[str]) -> None:
    # What the modules load from outside the package, loaded here once (warnings, e.g. of a
    # deprecated alias module, are the survey's business, not this test's).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in _survey(modules):
            # (one that loads only through another, e.g. an alias, is loaded by that one)
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
    # Freeze what is loaded so that each child's garbage collections skip it (and do not copy it).
    gc.collect()
    gc.freeze()

    # package (or "" for the top, or a module whose package is not named) -> the modules in it
    under: dict[str, list[str]] = {}
    for name in modules:
        package = name.rpartition(".")[0]
        under.setdefault(package if package in modules else "", []).append(name)
    tokens_read, tokens_write = os.pipe()
    os.write(tokens_write, b"x" * len(os.sched_getaffinity(0)))
    results_read, results_write = os.pipe()

    def import_first(name: str) -> int:
        """In a fresh fork: imports `name`, reports it, then does the modules under it."""
        try:
            importlib.import_module(name)
            failure = ""
        except BaseException as error:
            failure = _error(error)
        lines = [f"{name}\t{failure or 'ok'}"]
        if failure:  # its modules would fail on it: a fresh interpreter imports it first
            under_it = [m for m in modules if m.startswith(name + ".")]
            lines += [f"{m}\tnot tried: {name} cannot be imported first" for m in under_it]
        for line in lines:  # a write below PIPE_BUF is never interleaved with another's
            os.write(results_write, line.encode()[:4000] + b"\n")
        os.write(tokens_write, b"x")
        return 0 if failure else import_in_children(name)

    def import_in_children(package: str) -> int:
        """Forks a process for each module directly in `package` (imported in this process); the
        exit status: 0 when every process under it ended normally."""
        children = []
        for name in under.get(package, []):
            os.read(tokens_read, 1)
            pid = os.fork()
            if pid == 0:
                status = 1
                try:
                    status = import_first(name)
                except BaseException as error:
                    os.write(2, f"{name}: {_error(error)}\n".encode())
                finally:
                    os._exit(status)
            children.append(pid)
        statuses = [os.waitpid(pid, 0)[1] for pid in children]
        return 0 if not any(statuses) else 1

    # The results pipe is read by a process of its own, so that no writer ever blocks on a full
    # pipe while this one waits for the imports.
    reader = os.fork()
    if reader == 0:
        os.close(results_write)
        with os.fdopen(results_read, "rb") as pipe:
            lines = pipe.read().decode(errors="replace").splitlines()
        results = dict(line.split("\t", 1) for line in lines)
        for name in modules:
            result = results.get(name, "no result: its process ended before importing it")
            if result != "ok":
                print(f"{name}\t{result}", flush=True)
        os._exit(0)
    os.close(results_read)
    status = import_in_children("")
    os.close(results_write)
    os.waitpid(reader, 0)
    sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
