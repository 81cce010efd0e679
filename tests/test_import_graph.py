"""The import graph of ``src/iomatrix``: no cycle, and imports at module level.

Read with the standard library's ``ast`` (no import is executed): an edge for every ``import`` /
``from ... import`` in a module, at module level or inside a function (a function-level import
closes a loop as surely as a module-level one, only later), and one for imports under ``if
TYPE_CHECKING:`` too: they never run, but a loop through them is the same tangle of modules that
need one another's types (issue 48: a 21-module loop held only through them), and hiding an import
there is no way out of one; the shared type moves down instead (``iomatrix.domain.cell``,
``iomatrix.domain.plan_view``). A dotted import initialises every parent package of what it
names first, so ``from iomatrix.report.recommend.verdict import x`` is an edge to
``iomatrix.report.recommend`` too (its ``__init__`` runs): a loop through a package's ``__init__``
is as real as any (issue 68: ``iomatrix.report.roles`` could not be imported first). The packages
the importing module itself sits in are no edge: they are initialised before it runs, and a
package's ``__init__`` re-exporting its submodules, which import one another, is Python's ordinary
layout, not a loop.

Beside the graph, every module is imported first, as a fresh interpreter would
(``test_each_module_imports_first``): what the graph models, Python confirms.

The tier registry imports every declaration module when it is first asked (``DISCOVERED``): those
are edges. What is loaded by name only when it is used (a tier's implementation when a sweep runs
it, its report companion when a report asks, an installed package's entry point) is not: that is how
a declaration names its code without importing it, and why the plan, the matrix and the fio builders
can read tiers."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "iomatrix"

# Function-level imports kept on purpose outside commands/ (whose lazy imports keep `iomatrix
# --help` fast: bench/cli_help.py times it). Each is a heavy third-party import deferred until the
# code that needs it runs, or an import owned by a module still to be reshaped (noted). Key:
# (module, imported module).
LAZY_ALLOWED: dict[tuple[str, str], str] = {
    # scipy.stats costs ~0.5 s to import: only the statistics that need a distribution pay it.
    ("iomatrix.stats.interference", "scipy"): "scipy.stats: 0.5 s at import",
    ("iomatrix.stats.blocked", "scipy"): "scipy.stats: 0.5 s at import",
    (
        "iomatrix.stats.shapiro",
        "scipy",
    ): "scipy (its swilk loaded by file), scipy.stats only as a fallback",
    ("iomatrix.stats.power", "scipy"): "scipy.stats: 0.5 s at import",
    ("iomatrix.stats.tier_agreement", "scipy"): "scipy.stats: 0.5 s at import",
    # scipy.special's package builds an array-API layer (numpy.f2py, numpy.testing): 0.3-0.5 s;
    # its compiled functions are loaded by file, the package only as a fallback.
    ("iomatrix.stats.special", "scipy"): "scipy.special's ufuncs loaded by file",
    # A report imports these (report.quality, report.query): a command refused before any statistic,
    # or one that only prints intervals, no longer pays scipy.stats (~1 s of CPU per process).
    ("iomatrix.stats.coldwarm", "scipy"): "scipy.stats: 0.5 s at import",
    ("iomatrix.stats.compare", "scipy"): "scipy.stats: 0.5 s at import",
    # matplotlib costs ~0.3 s: only a fleet heat map pays it.
    ("iomatrix.report.fleet_chart", "matplotlib.colors"): "matplotlib: 0.3 s at import",
    (
        "iomatrix.report.consolidation",
        "iomatrix.report",
    ): "charts (matplotlib) only when the HTML section is drawn",
    (
        "iomatrix.report.consolidation",
        "iomatrix.report.html",
    ): "html imports charts (matplotlib), and the companions",
    (
        "iomatrix.report.fleet_render",
        "iomatrix.report.fleet_chart",
    ): "matplotlib behind it: a refused command "
    "must not write its font cache (test_bad_input_campaign)",
    ("iomatrix.report.fleet_chart", "matplotlib.patches"): "matplotlib: 0.3 s at import",
    # psutil and lzma: only the paths that use them (a process tree, an xz initramfs).
    ("iomatrix.children", "psutil"): "psutil at import, only for a process tree",
    # the ledger of started children: iomatrix.backing's package imports pydantic (the backing
    # specs), and `iomatrix --help` imports children through commands/run.py.
    (
        "iomatrix.children",
        "iomatrix.backing.leftovers",
    ): "the leftovers ledger: iomatrix.backing loads pydantic",
    ("iomatrix.guest.initramfs", "lzma"): "lzma, only for an xz-compressed initramfs",
    ("iomatrix.guest.kernel", "lzma"): "lzma, only for an xz-compressed kernel module",
    ("iomatrix.guest.kernel", "zlib"): "zlib, only for a gzip-compressed kernel module",
    # importlib.metadata scans every installed distribution: only when the tier registry is first
    # asked.
    ("iomatrix.plugins", "importlib.metadata"): "entry points: read when a registry is first asked",
}

# Function-level imports in modules still being reshaped, listed so that none is added: empty since
# issue 36's last 19 were moved to module level (none closed a loop or slowed `iomatrix --help`).
# Add none here: a new lazy import is a documented LAZY_ALLOWED entry with its reason, or a
# module-level one.
PENDING: dict[tuple[str, str], str] = {}


# Imports done with importlib by the package itself, eagerly on first use: importer → modules under
# a package.
DISCOVERED = {
    "iomatrix.tiers": "iomatrix.tiers.declared.",
    # (the built-in protocols' modules: the protocol registry and the axis registry ask it)
    "iomatrix.protocols.built_in": "iomatrix.protocols.",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _imports(
    tree: ast.AST, in_function: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it sits inside a function, `if TYPE_CHECKING:` blocks
    included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        else:
            inner = in_function or isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            yield from _imports(node, inner)


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> set[str]:
    """The modules of this package an import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        # `from pkg import name`: the submodule pkg.name when there is one, else pkg itself.
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    # Python initialises each parent package of an imported module first; the packages the importer
    # sits in are initialised already.
    own = _packages_of(module)
    parents = {p for n in names for p in _packages_of(n) if p not in own}
    return {n for n in [*names, *parents] if n in known}


