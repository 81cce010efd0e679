"""Fuzz corpus (tests/data/fuzz, made by its generate.py): hostile and careless plans, argument vectors
and database files, each run through the real CLI entry point in-process.

For every case: no traceback in the output; exit status 0 (accepted) or 2 (a one-line user error),
never 1 (an internal error, which writes a crash log) or anything else; and nothing written outside
the case's own temporary directory — the working directory stays empty, no crash log appears, and the
corpus files (plans, databases) are byte-for-byte unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from iomatrix.cli import main
from tests.conftest import DATA

FUZZ = DATA / "fuzz"
SCHEMA1 = DATA / "schema1" / "iomatrix-schema1.sqlite"
REPORTS = (["results"], ["results", "--format", "json"], ["rank"], ["monitor", "--run", "1"])


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    plans = sorted((tmp / "corpus" / "plans").glob("*.toml"))
    out += [(f"plan {p.name}", ["plan", str(p), "--explain"]) for p in plans]
    subst = {"{tmp}": str(tmp / "case"), "{db}": str(tmp / "case" / "r1.sqlite"),
             "{plan}": str(tmp / "corpus" / "plans")}
    for argv in json.loads((FUZZ / "argv.json").read_text()):
        real = []
        for a in argv:
            for k, v in subst.items():
                a = a.replace(k, v)
            real.append(a)
        out.append((f"argv {argv!r:.80}", real))
    for db in sorted((tmp / "corpus" / "db").glob("*.sqlite")):
        out += [(f"db {db.name} {' '.join(r)}", [*r, "--db", str(db)]) for r in REPORTS]
    return out


def run_case(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
    return (code if isinstance(code, int) else (0 if code is None else 2)), out.getvalue() + err.getvalue()


def test_fuzz_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(FUZZ, tmp_path / "corpus")
    corpus_before = tree_digest(tmp_path / "corpus")
    cwd, cache, home = tmp_path / "cwd", tmp_path / "cache", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("COLUMNS", "200")
    all_cases = cases(tmp_path)
    assert len(all_cases) >= 300
    problems: list[str] = []
    for name, argv in all_cases:
        case = tmp_path / "case"
        shutil.rmtree(case, ignore_errors=True)
        case.mkdir()
        shutil.copyfile(SCHEMA1, case / "r1.sqlite")
        (case / "file").write_text("not a directory\n")
        code, text = run_case(argv)
        if code not in (0, 2):
            problems.append(f"{name}: exit {code}: {text.strip().splitlines()[-1:]}")
        if "Traceback" in text:
            problems.append(f"{name}: traceback")
        if any(cwd.iterdir()):
            problems.append(f"{name}: wrote {sorted(p.name for p in cwd.iterdir())} in the working directory")
            shutil.rmtree(cwd)
            cwd.mkdir()
        if cache.exists() or any(home.iterdir()):
            problems.append(f"{name}: wrote a crash log or into $HOME")
            shutil.rmtree(cache, ignore_errors=True)
        if code == 2 and not any(ln.startswith("error:") or "Usage:" in ln or "Error" in ln
                                 for ln in text.splitlines()):
            problems.append(f"{name}: exit 2 without an error line")
    assert tree_digest(tmp_path / "corpus") == corpus_before, "the corpus was modified"
    assert not problems, f"{len(problems)} of {len(all_cases)} cases failed:\n" + "\n".join(problems[:40])
    assert os.getcwd() == str(cwd)
