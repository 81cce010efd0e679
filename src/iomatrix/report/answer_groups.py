"""The configurations a sweep's answers name, grouped (issue 49, issue 70): which cell labels the
answer names (verdict_labels, answer_names), the one configuration per backing group the workloads
share (group_configs, over report/one_config.py) and the line for a group whose answers stay apart
(trade_off_lines). A number of clients on one backend is a condition, not part of a configuration:
where the answers are per client count, cells are compared and named without it
(report/per_backing.py's configuration)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from iomatrix.report.naming import CellNames, cell_names, names_without
from iomatrix.report.one_config import Decision, GroupConfig, one_config
from iomatrix.report.per_backing import CLIENTS, client_count, configuration
from iomatrix.report.recommend import Verdict, answer_of


def verdict_labels(v: Verdict) -> list[str]:
    """Every cell label a verdict names (its choice or the tie-break's pick, the cells tied with it,
    the cells compared with it): what short names are chosen among."""
    shown = v if v.choice is not None else v.provisional
    if shown is None or shown.choice is None:
        return []
    return [
        shown.choice.cell,
        *shown.choice.tied,
        *(g.label for g in (*shown.gains, *shown.alternatives) if g.label),
        *([shown.declined.cell] if shown.declined is not None else []),
    ]


def per_client_count(verdicts: Sequence[Verdict]) -> bool:
    """Some verdict answers at one number of clients on its backend (per_backing.answered_on)."""
    return any(client_count(v.workload) for v in verdicts)


def answer_names(verdicts: Sequence[Verdict]) -> CellNames:
    """The short names of every cell the verdicts name (verdict_labels); without the number of
    clients where they answer per client count, a condition their names say (issue 70)."""
    labels = [c for v in verdicts for c in verdict_labels(v)]
    return names_without(labels, CLIENTS) if per_client_count(verdicts) else cell_names(labels)


def same_label(label: str) -> str:
    """A cell's label as the configuration it stands for, where no condition is dropped."""
    return label


def configuration_of(label: str) -> str:
    """A cell's label without its number of clients (per_backing.configuration)."""
    return configuration(label) or label


def group_configs(
    ranked: list[Verdict], of: Callable[[str], str] = same_label
) -> dict[str, GroupConfig]:
    """Each per-backing workload's group configuration (report/one_config.py), by workload;
    workloads answered across the backings (no group) are left out: their answers are each VM's
    own. `of`: the configuration a cell's label stands for (configuration_of: the same settings at
    every number of clients are one), which the decisions compare."""
    decisions = []
    for v in ranked:
        found = answer_of(v)
        if found is None or not v.group or found[0].choice is None:
            continue
        choice = found[0].choice
        tied = tuple(of(t) for t in choice.tied)
        decisions.append(Decision(v.workload, v.group, of(choice.cell), found[1], tied))
    return {w: c for c in one_config(decisions) for w in c.assigned}


def trade_off_lines(configs: list[GroupConfig], names: CellNames) -> list[str]:
    """One line per group whose answers stay apart: each configuration with the workloads it is
    answered for."""
    out = []
    for c in configs:
        each = "; ".join(
            f"{names.of(cell)} for {', '.join(w for w, x in c.assigned.items() if x == cell)}"
            for cell in c.cells
        )
        if c.kind == "trade-off":
            out.append(
                f"on {c.group}, a trade-off: {each}: each is significantly better on its "
                "own workloads, and "
                "one disk on its storage takes one configuration: choose by the workload "
                "that matters more"
            )
        else:
            out.append(
                f"on {c.group}, the answers differ ({each}) and are not settled enough "
                "to tell whether one "
                "configuration serves them all: more time would"
            )
    return out
