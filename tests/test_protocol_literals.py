"""Network protocols own their specifics: each protocol's name is spelled only in its own house
(issues 48, 68), as no tier name is outside the tiers (tests/test_tier_names.py).

A protocol's house is at most three modules, as NBD's: its spellings (protocols/NAME.py, which the
registry imports), its lab half (the module of its backing spec: the spec, servers, leftover kinds,
wire helpers) and its reader (--current, and the storage side's snippets). Code elsewhere asks the
protocol registry (`iomatrix.protocols.network_protocol`, `protocols`, `kernel_fs_types`, the
`NetworkProtocol` seams) what a protocol does. This scans every module for string literals equal to
a registered protocol's name or to a kernel filesystem type it declares (an NFS mount's "nfs4";
docstrings and comments do not count) outside that protocol's house, backing/ included, and lists
each one found; and checks that every module a protocol names for a hook is in its house, but the
generic renderers listed here."""

from __future__ import annotations

from pathlib import Path

from iomatrix.protocols import kernel_fs_types, protocol_names, protocols
from iomatrix.protocols.base import NetworkProtocol
from tests.literal_scan import literals_outside

SRC = Path(__file__).resolve().parents[1] / "src" / "iomatrix"
# Generic code a protocol names for a hook, which reads the protocol's facts instead of its name.
GENERIC_HOOKS = {"report/flush_gate.py": "a flush-gated client cache's trap (flush_gated_cache)"}
MAX_HOUSE = 3
# The same strings with another meaning: (module, string) → what it means there. The block layer
# tier reaches qemu-storage-daemon's export over NBD on a private UNIX socket with fio's nbd engine:
# that NBD is the tier's own plumbing, not a network backing.
OTHER_MEANINGS = {
    ("fio/host_build.py", "nbd"): "fio's nbd ioengine, among the engines a built fio must have",
    ("tiers/blocklayer.py", "nbd"): "fio --enghelp's line naming its nbd ioengine",
    ("tiers/durability.py", "nbd"): "the name of the scratch directory of the block layer's socket",
}


def _module_file(dotted: str) -> str:
    """src/iomatrix-relative file of a module named "iomatrix.a.b"."""
    return dotted.removeprefix("iomatrix.").replace(".", "/") + ".py"


def hooks(network: NetworkProtocol) -> set[str]:
    """The files of every module `network` names for a hook ("module:object" class attributes)."""
    found = set()
    for attr in dir(type(network)):
        value = getattr(type(network), attr, None)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and v.startswith("iomatrix.") and ":" in v:
                found.add(_module_file(v.partition(":")[0]))
    return found


def house(network: NetworkProtocol) -> tuple[str, ...]:
    """A protocol's own modules: its spellings, its spec's module and its reader's."""
    own = [_module_file(type(network).__module__), _module_file(network.spec.partition(":")[0])]
    if network.reader is not None:
        own.append(_module_file(network.reader.partition(":")[0]))
    return tuple(dict.fromkeys(own))


def protocol_literals(root: Path, names: set[str], owners: tuple[str, ...] = ()) -> list[str]:
    """file:line: 'name' for every string literal in `names` outside `owners`."""
    return literals_outside(root, names, owners, OTHER_MEANINGS)


def test_no_protocol_literal_outside_its_house() -> None:
    spelled = set(protocol_names()) | kernel_fs_types()
    assert {"iscsi", "nbd", "nfs", "rbd", "nfs4"} <= spelled
    found = []
    for network in protocols():
        names = {network.name, *network.kernel_fs_types}
        found += protocol_literals(SRC, names, house(network))
    assert not found, (
        "network protocol names spelled outside the protocol's own modules (ask the protocol "
        "registry instead, or move the code into the protocol's house):\n" + "\n".join(found)
    )


def test_each_protocol_is_at_most_three_modules_and_its_hooks_point_inside() -> None:
    for network in protocols():
        own = house(network)
        assert len(own) <= MAX_HOUSE, (network.name, own)
        outside = hooks(network) - set(own) - set(GENERIC_HOOKS)
        assert not outside, f"{network.name} names hooks outside its house: {sorted(outside)}"


def test_the_scan_finds_a_comparison_and_skips_docstrings_comments_and_owners(
    tmp_path: Path,
) -> None:
    (tmp_path / "protocols").mkdir()
    (tmp_path / "protocols" / "mine.py").write_text('NAME = "iscsi"\n')
    (tmp_path / "report.py").write_text(
        '"""Says iscsi and "nfs" in prose."""\n'
        "# a comment naming 'rbd'\n"
        "def f(t):\n"
        '    """Compares with "iscsi"."""\n'
        '    return t == "iscsi" or t in ("nfs4", "file")\n'
    )
    spelled = set(protocol_names()) | kernel_fs_types()
    assert protocol_literals(tmp_path, spelled, ("protocols/",)) == [
        "src/iomatrix/report.py:5: 'iscsi'",
        "src/iomatrix/report.py:5: 'nfs4'",
    ]
