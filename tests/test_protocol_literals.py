"""Network protocols own their specifics: no protocol name is spelled outside the protocol modules
(issue 48), as no tier name is outside the tiers (tests/test_tier_names.py).

Code elsewhere asks the protocol registry (`iomatrix.protocols.network_protocol`, `protocols`,
`kernel_fs_types`, the `NetworkProtocol` seams) what a protocol does, so a protocol can be added in
its own module. This scans every module for string literals equal to a registered protocol's name or
to a kernel filesystem type a protocol declares (an NFS mount's "nfs4"; docstrings and comments do
not count) and lists each one found."""

from __future__ import annotations

from pathlib import Path

from iomatrix.protocols import kernel_fs_types, protocol_names
from tests.literal_scan import literals_outside

SRC = Path(__file__).resolve().parents[1] / "src" / "iomatrix"
# The protocol modules (their registry and base included) and their lab halves (servers, leftovers,
# specs: backing/ holds one module per protocol beside the shared network-disk machinery).
OWNERS = ("protocols/", "backing/")
# The same strings with another meaning: (module, string) → what it means there. The block layer
# tier reaches qemu-storage-daemon's export over NBD on a private UNIX socket with fio's nbd engine:
# that NBD is the tier's own plumbing, not a network backing.
OTHER_MEANINGS = {
    ("fio/host_build.py", "nbd"): "fio's nbd ioengine, among the engines a built fio must have",
    ("tiers/blocklayer.py", "nbd"): "fio --enghelp's line naming its nbd ioengine",
    ("tiers/durability.py", "nbd"): "the name of the scratch directory of the block layer's socket",
}


def protocol_literals(root: Path, names: set[str]) -> list[str]:
    """file:line: 'name' for every string literal in `names` outside the owners' directories."""
    return literals_outside(root, names, OWNERS, OTHER_MEANINGS)


def _spelled() -> set[str]:
    return set(protocol_names()) | kernel_fs_types()


def test_no_protocol_literal_outside_the_protocol_modules() -> None:
    names = _spelled()
    assert {"iscsi", "nbd", "nfs", "rbd", "nfs4"} <= names
    found = protocol_literals(SRC, names)
    assert not found, (
        "network protocol names spelled outside iomatrix/protocols and iomatrix/backing (ask the "
        "protocol registry instead):\n" + "\n".join(found)
    )


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
    assert protocol_literals(tmp_path, _spelled()) == [
        "src/iomatrix/report.py:5: 'iscsi'",
        "src/iomatrix/report.py:5: 'nfs4'",
    ]
