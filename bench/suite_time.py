"""Where the test suite's time goes: per file, per fixture, and the slowest tests with what each
says it proves.

    ./scripts/test --junitxml=/tmp/suite.xml --fixture-times=/tmp/fixtures.jsonl
    python bench/suite_time.py /tmp/suite.xml --fixtures /tmp/fixtures.jsonl [--top 30]
    python bench/suite_time.py --durations-log ci.log          # a CI log's --durations lines
    python bench/suite_time.py --durations-log ci.log --write-durations tests/durations.json
    python bench/suite_time.py /tmp/suite.xml --write-durations tests/durations.json
    python bench/suite_time.py --coverage-kept old.json new.json   # `coverage json` of each

Reads pytest's JUnit XML (each test's wall seconds, set-up + call + teardown) or the `--durations`
lines of a log (.ci/run prints the slowest 30), and the fixture set-up times tests/conftest.py's
`--fixture-times` option writes (a module-scoped sweep or a lab cluster is set up once and charged
to whichever test came first, so --durations alone hides it). Prints:
  - per test file: seconds in all, tests, the slowest;
  - per fixture: set-ups, seconds in all, the longest set-up, where it is defined;
  - the slowest tests, each with the first sentence of its docstring: what it proves, as its author
    wrote it, which is what a faster test must prove before this one is cut.
--write-durations refreshes the seconds tests/conftest.py orders the suite by (longest first, an
xdist group by the sum of its tests), keeping the group entries the file already has, refreshed from
the same run; from a log's slowest-N list, a test it leaves out is cut to the list's shortest figure
(it took no longer in that run). --coverage-kept compares the branch coverage of src/ by a test
before and after it was cut or shrunk (each `coverage json` of a run of only those tests,
`./scripts/test --cov`): the lines and branches each covers, and those the old one covered that the
new ones miss. Prints numbers; not a test.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# "12.34s call     tests/test_x.py::test_y[a]" as pytest's --durations prints it
DURATION_LINE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S+::\S.*?)\s*$")
# the "@group" pytest-xdist's loadgroup appends to a grouped test's id in what it reports; the ids
# tests/conftest.py orders by are the collected ones, without it
XDIST_GROUP = re.compile(r"@[^@\[\]/:]+$")


def nodeid_of(classname: str, name: str) -> str:
    """A JUnit testcase's pytest node id: classname is the module's dotted path, with a test class
    appended when there is one (tests.test_x.TestY); the module is the longest prefix that is a
    file under the checkout."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / module).exists():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return f"{'/'.join(parts)}.py::{name}"


def from_junit(path: Path) -> dict[str, float]:
    """Seconds per test node id from pytest's --junitxml (pytest's default junit_duration_report:
    set-up, call and teardown together)."""
    seconds: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        node = nodeid_of(case.get("classname", ""), case.get("name", ""))
        seconds[node] = seconds.get(node, 0.0) + float(case.get("time", "0") or 0)
    return seconds


def from_durations_log(path: Path) -> dict[str, float]:
    """Seconds per test from the --durations lines of a log (set-up, call and teardown added)."""
    seconds: dict[str, float] = defaultdict(float)
    for line in path.read_text(errors="replace").splitlines():
        m = DURATION_LINE.match(line)
        if m:
            seconds[XDIST_GROUP.sub("", m.group(3))] += float(m.group(1))
    return dict(seconds)


def shortest_listed(path: Path) -> float | None:
    """The shortest figure among a log's --durations lines: pytest lists the slowest N, so a test
    the list leaves out took at most that long in the run."""
    figures = [
        float(m.group(1))
        for line in path.read_text(errors="replace").splitlines()
        if (m := DURATION_LINE.match(line))
    ]
    return min(figures) if figures else None


def fixture_rows(path: Path) -> list[tuple[str, str, str, int, float, float]]:
    """(fixture, scope, where defined, set-ups, seconds in all, longest set-up), longest first."""
    acc: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            acc[(row["fixture"], row["scope"], row["defined_in"])].append(row["seconds"])
    rows = [(f, s, d, len(v), sum(v), max(v)) for (f, s, d), v in acc.items()]
    return sorted(rows, key=lambda r: -r[4])


def what_it_proves(nodeid: str) -> str:
    """The first sentence of the test function's docstring, or '' (read from the source, not
    imported)."""
    file, _, rest = nodeid.partition("::")
    name = rest.split("::")[-1].split("[")[0]
    try:
        tree = ast.parse((ROOT / file).read_text())
    except (OSError, SyntaxError):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            doc = " ".join((ast.get_docstring(node) or "").split())
            return doc.split(". ")[0][:160]
    return ""


def report(seconds: dict[str, float], fixtures: Path | None, top: int) -> None:
    per_file: dict[str, list[float]] = defaultdict(list)
    slowest_of: dict[str, tuple[float, str]] = {}
    for node, s in seconds.items():
        file = node.split("::")[0]
        per_file[file].append(s)
        if s > slowest_of.get(file, (-1.0, ""))[0]:
            slowest_of[file] = (s, node.split("::", 1)[1])
    total = sum(seconds.values())
    print(f"{len(seconds)} tests, {total:.0f} s of test time in all (summed over the workers)\n")
    print("per file (seconds, tests, the slowest):")
    for file, values in sorted(per_file.items(), key=lambda kv: -sum(kv[1]))[:top]:
        s, test = slowest_of[file]
        print(f"{sum(values):8.1f} {len(values):5d}  {file}  (slowest {s:.1f} s: {test[:70]!r})")
    if fixtures is not None:
        print("\nper fixture (set-ups, seconds in all, longest set-up, scope, where defined):")
        for f, scope, where, n, s, longest in fixture_rows(fixtures)[:top]:
            print(f"{s:8.1f} {n:5d} {longest:8.1f}  {f} ({scope}, {where})")
    print("\nslowest tests, with what each says it proves:")
    for node, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{s:8.1f}  {node.encode('unicode_escape').decode()}")
        proves = what_it_proves(node)
        if proves:
            print(f"          {proves}")


