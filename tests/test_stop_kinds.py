"""Stop kinds travel with the scheduler's decision (never parsed from its sentence), and reports
group by them."""

from __future__ import annotations

import pytest

from iomatrix.report.quality import notes
from iomatrix.scheduler import RACE_NOT_SEPARABLE, StopVerdict, race_over, race_verdict
from iomatrix.stop_kinds import StopKind


def test_racing_decisions_carry_their_kind() -> None:
    assert race_verdict("eliminated", "significantly worse than a by 38%") == StopVerdict(
        StopKind.ELIMINATED, "eliminated: significantly worse than a by 38%"
    )
    assert race_verdict("equivalent", "equivalent to a: ratio 0.99").kind is StopKind.EQUIVALENT
    assert race_verdict(
        "futile", "not separable from a within the budget: 9% behind"
    ) == StopVerdict(StopKind.UNRESOLVED, "not separable from a within the budget: 9% behind")
    with pytest.raises(KeyError):
        race_verdict("keep", "current best")  # a unit still racing has no stop


def test_a_race_ends_settled_unless_only_unseparable_contenders_were_left() -> None:
    assert race_over("one best left", "a") == StopVerdict(
        StopKind.SETTLED, "race over: one best left (a best)"
    )
    assert race_over("stable tied group", None) == StopVerdict(
        StopKind.SETTLED, "race over: stable tied group"
    )
    assert race_over(RACE_NOT_SEPARABLE, "a") == StopVerdict(
        StopKind.UNRESOLVED, "race over: not separable within the budget (a best)"
    )


def test_a_decided_unit_keeps_its_kind_after_the_precision_runs() -> None:
    v = StopVerdict(StopKind.MAX_RUNS, "max runs reached").then(
        "then run on toward ±5%: CI within ±5% after 9 runs"
    )
    assert v == StopVerdict(
        StopKind.MAX_RUNS, "max runs reached; then run on toward ±5%: CI within ±5% after 9 runs"
    )


@pytest.mark.parametrize("kind", list(StopKind))
def test_results_flag_every_stop_but_the_answers(kind: StopKind) -> None:
    # The sentence is the same for every kind: only the kind decides (an old sentence could say
    # anything). from the store (the enum) or from a results JSON document (a string)
    for stored in (kind, str(kind)):
        flagged = notes({"stop": {"kind": stored, "round": 4, "reason": "converged"}})
        answer = kind in (StopKind.CONVERGED, StopKind.SETTLED, StopKind.EQUIVALENT)
        assert flagged == ([] if answer else ["stopped after round 4: converged"])
