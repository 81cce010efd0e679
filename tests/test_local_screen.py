"""A local sweep's answer on one screen (issue 49): the golden sweep (tests/data/golden: three
workloads, a TCG warning, a basis and a page-cache finding; 34 lines at 100 columns before) and a
real quickstart sweep of the `quick` plan with its roles (tests/data/answers/quick-roles.sqlite: a
database and a file server answered by two configurations; 58 lines at 100 columns and 65 at 80
before, raw fio output emptied to keep the file small) fit 30 lines at 100 and at 80 columns, in
`recommend` and at the end of `run`, for the default target and the platforms' (`--target
proxmox`, `nova`): no line wider, no number split, each role's decision in one line, each
configuration's snippet once. Nothing is lost: `recommend --detail` holds every role's whole
answer and every configuration's whole snippet, and the screen says so."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from iomatrix.report.headline import DEFAULT_TARGET, Headline, headline
from iomatrix.report.recommend import Recommendation, recommend
from iomatrix.store import Store
from tests.conftest import DATA
from tests.test_shared_storage_screen import _cli, _fits, _run_end

SWEEPS = {
    "golden": DATA / "golden" / "quick-sweep.sqlite",
    "quick-roles": DATA / "answers" / "quick-roles.sqlite",
}


@pytest.fixture(scope="module", params=sorted(SWEEPS))
def local(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("local") / f"{request.param}.sqlite"
    shutil.copy(SWEEPS[request.param], copy)  # a report may migrate it: never the stored file
    return copy


# Each screen and each answer is rendered once per sweep, and every test that reads it asserts on
# that one rendering: the tests ask the same questions of it (a CLI process and a recommendation of
# its own per test was most of this file's time). Keyed by the module's copy of the sweep, so no
# other module's file is ever answered from here.
@functools.cache
def _recommendation(db: Path) -> Recommendation:
    store = Store.open_existing(db)
    try:
        return recommend(store, 1)
    finally:
        store.close()


@functools.cache
def _headline(db: Path, target: str) -> Headline:
    return headline(_recommendation(db), "vm", target)


@functools.cache
def _screen(db: Path, columns: int, target: str, *args: str) -> tuple[str, ...]:
    """`recommend`'s lines at `columns` for `target`: the default target's as a user gets it, with
    no --target, the platforms' with theirs."""
    given = () if target == DEFAULT_TARGET else ("--target", target)
    return tuple(_cli(db, columns, *given, *args))


@pytest.mark.parametrize("target", ["libvirt", "proxmox", "nova"])
@pytest.mark.parametrize("columns", [100, 80])
def test_a_local_answer_fits_one_screen_and_loses_nothing(
    local: Path, columns: int, target: str
) -> None:
    h = _headline(local, target)
    assert len({p.cell for p in h.picks}) >= 1
    detail = "\n".join(_screen(local, columns, target, "--detail"))
    for lines in (list(_screen(local, columns, target)), _run_end(local, columns, target)):
        _fits(lines, columns)
        text = "\n".join(lines)
        joined = " ".join(text.split())
        # the findings first, then one line per role's decision, then the configurations
        first = next(i for i, x in enumerate(lines) if x.startswith(("Use: ", "Use for now")))
        assert all(i < first for i, x in enumerate(lines) if x.startswith("finding: "))
        for r in h.roles:
            assert any(x.startswith(f"For {r['answer_for']}: ") for x in lines[:first]), r
        # each configuration named once and its settings on the screen
        for p in h.picks:
            assert sum(x.endswith(f": {p.name}") for x in lines) == 1, (p.name, text)
            assert p.snippet is not None and p.snippet.text is not None
        assert "more: iomatrix recommend --detail" in joined
    # nothing lost: --detail holds each role's whole answer and each configuration's whole snippet
    flat = _flat(detail)
    for r in h.roles:
        assert _flat(r["text"]) in flat, r["text"]
    for p in h.picks:
        assert p.snippet is not None and p.snippet.text is not None
        assert _flat(p.snippet.text) in flat, p.snippet.text


def _flat(text: str) -> str:
    """`text` as XML and the shell read it: lines broken between attributes or words (and a shell
    word's backslash continuations) joined."""
    return " ".join(text.replace("\\\n", "").split())


def test_the_libvirt_screen_keeps_what_each_configuration_sets(local: Path) -> None:
    """Where the screen has no room for a configuration's whole <disk>, its <driver> (the format,
    the cache mode and every option the answer sets) stands there in one element, saying where it
    goes: the <disk>'s <driver> in `virsh edit VM` (a bare <driver> left the reader to guess)."""
    h = _headline(local, "libvirt")
    shown: list[bool] = []
    for columns in (100, 80):
        joined = " ".join(" ".join(_screen(local, columns, DEFAULT_TARGET)).split())
        for p in h.picks:
            assert p.snippet is not None and p.snippet.text is not None
            driver = next(x.strip() for x in p.snippet.text.splitlines() if "<driver" in x)
            assert driver in joined, (driver, joined)
            whole = "virsh edit VM: replace the <disk> element" in joined
            assert whole or f"libvirt (virsh edit VM, the <disk>'s <driver>): {driver}" in joined
        # the short form is what this screen shows for some sweep and width (else the test above
        # says nothing about it)
        shown.append("libvirt (virsh edit VM, the <disk>'s <driver>): <driver " in joined)
    assert any(shown)
