"""Generic code does not branch on a protocol by name (issue 48): no comparison with a constant
holding a protocol's name (``protocol == ISCSI``, ``kind in (ISCSI, RBD)``), no dict keyed by one,
no isinstance check on a protocol's backing spec, outside the protocol modules and their lab
halves. The protocol-literal test (tests/test_protocol_literals.py) finds the name spelled as a
string; this finds it reached through a name a protocol module exports, which the literal test
cannot see. Generic code asks the protocol (`iomatrix.protocols.network_protocol`, the
`NetworkProtocol` hooks) instead."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from iomatrix.protocols import protocol_names, spec_class
from tests.literal_scan import protocol_branches

SRC = Path(__file__).resolve().parents[1] / "src" / "iomatrix"
# The protocol modules (registry and base included) and each protocol's lab half: its server, its
# leftovers, its backing spec.
OWNERS = (
    "protocols/",
    "backing/iscsi.py",
    "backing/nfs.py",
    "backing/rbd.py",
    "backing/nbd.py",
)
# Branches not moved yet, per module: how many it still has (may only shrink). Empty since issue 48
# moved the last 32 (in 8 modules) into the protocols' hooks.
NOT_YET_MOVED: dict[str, int] = {}


def _branches(root: Path) -> list[str]:
    names = set(protocol_names())
    return protocol_branches(root, names, {spec_class(n) for n in names}, OWNERS)


def test_no_branch_on_a_protocol_constant_outside_the_protocol_modules() -> None:
    found = _branches(SRC)
    per_module = Counter(f.split(":")[0].removeprefix("src/iomatrix/") for f in found)
    found = [
        f
        for f in found
        if per_module[f.split(":")[0].removeprefix("src/iomatrix/")]
        > NOT_YET_MOVED.get(f.split(":")[0].removeprefix("src/iomatrix/"), 0)
    ]
    assert not found, (
        "generic code branching on a protocol by name (ask the protocol plug-in through "
        "iomatrix.protocols instead):\n" + "\n".join(found)
    )


def test_the_scan_finds_comparisons_dict_keys_and_isinstance(tmp_path: Path) -> None:
    (tmp_path / "protocols").mkdir()
    (tmp_path / "protocols" / "mine.py").write_text(
        "from iomatrix.protocols.nfs import NAME\nOK = {NAME: 1}\n"
    )
    (tmp_path / "report.py").write_text(
        "from iomatrix.backing.spec import DirBacking\n"
        "from iomatrix.backing.iscsi import IscsiBacking\n"
        "from iomatrix.protocols import rbd\n"
        "from iomatrix.protocols.iscsi import NAME as ISCSI\n"
        "MINE = rbd.RBD\n"
        "OTHER = 'file'\n"
        "def f(p, spec):\n"
        "    if p == ISCSI or p is MINE or p == OTHER:\n"
        "        return 1\n"
        "    if isinstance(spec, DirBacking | IscsiBacking):\n"
        "        return 2\n"
        "    return {rbd.RBD: 3, OTHER: 4}.get(p, p in (rbd.KRBD, 'x'))\n"
    )
    # (not: OTHER, a constant of no protocol; rbd.KRBD, a client value; the protocol module's own)
    assert _branches(tmp_path) == [
        "src/iomatrix/report.py:8: 'iscsi'",
        "src/iomatrix/report.py:8: 'rbd'",
        "src/iomatrix/report.py:10: IscsiBacking",
        "src/iomatrix/report.py:12: 'rbd'",
    ]