def write_durations(
    seconds: dict[str, float], path: Path, at_least: float, unlisted_at_most: float | None = None
) -> None:
    """tests/durations.json refreshed from one run: every test it ran of at least `at_least`
    seconds, the others as they were, and the group entries the file already holds (a group's name,
    a whole module's) as the sum of their tests in this run, so a group of many short tests is still
    placed by its whole time. `unlisted_at_most` (a log's slowest-N list): the run took at most that
    long for every test the list leaves out, so an older, longer figure of one is cut to it (a stale
    figure of 235 s placed a test that now takes 37 s among the first)."""
    sys.path.insert(0, str(ROOT))
    from tests.conftest import SERIAL_GROUPS

    old = json.loads(path.read_text()) if path.exists() else {}
    # the tests this run did not run keep their seconds (a run of a few files updates those)
    new = {k: v for k, v in old.items() if k not in seconds}
    if unlisted_at_most is not None:
        new = {k: (min(v, round(unlisted_at_most, 1)) if "::" in k else v) for k, v in new.items()}
    new.update({node: round(s, 1) for node, s in seconds.items() if s >= at_least})
    for key in old:
        if "::" in key:
            continue
        new[key] = old[key]
        modules = SERIAL_GROUPS.get(key, (key,))
        in_run = sum(s for n, s in seconds.items() if Path(n.split("::")[0]).stem in modules)
        if in_run:
            new[key] = round(in_run, 1)
    ordered = dict(sorted(new.items(), key=lambda kv: -kv[1]))
    # one entry a line, as the file is kept (a refresh's diff shows the tests that moved)
    body = ",\n".join(f"{json.dumps(k)}: {v}" for k, v in ordered.items())
    path.write_text("{\n" + body + "\n}\n")
    print(f"wrote {len(ordered)} entries to {path}")


def covered(path: Path) -> tuple[set[tuple[str, int]], set[tuple[str, int, int]]]:
    """The (file, line) and (file, from, to) branch arcs a `coverage json` report says ran."""
    files = json.loads(path.read_text())["files"]
    lines = {(f, n) for f, d in files.items() for n in d["executed_lines"]}
    arcs = {(f, a, b) for f, d in files.items() for a, b in d.get("executed_branches", [])}
    return lines, arcs


def coverage_kept(old: Path, new: Path) -> None:
    (old_lines, old_arcs), (new_lines, new_arcs) = covered(old), covered(new)
    lost_lines, lost_arcs = old_lines - new_lines, old_arcs - new_arcs
    print(f"old: {len(old_lines)} lines, {len(old_arcs)} branches of src/ covered ({old})")
    print(f"new: {len(new_lines)} lines, {len(new_arcs)} branches of src/ covered ({new})")
    print(f"covered by the old and not the new: {len(lost_lines)} lines, {len(lost_arcs)} branches")
    per_file: dict[str, list[int]] = defaultdict(list)
    for f, n in lost_lines:
        per_file[f].append(n)
    for f, ns in sorted(per_file.items(), key=lambda kv: -len(kv[1])):
        print(
            f"  {f}: lines {', '.join(map(str, sorted(ns)[:20]))}{' ...' if len(ns) > 20 else ''}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", nargs="?", type=Path, help="pytest --junitxml file")
    ap.add_argument("--durations-log", type=Path, help="a log with pytest's --durations lines")
    ap.add_argument("--fixtures", type=Path, help="the file of tests/conftest.py's --fixture-times")
    ap.add_argument("--top", type=int, default=30, help="rows per table (default 30)")
    ap.add_argument("--write-durations", type=Path, help="refresh tests/durations.json")
    ap.add_argument(
        "--at-least", type=float, default=2.0, help="--write-durations: tests of at least this (s)"
    )
    ap.add_argument(
        "--coverage-kept", nargs=2, type=Path, metavar=("OLD", "NEW"), help="see the docstring"
    )
    args = ap.parse_args()
    if args.coverage_kept:
        for given in args.coverage_kept:
            if not given.exists():
                sys.exit(f"suite_time: {given} does not exist; make it with `coverage json`")
        coverage_kept(*args.coverage_kept)
        return
    if args.junit is None and args.durations_log is None:
        ap.error("give a --junitxml file or --durations-log LOG (see --help)")
    for given in (args.junit, args.durations_log, args.fixtures):
        if given is not None and not given.exists():
            sys.exit(f"suite_time: {given} does not exist; make it with the commands in --help")
    seconds = from_junit(args.junit) if args.junit else from_durations_log(args.durations_log)
    if not seconds:
        sys.exit("suite_time: no test times found in the file given; see --help")
    report(seconds, args.fixtures, args.top)
    if args.write_durations:
        bound = shortest_listed(args.durations_log) if args.junit is None else None
        write_durations(seconds, args.write_durations, args.at_least, bound)


if __name__ == "__main__":
    main()
