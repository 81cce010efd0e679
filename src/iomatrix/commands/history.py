"""`iomatrix history`: each host's answer and figures sweep by sweep, with the versions that changed
in between and the changes the statistics call real (report/history.py)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from iomatrix.commands.common import open_store
from iomatrix.commands.options import DEFAULT_DB, ReadDbOpt, format_option
from iomatrix.commands.thresholds import parse_fraction
from iomatrix.report.formats import OutputFormat
from iomatrix.ui import console, fmt

NAME = "history"


def history(
    db: ReadDbOpt = DEFAULT_DB,
    host: Annotated[
        str | None, typer.Option("--host", help="Only this host (inventory name or hostname).")
    ] = None,
    workload: Annotated[str | None, typer.Option("--workload", help="Only this workload.")] = None,
    metric: Annotated[
        str | None, typer.Option("--metric", help="Metric (default: each workload's primary).")
    ] = None,
    threshold: Annotated[
        str,
        typer.Option(
            "--threshold",
            help="Flag a change only when significant and larger than this (e.g. 5%).",
        ),
    ] = "5%",
    output: format_option(OutputFormat.table, OutputFormat.json) = OutputFormat.table,  # type: ignore[valid-type]
) -> None:
    """Each host's answer sweep by sweep: the best configuration per workload and its figure, the
    versions that changed since the host's previous sweep of the plan (kernel, QEMU, fio, OS), and
    the figures significantly slower or faster by more than --threshold (Welch per figure, Holm
    across them, as 'compare --fail-above'), and the lasting steps over each host's whole series (a
    level that moved and held for two sweeps or more)."""
    theta = parse_fraction(threshold, "--threshold")
    store = open_store(db)  # before the reports: a missing --db is refused at once
    from iomatrix.report.history import as_json
    from iomatrix.report.history import history as host_history

    steps = host_history(store, host, workload, metric, theta)
    if output == OutputFormat.json:
        print(json.dumps(as_json(steps), indent=1))
        return
    last = None
    for s in steps:
        if s.host != last:
            _say(s.host, style="bold")
            last = s.host
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.started_at))
        _say(f"  {when} sweep {s.sweep_id} ({s.plan}){'' if s.answers else ': no figures'}")
        names = s.short_names()
        if s.answers and names.constant_text():
            for line in _packed("    every cell: ", names.constant_text().split(), sep=" "):
                _say(line)
        for w, (cell, mean, metric) in sorted(s.answers.items()):
            one_line = f"    {w}: {names.of(cell)}, {fmt(mean)} {metric}"
            if len(one_line) <= WIDTH:
                _say(one_line)
            else:
                _say_fitted(f"    {w}: {fmt(mean)} {metric} in", names.of(cell))
        if s.versions_changed:
            for line in _packed("    changed: ", s.versions_changed):
                _say(line)
        for word, changes in (("slower", s.slower), ("faster", s.faster)):
            for c in changes[:5]:
                _say_fitted(
                    f"    {word}: {names.rename(c.key)}",
                    f"{fmt(c.a.mean)} → {fmt(c.b.mean)} "
                    f"(×{c.ratio.ratio:.3g}, Holm p={c.p_adjusted:.2g})",
                )
        for key, st, p in s.lasting[:5]:
            _say_fitted(
                f"    lasting step from here: {names.rename(key)}",
                f"{fmt(st.before)} → {fmt(st.after)} (×{st.ratio:.3g} over "
                f"{st.sweeps_before} sweeps before and {st.sweeps_after} from here, "
                f"Holm p={p:.2g})",
            )
        if s.compared and not (s.slower or s.faster):
            _say(f"    no real change in {s.compared} figure(s) (threshold {theta:.0%})")


# One line a fact, each at most this wide, whether or not stdout is a terminal: layout keeps the
# lines short (a sweep's figures one a line, a long fact's figures on the next line), so nothing is
# hard-wrapped mid-word and a pipe gets the same lines as the screen.
WIDTH = 100


def _say(text: str, style: str | None = None) -> None:
    # host names, cell names and versions are printed as written: no markup, no highlighting
    console.print(text, style=style, soft_wrap=True, highlight=False, markup=False, emoji=False)


def _say_fitted(head: str, tail: str) -> None:
    """`head tail` on one line where it fits WIDTH, else the tail below, indented, broken only
    between the ' · ' parts of a cell name where it is still too long."""
    if len(head) + 1 + len(tail) <= WIDTH:
        _say(f"{head} {tail}")
        return
    _say(head)
    for line in _packed(" " * (len(head) - len(head.lstrip()) + 2), tail.split(" · "), sep=" ·"):
        _say(line)


def _packed(head: str, items: list[str], sep: str = ",") -> list[str]:
    """`head` and the items joined by `sep` and a space, packed into lines of at most WIDTH (an item
    longer than a line gets a line of its own, whole), continuation lines indented under the first
    item."""
    lines, line = [], head
    indent = " " * len(head)
    for i, item in enumerate(items):
        piece = item + (sep.strip() and sep if i < len(items) - 1 else "")
        if line not in (head, indent) and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = indent
        line += piece if line in (head, indent) else f" {piece}"
    lines.append(line)
    return lines


def register(app: typer.Typer) -> None:
    app.command(NAME)(history)
