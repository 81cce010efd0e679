"""Tiers own their specifics: no tier name is spelled outside the tier modules and their own
machinery.

Code elsewhere asks the tier registry (`iomatrix.tiers.tier_class`, `tier_classes`, the `Tier`
seams) what a tier does, so a tier can be added, renamed or changed in one place. This scans every
module for string literals equal to a registered tier's name (docstrings and comments do not count)
and lists each one found."""

from __future__ import annotations

import re
from pathlib import Path

from iomatrix.tiers import tier_classes, tier_names
from tests.literal_scan import literals_outside

SRC = Path(__file__).resolve().parents[1] / "src" / "iomatrix"
# The tier modules, and packages private to tiers: the guest machinery (shared by the QEMU tiers),
# the durability tier's verdict rules, the consolidation tier's roles and plan table, and the tiers'
# report companions (report/companions/, one module per tier).
OWNERS = ("tiers/", "guest/", "durability/", "consolidation/", "report/companions/")
# The same strings with another meaning: (module, string) → what it means there.
OTHER_MEANINGS = {
    (
        "commands/guest.py",
        "guest",
    ): "the `iomatrix guest` command group (the guest machinery's build and check commands)",
    (
        "stats/public_names.py",
        "consolidation",
    ): "the module stats/consolidation.py, imported lazily by name",
    (
        "report/render.py",
        "consolidation",
    ): "the key of the consolidation answers in recommend's JSON document",
}


def tier_name_literals(root: Path, names: set[str]) -> list[str]:
    """file:line: 'name' for every string literal equal to a tier name outside the owners'
    directories."""
    return literals_outside(root, names, OWNERS, OTHER_MEANINGS)


def test_no_tier_name_outside_the_tiers() -> None:
    names = set(tier_names())
    assert {"baremetal", "blocklayer", "guest", "durability", "consolidation"} <= names
    found = tier_name_literals(SRC, names)
    assert not found, (
        "tier names spelled outside iomatrix/tiers (ask the tier registry instead):\n"
        + "\n".join(found)
    )


def test_the_scan_finds_a_tier_name(tmp_path: Path) -> None:
    # The scan itself: a comparison with a tier name is found, a docstring or comment mentioning one
    # is not.
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "x.py").write_text(
        '"""About the guest tier."""\n# the "guest" tier\n\n'
        'def f(t):\n    """guest"""\n    return t == "guest"\n'
    )
    (tmp_path / "tiers").mkdir()
    (tmp_path / "tiers" / "y.py").write_text('NAME = "guest"\n')
    assert tier_name_literals(tmp_path, {"guest"}) == ["src/iomatrix/report/x.py:6: 'guest'"]


def test_the_workload_catalogue_names_no_tier() -> None:
    """workloads.py asks the tier declarations for a tier's own workloads (durability's trials,
    tiles-N) instead of spelling them: no tier that has a workload kind of its own is named there at
    all, not even in prose, and no module there says "the X tier". ("guest" stays a word for the VM
    a filesystem job runs in.)"""
    for rel in ("workloads.py", "domain/workload.py"):
        text = (SRC / rel).read_text(encoding="utf-8")
        for decl in tier_classes():
            owns = decl.workload_kind is not None or bool(decl.own_workloads)
            pattern = (
                rf"\b{re.escape(decl.name)}\b" if owns else rf"\b{re.escape(decl.name)} tier\b"
            )
            hits = [
                f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
                for m in re.finditer(pattern, text, re.I)
            ]
            assert not hits, (
                f"tier '{decl.name}' named in {', '.join(hits)}: ask the tier registry instead"
            )