def _packages_of(module: str) -> set[str]:
    """The packages a dotted module name sits in: iomatrix.a.b -> {iomatrix, iomatrix.a}."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(module → modules of the package it imports, [(module, line, imported) for each
    function-level import])."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    lazy: list[tuple[str, int, str]] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, in_function in _imports(tree):
            graph[module] |= _targets(node, module, path.name == "__init__.py", known) - {module}
            if in_function:
                imported = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                lazy.append((module, node.lineno, imported or "." * node.level))
    for importer, prefix in DISCOVERED.items():
        graph[importer] |= {m for m in modules if m.startswith(prefix)}
    return graph, lazy


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative):
    each is a set of modules that import one another, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_the_scan_sees_a_cycle_it_is_shown() -> None:
    """The cycle finder on a known graph: a loop of three, a loop of two, and an acyclic tail."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(import_cycles(graph)) == [["a", "b", "c"], ["e", "f"]]


def test_the_scan_reads_function_level_and_relative_imports() -> None:
    graph, lazy = import_graph()
    # `from iomatrix.domain.axes import ...`
    assert "iomatrix.domain.axes" in graph["iomatrix.matrix"]
    assert "iomatrix.domain" in graph["iomatrix.matrix"]  # `from iomatrix.domain import NA`
    assert any(m == "iomatrix.commands.run" for m, _, _ in lazy)  # commands/ defers its imports
    assert "iomatrix.tiers.declared.guest" in graph["iomatrix.tiers"]  # the registry's discovery
    assert "iomatrix.protocols.nbd" in graph["iomatrix.protocols.built_in"]
    # under `if TYPE_CHECKING:`
    assert "iomatrix.domain.plan_view" in graph["iomatrix.tiers.declaration"]


