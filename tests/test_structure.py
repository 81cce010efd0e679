"""The house rules a newcomer relies on (issue 68), read with the standard library's ``ast``:

- a package's ``__init__.py`` re-exports at most, in no more than 60 lines: the logic lives in
  named modules, where a reader looking for it finds it by its name;
- no call passes more than 6 positional arguments: past that, a reader must count commas to know
  which value is which (keyword arguments, or one options object, name them)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "iomatrix"
MAX_INIT_LINES = 60

# Package __init__ files allowed over the limit while their logic moves out, each with why; an
# entry that fits already fails the test below. None today.
INIT_ALLOWED: dict[str, str] = {}


def test_package_init_files_only_re_export() -> None:
    long = {
        str(p.relative_to(SRC)): len(p.read_text().splitlines())
        for p in sorted(SRC.rglob("__init__.py"))
    }
    over = {p: n for p, n in long.items() if n > MAX_INIT_LINES and p not in INIT_ALLOWED}
    assert not over, (
        f"package __init__ files over {MAX_INIT_LINES} lines: move their logic into a named "
        f"module and re-export it: {over}"
    )
    stale = sorted(p for p in INIT_ALLOWED if long.get(p, 0) <= MAX_INIT_LINES)
    assert not stale, f"INIT_ALLOWED lists files that fit now, remove them: {stale}"


MAX_POSITIONAL = 6
# Callees outside src/ whose positional arguments are one list of like values (a table row's
# cells), not values a reader must tell apart by position.
THIRD_PARTY_VARARGS = {"add_row"}

# Calls allowed more while their files are reshaped: (file, callee) → how many such calls. A
# shrinking list, empty today; a count that went down fails the test below until it is lowered.
WIDE_CALLS_ALLOWED: dict[tuple[str, str], int] = {}


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text()) for p in sorted(SRC.rglob("*.py"))}


def wide_calls(trees: dict[str, ast.Module]) -> dict[tuple[str, str], int]:
    """(file, callee) → how many calls pass more than MAX_POSITIONAL positional arguments, calls to
    a function of src/ that takes *args (an argv's words, a spelling's keys) aside."""
    varargs = THIRD_PARTY_VARARGS | {
        n.name
        for tree in trees.values()
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.args.vararg is not None
    }
    found: dict[tuple[str, str], int] = {}
    for path, tree in trees.items():
        for n in ast.walk(tree):
            wide = isinstance(n, ast.Call) and len(n.args) > MAX_POSITIONAL
            if wide and (name := _callee(n)) not in varargs:
                found[(path, name)] = found.get((path, name), 0) + 1
    return found


def test_the_scan_counts_positional_arguments() -> None:
    tree = ast.parse("f(1, 2, 3, 4, 5, 6, 7)\nf(1, 2, 3, 4, 5, 6, x=7)\ng(*a, 1, 2, 3, 4, 5, 6)\n")
    assert wide_calls({"m.py": tree}) == {("m.py", "f"): 1, ("m.py", "g"): 1}
    takes_words = ast.parse("def g(*words):\n    pass\n")
    assert wide_calls({"m.py": tree, "n.py": takes_words}) == {("m.py", "f"): 1}


def test_no_call_passes_more_than_six_positional_arguments() -> None:
    found = wide_calls(_trees())
    over = {k: n for k, n in found.items() if n > WIDE_CALLS_ALLOWED.get(k, 0)}
    assert not over, (
        f"calls with more than {MAX_POSITIONAL} positional arguments: pass them by keyword, or "
        "one options object (file, callee → calls): " + repr(over)
    )
    fewer = {k: found.get(k, 0) for k, n in WIDE_CALLS_ALLOWED.items() if found.get(k, 0) < n}
    assert not fewer, f"WIDE_CALLS_ALLOWED counts more calls than there are, lower them: {fewer}"
