"""The number of clients on one backend is a condition, not a choice (issue 70): the answers a
workload gets at 1, 2 and 4 clients on one Ceph cluster are chosen as one configuration for that
backing, each client count's line saying how it holds there, not one pick per client count."""

from __future__ import annotations

import pytest

from iomatrix.report.one_config import Decision, one_config
from iomatrix.report.per_backing import answered_on, configuration_group


@pytest.mark.parametrize(
    ("rtt", "clients", "group"),
    [
        (None, "1", "rbd"),
        (None, "4", "rbd"),
        ("2ms", "2", "rbd at rtt=2ms"),
        ("2ms", None, "rbd at rtt=2ms"),
        (None, None, "rbd"),
    ],
)
def test_the_configuration_group_is_the_backing_whatever_the_client_count(
    rtt: str | None, clients: str | None, group: str
) -> None:
    name = answered_on("rand-write-4k", "rbd", rtt, clients)
    assert configuration_group("rand-write-4k", name) == group
    assert configuration_group("rand-write-4k", None) == ""


def test_client_counts_tied_on_different_picks_get_one_configuration() -> None:
    # the ceph plan's shape: writeback the tie-break's pick at 1 and 2 clients, none at 4, none of
    # them told apart from the other
    wb, none = "raw · writeback", "raw · none"
    picks = {"1": (wb, none), "2": (wb, none), "4": (none, wb)}
    decisions = [
        Decision(
            answered_on("rand-write-4k", "rbd", None, n),
            configuration_group("rand-write-4k", answered_on("rand-write-4k", "rbd", None, n)),
            cell,
            "provisional",
            (other,),
        )
        for n, (cell, other) in picks.items()
    ]
    [config] = one_config(decisions)
    assert config.kind == "one" and config.cells == (wb,), config
    assert set(config.assigned) == {d.workload for d in decisions}


def test_client_counts_each_settled_on_its_own_pick_are_a_trade_off_named_once() -> None:
    wb, none = "raw · writeback", "raw · none"
    decisions = [
        Decision(answered_on("w", "rbd", None, n), "rbd", cell, "answer")
        for n, cell in (("1", wb), ("4", none))
    ]
    [config] = one_config(decisions)
    assert config.kind == "trade-off" and set(config.cells) == {wb, none}, config
