"""The scan behind tests/test_tier_names.py and tests/test_protocol_literals.py: string literals
equal to a registered name (a tier's, a protocol's) spelled outside the modules that own them.
Docstrings and comments do not count; a (module, string) pair with another meaning there is listed
by the caller."""

from __future__ import annotations

import ast
import importlib
import inspect
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


def _resolve(module: str, attr: str | None) -> object:
    """`attr` of the module named `module` (the module itself for None); None where either is
    missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return mod if attr is None else getattr(mod, attr, None)


def _imported(tree: ast.Module) -> dict[str, object]:
    """What a module's top-level imports bind: name → the object (a module, a constant, a class)."""
    bound: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                found = _resolve(node.module, alias.name)
                if found is None:  # `from package import submodule`
                    found = _resolve(f"{node.module}.{alias.name}", None)
                bound[alias.asname or alias.name] = found
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = _resolve(alias.name, None)
    return bound


def _value(node: ast.AST, bound: Mapping[str, object]) -> object:
    """The object a Name or a module's Attribute (`ceph.RBD`) stands for, or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = bound.get(node.value.id)
        if inspect.ismodule(owner):
            return getattr(owner, node.attr, None)
    return None


def _operands(node: ast.AST) -> list[ast.AST]:
    """A comparison's operand, or the items of a tuple, list or set it is."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return list(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # isinstance(x, A | B)
        return [*_operands(node.left), *_operands(node.right)]
    return [node]


def _bound(tree: ast.Module, names: Collection[str]) -> dict[str, object]:
    """The imports, then the module's own top-level constants set from one (ISCSI = iscsi.NAME)."""
    bound = _imported(tree)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            pairs = [(node.targets[0], node.value)]
            if isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(node.targets[0].elts, node.value.elts, strict=False))
            for target, value in pairs:
                found = _value(value, bound)
                if isinstance(target, ast.Name) and isinstance(found, str) and found in names:
                    bound[target.id] = found
    return bound


def protocol_branches(
    root: Path, names: Collection[str], classes: Collection[type], owners: tuple[str, ...]
) -> list[str]:
    """file:line: what for every branch on a protocol outside `owners` through a name its module
    exports: a comparison (==, !=, in, is) with a constant holding a protocol's name, a dict keyed
    by one, or an isinstance check on a protocol's own class (its backing spec)."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(owners):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        bound = _bound(tree, names)

        def hit(node: ast.AST, bound: Mapping[str, object] = bound) -> str | None:
            value = _value(node, bound)
            if isinstance(value, str) and value in names:
                return repr(value)
            if isinstance(value, type) and value in classes:
                return value.__name__
            return None

        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict):
                sides = [k for k in node.keys if k is not None]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                sides = [node.args[1]]
            else:
                continue
            found += [
                (rel, node.lineno, what)
                for side in sides
                for operand in _operands(side)
                if (what := hit(operand)) is not None
            ]
    return [f"src/iomatrix/{rel}:{line}: {what}" for rel, line, what in sorted(found)]
