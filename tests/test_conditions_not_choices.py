"""The number of clients on one backend is a condition, not a choice (issue 70): the answers a
workload gets at 1, 2 and 4 clients on one Ceph cluster are chosen as one configuration for that
backing, each client count's line saying how it holds there, not one pick per client count."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from iomatrix.domain import BASELINES, axes
from iomatrix.domain.clients import in_words as clients_words
from iomatrix.protocols.rbd import Rbd
from iomatrix.report.flush_gate import WritebackGain, trap_finding
from iomatrix.report.headline import all_targets, headline
from iomatrix.report.html import render_report
from iomatrix.report.naming import names_without
from iomatrix.report.one_config import Decision, one_config
from iomatrix.report.per_backing import (
    answered_on,
    client_count,
    configuration,
    configuration_group,
)
from iomatrix.report.recommend import Recommendation, recommend
from iomatrix.report.render import render_recommendation
from iomatrix.report.screen import headline_text
from iomatrix.stats.compare import RatioCI
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
def ceph_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the built-in ceph plan's sweep at 1, 2 and 4 clients
    (tests/data/answers/ceph-clients.md): a report may migrate the database."""
    db = tmp_path_factory.mktemp("ceph-clients") / "ceph-clients.sqlite"
    shutil.copy(DATA / "answers" / "ceph-clients.sqlite", db)
    return db


@pytest.fixture(scope="module")
def ceph_clients(ceph_db: Path) -> Recommendation:
    """The ceph sweep's recommendation."""
    store = Store.open_existing(ceph_db)
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
        assert "clients=" not in flat, text
        assert flat.count(f"{pick.verb}: {pick.name}") == 1, text


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


# A number of clients written as a setting ("clients=4", "with clients=1:"), which a user copies
CLIENTS_AS_SETTING = re.compile(r"\bclients=\d")


def _html_answer(db: Path, target: str) -> str:
    """The HTML report's answer and recommendation sections as text (its tags dropped): up to its
    rankings, whose rows are the measured cells and the runs' cell ids."""
    store = Store.open_existing(db)
    try:
        page = render_report(store, store.sweep_ids()[-1], target=target)
    finally:
        store.close()
    part = page[page.index('id="answer"') : page.index('id="ranking"')]
    return re.sub(r"<[^>]+>", " ", part)


@pytest.mark.parametrize("target", all_targets())
def test_no_rendered_answer_names_the_client_count_as_a_setting(
    target: str, ceph_clients: Recommendation, ceph_db: Path
) -> None:
    """Issue 70: the first screen at 80, 100 and 160 columns, --detail, Markdown, the JSON's
    headline and findings, and the HTML report's answer say the number of clients in words ("with 4
    clients", "measured with 4 clients sharing the backend"), never as "clients=4": the finding said
    "with clients=1:", --detail's "snippets assume bus (not swept): … clients=4" and its note
    "clients=4 was the number of clients …". JSON fields may keep the count as data (a measured
    cell's label)."""
    head = headline(ceph_clients, "vm", target)
    said = {f"first screen at {w}": headline_text(head, w) for w in (80, 100, 160)}
    for form in ("table", "markdown"):
        for detail in (False, True):
            said[f"{form} detail={detail}"] = render_recommendation(
                ceph_clients, form, headline=head, detail=detail, width=100
            )
    doc = json.loads(render_recommendation(ceph_clients, "json", headline=head))
    said["json headline"] = json.dumps(doc["headline"], ensure_ascii=False)
    said["json findings"] = json.dumps(doc["findings"], ensure_ascii=False)
    said["html"] = _html_answer(ceph_db, target)
    for where, text in said.items():
        assert not CLIENTS_AS_SETTING.search(text), f"{where}:\n{text}"
    # the snippet's note says the condition it was measured under, in words (virt-install has no
    # snippet for a Ceph disk: its note says to use the libvirt XML)
    detail = " ".join(said["table detail=True"].split())
    if target in ("libvirt", "proxmox", "nova"):
        assert "measured with 4 clients sharing the backend" in detail, detail


def test_the_ceph_finding_names_the_client_counts_it_holds_at_in_words(
    ceph_clients: Recommendation,
) -> None:
    """The captured sweep shows librbd's writethrough-until-flush under Ceph's default policy at 1
    and 4 clients (writeback no faster than cache=none on the workload that never flushes, much
    faster with it off); at 2 clients writeback was 1.09× (1.01–1.19) there, a gain the rule's "no
    faster" does not hold: the finding says so rather than picking one count (it said "with
    clients=1:")."""
    forms = {
        "brief": ceph_clients.brief_findings,
        "first screen": ceph_clients.first_findings or [],
        "detail": ceph_clients.findings,
    }
    for form, found in forms.items():
        [finding] = [f for f in found if "librbd" in f]
        assert finding.startswith("at 1 and 4 clients on the backend, librbd "), (form, finding)
        assert "not shown at 2 clients" in finding or (
            "At 2 clients the figures do not show it" in finding and "1.09× (1.01–1.19)" in finding
        ), (form, finding)
    # each count's own figures in --detail: the non-flushing workload at 1 and at 4 clients
    detail = " ".join(ceph_clients.findings[0].split())
    assert "with 1 client, on rand-write-4k" in detail, detail
    assert "With 4 clients, on rand-write-4k" in detail, detail


GATE = Rbd.flush_gated_cache


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        (["1"], "1 client"),
        (["4"], "4 clients"),
        (["4", "1"], "1 and 4 clients"),
        (["2", "1", "4"], "1, 2 and 4 clients"),
    ],
)
def test_client_counts_in_words(counts: list[str], words: str) -> None:
    assert clients_words(counts) == words


def test_a_finding_shown_at_every_count_says_so_once() -> None:
    """The trap shown at 1, 2 and 4 clients: one sentence "at 1, 2 and 4 clients on the backend",
    no count left out, none written as a setting."""
    assert GATE is not None
    gains = [
        WritebackGain(w, flushes, "writearound", until, RatioCI(*r), (("clients", n),))
        for n in ("1", "2", "4")
        for w, flushes, until, r in (
            ("rand-write-4k", False, "on", (1.0, 0.8, 1.2)),
            ("rand-write-4k-flush32", True, "on", (3.0, 2.5, 3.5)),
        )
    ]
    for short, brief in ((False, False), (True, False), (True, True)):
        text = trap_finding(gains, 0.05, GATE, short, brief)
        assert text is not None and text.startswith("at 1, 2 and 4 clients on the backend, ")
        assert "clients=" not in text and "do not show" not in text and "not shown" not in text
