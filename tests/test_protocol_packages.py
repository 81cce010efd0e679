"""Each network protocol's Debian packages (`NetworkProtocol.packages`, issue 48) are what
scripts/setup.sh --shared-storage installs and what iomatrix says that flag brings, and the fleet
role installs them for a plan with a backing of any protocol: a protocol added with its packages but
not here (NBD's nbdkit was missing from the role's measuring install) fails this test."""

from __future__ import annotations

import re
from pathlib import Path

from iomatrix.hostcmd import SETUP_FLAG_OF_PACKAGE
from iomatrix.protocols import protocols

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "ansible/collections/ansible_collections/iomatrix/fleet/roles/sweep"


def _setup_arrays() -> dict[str, set[str]]:
    """setup.sh's per-protocol arrays (NAME_packages=(…)) but the build's and the fio libraries."""
    text = (ROOT / "scripts" / "setup.sh").read_text()
    return {
        m.group(1): set(m.group(2).split())
        for m in re.finditer(r"(?m)^([a-z]+)_packages=\(([^)]*)\)", text)
        if m.group(1) not in ("minimal",)
    }


def test_setup_sh_installs_every_protocols_packages_and_no_other() -> None:
    wanted = {p for network in protocols() for p in network.packages}
    assert {"nbdkit", "tgt", "nfs-ganesha", "ceph-osd", "qemu-block-extra"} <= wanted
    arrays = _setup_arrays()
    assert {network.name for network in protocols()} <= set(arrays), arrays
    assert set().union(*(arrays[n.name] for n in protocols())) == wanted
    assert set(SETUP_FLAG_OF_PACKAGE) == wanted


def test_the_fleet_role_installs_them_for_a_plan_of_every_protocol() -> None:
    """check.yml's search for a network backing's `type = …` line (then install.yml passes
    --shared-storage), tried on a plan line of each protocol and of a local backing."""
    text = (ROLE / "tasks" / "check.yml").read_text()
    pattern = re.search(r"is search\('(.*?)'\) \}\}", text)
    assert pattern is not None
    search = re.compile(pattern.group(1).replace("\\\\", "\\"))
    for network in protocols():
        assert search.search(f'[[backing]]\ntype = "{network.name}"\n'), network.name
    assert not search.search('[[backing]]\ntype = "tmpfs"\n')
    assert "--shared-storage" in (ROLE / "tasks" / "install.yml").read_text()
