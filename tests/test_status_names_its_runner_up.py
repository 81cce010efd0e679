"""A status says against what (issue 70: "Tables and text from one decision object").

A workload's line puts its ratio against a baseline beside its status: "rand-write-4k on rbd with 2
clients: 4.27× (3.40–5.35) QEMU's default · not told apart yet". The status is the pick's against
its runner-up, not the ratio's, so the line read as "a 4.27× ratio clear of 1 is not told apart".
The status names the runner-up ("· not told apart yet from rbd_cache_policy=writeback"), in the
first screen at every width and target, in --detail, in Markdown and in the HTML report alike.

The captured sweeps: the built-in ceph plan at 1, 2 and 4 clients, a ceph sweep without clients
(tests/data/answers), and a quickstart whose database:log line is 1.08× (1.02–1.14) QEMU's default
and tied (tests/data/quickstart-by-stratum)."""

from __future__ import annotations

import html
import re
import shutil
from functools import cache
from pathlib import Path

import pytest

from iomatrix.report.headline import UNSEPARATED, Headline, all_targets, headline
from iomatrix.report.html import render_report
from iomatrix.report.recommend import Recommendation, recommend
from iomatrix.report.screen import gain_text, headline_text
from iomatrix.store import Store
from tests.conftest import DATA

SWEEPS = {
    "ceph-clients": DATA / "answers" / "ceph-clients.sqlite",
    "ceph-flush-trap": DATA / "answers" / "ceph-flush-trap.sqlite",
    "quickstart-by-stratum": DATA / "quickstart-by-stratum" / "sweep.sqlite",
}


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each captured sweep copied (a report may migrate the database)."""
    root = tmp_path_factory.mktemp("statuses")
    out = {}
    for name, path in SWEEPS.items():
        out[name] = root / f"{name}.sqlite"
        shutil.copy(path, out[name])
    return out


@cache
def _recommendation(db: Path) -> Recommendation:
    store = Store.open_existing(db)
    try:
        return recommend(store, store.sweep_ids()[-1])
    finally:
        store.close()


def _beside_a_ratio(head: Headline) -> list[str]:
    """The ratio texts of the workload lines whose status is a pick not told apart and whose ratio
    is against another cell (beside "1.00×: it is QEMU's default" no other cell's ratio stands)."""
    return [
        gain_text(wg, p.cell)
        for p in head.picks
        for wg in p.gains
        if wg.status in UNSEPARATED
        and wg.gain is not None
        and wg.gain.label != p.cell
        and wg.gain.ratio is not None
    ]


def _says_from_what(text: str, ratios: list[str], where: str, said: bool = True) -> None:
    """Each status beside one of `ratios` in `text` names the runner-up; `said`: each ratio has
    one (a crowded first screen says "Use for now, the tie-break's pick" once above its lines, and
    none beside them)."""
    flat = " ".join(html.unescape(text).split())
    for ratio in ratios:
        found = [m.end() for m in re.finditer(re.escape(f"{ratio} · not told apart"), flat)]
        assert found or not said, f"{where}: no status beside {ratio!r}:\n{flat}"
        for end in found:
            assert flat[end:].startswith((" from ", " yet from ")), (
                f"{where}: the status beside {ratio!r} does not say against what: "
                f"{flat[end - len(ratio) - 20 : end + 60]!r}"
            )


@pytest.mark.parametrize("sweep", list(SWEEPS))
def test_a_status_beside_a_ratio_names_the_runner_up(sweep: str, copies: dict[str, Path]) -> None:
    rec = _recommendation(copies[sweep])
    targets = all_targets() if sweep == "ceph-clients" else ("libvirt", "proxmox", "nova")
    checked = 0
    for target in targets:
        head = headline(rec, "vm", target)
        ratios = _beside_a_ratio(head)
        checked += len(ratios)
        for width in (80, 100, 160):
            screen = headline_text(head, width)
            _says_from_what(screen, ratios, f"{target} at {width}", said=False)
        _says_from_what(headline_text(head, 100, fit=False), ratios, f"{target} --detail")
        _says_from_what(headline_text(head, 100, markdown=True), ratios, f"{target} Markdown")
    # the lines issue 70 quotes, and one each of the other sweeps, are among those checked
    assert checked, sweep
    store = Store.open_existing(copies[sweep])
    try:
        page = render_report(store, store.sweep_ids()[-1])
    finally:
        store.close()
    answer = re.sub(r"<[^>]+>", " ", page[page.index('id="answer"') : page.index('id="ranking"')])
    _says_from_what(answer, _beside_a_ratio(headline(rec, "vm")), "HTML")


def test_the_ceph_lines_name_the_policy_they_were_not_told_apart_from(
    copies: dict[str, Path],
) -> None:
    """The issue's line, as --detail now writes it: the runner-up by what tells it from the pick
    (cache=writeback · rbd_cache_policy=writearound · rbd_cache_writethrough_until_flush=off against
    the same with rbd_cache_policy=writeback)."""
    head = headline(_recommendation(copies["ceph-clients"]), "vm")
    flat = " ".join(headline_text(head, 100, fit=False).split())
    assert (
        "rand-write-4k on rbd with 2 clients: 4.27× (3.40–5.35) QEMU's default · not told apart "
        "yet from rbd_cache_policy=writeback"
    ) in flat, flat
