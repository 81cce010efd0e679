"""The scan behind tests/test_tier_names.py and tests/test_protocol_literals.py: string literals
equal to a registered name (a tier's, a protocol's) spelled outside the modules that own them.
Docstrings and comments do not count; a (module, string) pair with another meaning there is listed
by the caller."""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from pathlib import Path


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def literals_outside(
    root: Path,
    names: Collection[str],
    owners: tuple[str, ...],
    other_meanings: Mapping[tuple[str, str], str],
) -> list[str]:
    """file:line: 'name' for every string literal in `names` outside the `owners` directories of
    `root` (a package laid out as src/iomatrix), but for `other_meanings`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(owners):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        skip = _docstrings(tree)
        found += [
            f"src/iomatrix/{rel}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in names
            and id(node) not in skip
            and (rel, node.value) not in other_meanings
        ]
    return found
