"""The house rules a newcomer relies on (issue 68), read with the standard library's ``ast``:

- a package's ``__init__.py`` re-exports at most, in no more than 60 lines: the logic lives in
  named modules, where a reader looking for it finds it by its name;
- no call passes more than 6 positional arguments: past that, a reader must count commas to know
  which value is which (keyword arguments, or one options object, name them)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "iomatrix"
MAX_INIT_LINES = 60

# Package __init__ files other engineers are emptying (issue 68); the lead removes each entry when
# its change merges, and an entry that fits already fails the test below.
INIT_ALLOWED: dict[str, str] = {
    "protocols/__init__.py": "protocol engineer",
    # a lazy-name table (PEP 562) keeping scipy out of start-up: the statistics engineer's package
    "stats/__init__.py": "statistics engineer",
}


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
