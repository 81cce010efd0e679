"""The roles a plan runs, and the margin of practical equivalence and threshold each workload is
decided at (its role's, or the plan's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from iomatrix.domain import did_you_mean
from iomatrix.roles.profile import DEFAULT_MARGIN, Role, builtin, builtin_names, custom_role

__all__ = [
    "decided_at",
    "job_margins",
    "plan_margins",
    "plan_roles",
    "resolve_roles",
]


def resolve_roles(
    names: Sequence[str], custom: Mapping[str, Any], margin: float | None = None
) -> list[Role]:
    """The roles a plan names, built in or its own tables; ValueError with a did-you-mean for an
    unknown one. ``margin``: the plan's margin (its key `margin`, or run/recommend --margin), which
    replaces a built-in role's and is a role table's when the table gives none; a table's own
    `margin` is that role's."""
    out = []
    for n in names:
        if n in custom:
            out.append(custom_role(n, custom[n], DEFAULT_MARGIN if margin is None else margin))
        elif (b := builtin(n)) is not None:
            out.append(b if margin is None else replace(b, margin=margin))
        else:
            known = [*builtin_names(), *custom]
            raise ValueError(
                f"unknown role '{str(n)[:40]}'{did_you_mean(n, known)} (roles: {', '.join(known)}, "
                "or a [role.NAME] table of your own: docs/roles.md)"
            )
    return out


def plan_roles(
    names: Sequence[str], custom: Mapping[str, Any], margin: float | None = None
) -> list[Role]:
    """The roles a (validated) plan runs: those it names, then its role tables it does not name
    (``margin``: as for resolve_roles)."""
    return resolve_roles([*names, *(n for n in custom if n not in names)], custom, margin)


def job_margins(roles: Sequence[Role]) -> dict[str, float]:
    """workload → the margin of practical equivalence its decision uses: its role's. A job file two
    roles share gets the smaller margin: equivalent within it is equivalent within the larger one
    too, never the reverse."""
    out: dict[str, float] = {}
    for r in roles:
        for w in r.workload_names():
            out[w] = min(out.get(w, r.margin), r.margin)
    return out


def plan_margins(
    definition: Mapping[str, Any], margin: float | None = None
) -> tuple[float, dict[str, float]]:
    """(the margin of practical equivalence of a workload no role runs, workload → its role's
    margin) for a plan's
    (stored) definition; ``margin`` (recommend --margin) in place of the plan's own key `margin`.

    Example: roles = ["database"], no margin anywhere: (0.05, {"database:data": 0.05,
        "database:log": 0.05});
    with margin = 0.1: 0.1 for all three; a [role.my-db] table with margin = 0.02 keeps 0.02 for its
    jobs."""
    chosen = definition.get("margin") if margin is None else margin
    roles = plan_roles(definition.get("roles") or [], definition.get("role") or {}, chosen)
    return (DEFAULT_MARGIN if chosen is None else float(chosen)), job_margins(roles)


def decided_at(
    workload: str, margins: Mapping[str, float], default_margin: float, threshold: float
) -> tuple[float, float]:
    """(threshold θ, margin of practical equivalence) a workload is decided at, from
    `plan_margins`: a role's job at its role's margin for both, since the margin is the difference
    its role says is not worth choosing on (cells within it are tied; a TOST within it shows them
    equivalent); any other workload at the plan's `threshold` and the default margin. One rule for
    the race (sweep/units.py), `rank` and `recommend`.

    Example: margins {"file-server:files": 0.1}, default 0.05, threshold 0.05: the file server's job
    (0.1, 0.1), rand-read-4k (0.05, 0.05)."""
    if workload in margins:
        return margins[workload], margins[workload]
    return threshold, default_margin
