"""The number of clients on one backend is a condition, not a choice (issue 70): the answers a
workload gets at 1, 2 and 4 clients on one Ceph cluster are chosen as one configuration for that
backing, each client count's line saying how it holds there, not one pick per client count."""

from __future__ import annotations

import shutil

import pytest

from iomatrix.domain import BASELINES, axes
from iomatrix.report.headline import all_targets, headline
from iomatrix.report.naming import names_without
from iomatrix.report.one_config import Decision, one_config
from iomatrix.report.per_backing import (
    answered_on,
    client_count,
    configuration,
    configuration_group,
)
from iomatrix.report.recommend import Recommendation, recommend
from iomatrix.report.screen import headline_text
from iomatrix.store import Store
from tests.conftest import DATA


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


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("rand-write-4k on rbd with 2 clients", "2"),
        ("rand-write-4k on rbd with 1 client", "1"),
        ("rand-write-4k on iscsi at rtt=2ms with 4 clients", "4"),
        ("randwrite on iscsi", None),
        ("randwrite on iscsi at rtt=2ms", None),
        ("file:with 2 jobs on nfs", None),
    ],
)
def test_the_client_count_is_read_from_the_answers_name(name: str, count: str | None) -> None:
    assert client_count(name) == count


def test_a_configuration_is_its_cells_label_without_the_client_count() -> None:
    four = "format=raw cache=none aio=threads backing=rbd clients=4 rbd_cache_policy=writeback"
    one = "format=raw cache=none aio=threads backing=rbd rbd_cache_policy=writeback"
    assert configuration(four) == one
    assert configuration(one) == one
    assert configuration(None) is None


def test_cells_at_every_client_count_are_named_as_their_one_configuration() -> None:
    labels = [
        "format=raw cache=writeback backing=rbd",
        "format=raw cache=writeback backing=rbd clients=2",
        "format=raw cache=none backing=rbd clients=2",
    ]
    names = names_without(labels, "clients")
    assert names.of(labels[0]) == names.of(labels[1]) == "writeback"
    assert names.of(labels[2]) == "cache=none"
    assert "clients" not in names.varying
    assert names.rename(f"{labels[1]} over {labels[2]}") == "writeback over cache=none"


@pytest.fixture(scope="module")
def ceph_clients(tmp_path_factory: pytest.TempPathFactory) -> Recommendation:
    """The built-in ceph plan's sweep at 1, 2 and 4 clients (tests/data/answers/ceph-clients.md),
    recommended from a copy (a report may migrate the database)."""
    db = tmp_path_factory.mktemp("ceph-clients") / "ceph-clients.sqlite"
    shutil.copy(DATA / "answers" / "ceph-clients.sqlite", db)
    store = Store.open_existing(db)
    try:
        return recommend(store, store.sweep_ids()[-1])
    finally:
        store.close()


@pytest.mark.parametrize("target", all_targets())
def test_the_ceph_plans_answer_names_its_configurations_without_clients(
    target: str, ceph_clients: Recommendation
) -> None:
    """Issue 70: the captured ceph sweep's answers at 1, 2 and 4 clients tie the same cache and
    librbd settings: one configuration, named without "clients=", with a line per client count
    under it saying how it holds there; no trade-off line; no configuration named on the first
    screen (its "Use" line, its "vs" lines, a trade-off) with a client count."""
    head = headline(ceph_clients, "vm", target)
    answers = {v.workload for v in ceph_clients.verdicts if client_count(v.workload)}
    assert {client_count(w) for w in answers} == {"1", "2", "4"}, answers
    assert len(head.picks) == 1, [p.name for p in head.picks]
    [pick] = head.picks
    assert {wg.workload for wg in pick.gains} == answers
    assert not head.trade_offs, head.trade_offs
    named = [pick.name, pick.cell, *(a.against for wg in pick.gains for a in wg.alternatives)]
    assert not [n for n in named if "clients=" in n], named
    for width in (80, 100, 160):
        text = headline_text(head, width)
        flat = " ".join(text.split())
        # the one finding names the client count it holds at ("with clients=1: librbd is …"):
        # a condition of the finding, not a configuration
        said = flat.replace("finding: with clients=1:", "finding:")
        assert "clients=" not in said, text
        assert said.count(f"{pick.verb}: {pick.name}") == 1, text


def test_a_cells_twin_at_qemus_defaults_runs_at_its_own_client_count_and_rtt() -> None:
    cell = {
        "format": "raw",
        "cache": "none",
        "aio": "threads",
        "backing": "rbd",
        "rtt": "2ms",
        "clients": "4",
        "rbd_cache_writethrough_until_flush": "off",
    }
    twin = axes.baseline_values(cell, BASELINES[0])
    assert (twin["clients"], twin["rtt"]) == ("4", "2ms"), twin
    assert twin["rbd_cache_writethrough_until_flush"] == "on", twin
    assert "clients" not in axes.later_at_default(cell)


def test_every_client_counts_line_has_its_ratio_to_qemus_default(
    ceph_clients: Recommendation,
) -> None:
    """The ceph sweep measured QEMU's default at 1, 2 and 4 clients: each count's answer quotes
    it (at 2 and 4 it said "not in this sweep", its twin looked for at 1 client)."""
    head = headline(ceph_clients, "vm")
    own = [
        wg
        for p in head.picks
        for wg in p.gains
        if wg.status not in ("joined", "joined-provisional")
    ]
    assert {client_count(wg.workload) for wg in own} == {"1", "2", "4"}, own
    for wg in own:
        assert wg.gain is not None and wg.gain.ratio is not None, wg
        assert wg.gain.ratio.ratio is not None and wg.against == "QEMU's default", wg