def test_an_import_only_for_type_checking_is_an_edge() -> None:
    """A module that imports another only under `if TYPE_CHECKING:` depends on it all the same."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from iomatrix.matrix "
        "import Cell\n"
        "import typing\nif typing.TYPE_CHECKING:\n    import iomatrix.plan.model\n"
    )
    known = {"iomatrix.matrix", "iomatrix.plan.model"}
    found = {t for node, _ in _imports(tree) for t in _targets(node, "iomatrix.x", False, known)}
    assert found == known


def test_help_imports_no_tier_plan_or_report_code() -> None:
    """`iomatrix --help` lists the commands without importing what they run (its start-up time,
    bench/cli_help.py): no tier declaration or implementation, no plan model, matrix, store or
    report."""
    code = (
        "import sys; sys.argv = ['iomatrix', '--help']\nfrom iomatrix.cli import "
        "main\ntry: main()\n"
        "except SystemExit: pass\nprint(' '.join(sorted(m for m in sys.modules if "
        "m.startswith('iomatrix'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = (
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        .stdout.split("\n")[-2]
        .split()
    )
    assert "iomatrix.commands.run" in out  # the scan sees the command modules
    heavy = [
        m
        for m in out
        if m.startswith(
            (
                "iomatrix.tiers",
                "iomatrix.plugins",
                "iomatrix.plan",
                "iomatrix.matrix",
                "iomatrix.store",
                "iomatrix.report.",
            )
        )
        and m != "iomatrix.report.formats"
    ]
    assert not heavy, f"iomatrix --help imports {heavy}"


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_tier_declarations_import_no_tier_code_and_tiers_no_report() -> None:
    """What the plan, the matrix and the fio builders read of a tier (its declaration) reaches no
    tier implementation, plan model or matrix; no module of tiers/ imports the store or the reports
    (the report hooks are on report/companions/)."""
    graph, _ = import_graph()
    implementations = {
        "iomatrix.tiers.base",
        "iomatrix.tiers.baremetal",
        "iomatrix.tiers.blocklayer",
        "iomatrix.tiers.guest",
        "iomatrix.tiers.durability",
        "iomatrix.tiers.consolidation",
    }
    assert implementations <= set(graph)
    for start in ("iomatrix.tiers", "iomatrix.plan.model", "iomatrix.matrix", "iomatrix.fio.jobs"):
        reached = _reachable(graph, start)
        assert not reached & implementations, f"{start} reaches {sorted(reached & implementations)}"
        assert not {"iomatrix.plan.model", "iomatrix.matrix"} & _reachable(graph, "iomatrix.tiers")
    for module, targets in graph.items():
        if module.startswith("iomatrix.tiers"):
            bad = sorted(t for t in targets if t.startswith(("iomatrix.report", "iomatrix.store")))
            assert not bad, f"{module} imports {bad}"


# Loops known and being taken apart, each named with why, so that this test guards every other
# module meanwhile; an entry whose loop is gone fails the tests below, so none outlives its fix.
# None today.
KNOWN_CYCLES: dict[frozenset[str], str] = {}
# Modules that fail to import first in a fresh interpreter because of a loop above.
KNOWN_FIRST_IMPORT_FAILURES: dict[str, str] = {}


def test_no_import_cycle_in_the_package() -> None:
    graph, _ = import_graph()
    cycles = [c for c in import_cycles(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert not cycles, (
        "import cycles (module-level, function-level and TYPE_CHECKING imports, parent packages "
        "included):\n" + "\n".join(f"  {len(c)} modules: {' -> '.join(c)}" for c in cycles)
    )
    gone = {frozenset(c) for c in import_cycles(graph)}
    stale = [sorted(k) for k in KNOWN_CYCLES if k not in gone]
    assert not stale, f"KNOWN_CYCLES lists loops that are gone, remove them: {stale}"


def test_each_module_imports_first(tmp_path: Path) -> None:
    """Every module of src/iomatrix can be the first one a program imports (issue 68:
    ``python -c "import iomatrix.report.roles"`` failed with a partially initialised module). Each
    module in a forked process of its own, where only the package holding it was imported before,
    as in a fresh interpreter (tests/import_first.py tells why that is the same), one per CPU at a
    time."""
    modules = sorted(_modules())
    assert modules[0] == PACKAGE
    # Bytecode written once, by the survey's import of every module, into a directory of this
    # test's own, and read by every module's process: where PYTHONDONTWRITEBYTECODE is set (the
    # sessions here set it) each of ~300 processes would compile its imports anew, half the CPU.
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONPYCACHEPREFIX": str(tmp_path / "bytecode"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).with_name("import_first.py")), *modules],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    failed = dict(line.split("\t", 1) for line in proc.stdout.splitlines())
    unexpected = {m: e for m, e in failed.items() if m not in KNOWN_FIRST_IMPORT_FAILURES}
    assert not unexpected, "modules that cannot be imported first:\n" + "\n".join(
        f"  {m}: {e}" for m, e in sorted(unexpected.items())
    )
    stale = sorted(set(KNOWN_FIRST_IMPORT_FAILURES) - set(failed))
    assert not stale, f"KNOWN_FIRST_IMPORT_FAILURES lists modules that import now: {stale}"


def test_the_first_import_harness_reports_a_loop_and_imports_each_module_alone(
    tmp_path: Path,
) -> None:
    """tests/import_first.py on a made-up package: a two-module loop fails whichever is imported
    first, a package that raises leaves its modules untried, and a module sees none of its
    siblings loaded (each in a process of its own)."""
    files = {
        "loopy/__init__.py": "",
        "loopy/a.py": "from loopy.b import B\nA = 1\n",
        "loopy/b.py": "from loopy.a import A\nB = 2\n",
        "loopy/alone.py": (
            "import sys\nothers = [m for m in sys.modules if m.startswith('loopy.')]\n"
            "assert others == ['loopy.alone'], others\n"
        ),
        "loopy/fine.py": "import json\n",
        "loopy/broken/__init__.py": "raise RuntimeError('broken on purpose')\n",
        "loopy/broken/inner.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = sorted(
        m.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for m in files
    )
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).with_name("import_first.py")), *modules],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
        check=True,
    )
    failed = dict(line.split("\t", 1) for line in proc.stdout.splitlines())
    assert sorted(failed) == ["loopy.a", "loopy.b", "loopy.broken", "loopy.broken.inner"]
    assert "partially initialized" in failed["loopy.a"]
    assert failed["loopy.broken"] == "RuntimeError: broken on purpose"
    assert failed["loopy.broken.inner"].startswith("not tried: loopy.broken")


def test_a_dotted_import_is_an_edge_to_the_parent_packages_it_initialises() -> None:
    """`from iomatrix.a.b import x` runs iomatrix/a/__init__.py first: an edge to iomatrix.a from
    any module outside iomatrix.a, none from a module inside it (already initialised)."""
    tree = ast.parse("from iomatrix.a.b import x\nimport iomatrix.c.d\n")
    known = {"iomatrix", "iomatrix.a", "iomatrix.a.b", "iomatrix.c", "iomatrix.c.d"}

    def edges(module: str) -> set[str]:
        return {t for node, _ in _imports(tree) for t in _targets(node, module, False, known)}

    assert edges("iomatrix.e") == {"iomatrix.a", "iomatrix.a.b", "iomatrix.c", "iomatrix.c.d"}
    assert edges("iomatrix.a.f") == {"iomatrix.a.b", "iomatrix.c", "iomatrix.c.d"}


def test_no_function_level_import_outside_commands() -> None:
    """A function-level import hides a loop or slows nothing worth it; commands/ defers its imports
    on purpose (`iomatrix --help` imports every command module), the rest are listed in
    LAZY_ALLOWED."""
    _, lazy = import_graph()
    top = {(m, i.split(".")[0] if not i.startswith(PACKAGE) else i) for m, _, i in lazy}
    unexpected = sorted(
        f"{m}:{line} imports {i}"
        for m, line, i in lazy
        if not m.startswith(f"{PACKAGE}.commands")
        and m != PACKAGE + ".cli"
        and not {(m, i), (m, i.split(".")[0])} & (LAZY_ALLOWED.keys() | PENDING.keys())
    )
    assert not unexpected, "function-level imports outside commands/:\n  " + "\n  ".join(unexpected)
    stale = sorted(
        k for k in LAZY_ALLOWED | PENDING if k not in top and k not in {(m, i) for m, _, i in lazy}
    )
    assert not stale, f"LAZY_ALLOWED lists imports that are gone: {stale}"
