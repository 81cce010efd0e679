"""Each network protocol's Debian packages (`NetworkProtocol.packages`, issue 48) are what
scripts/setup.sh --shared-storage installs (iomatrix names that flag for them:
sweep/expansion.setup_command), and the fleet role installs them for a plan with a backing of any
protocol: a protocol added with its packages but
not here (NBD's nbdkit was missing from the role's measuring install) fails this test."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from iomatrix.backing.spec import BackingSpec
from iomatrix.protocols import is_network, protocols

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


def _local_types() -> set[str]:
    """The built-in backing types no protocol serves (dir, tmpfs, …): the union holds only those
    (a protocol's spec is its own)."""
    union = get_args(get_args(BackingSpec)[0])
    types = {cls.model_fields["type"].default for cls in union}
    assert {"dir", "tmpfs"} <= types and not any(is_network(t) for t in types)
    return types


def test_setup_sh_installs_every_protocols_packages_and_no_other() -> None:
    wanted = {p for network in protocols() for p in network.packages}
    assert {"nbdkit", "tgt", "nfs-ganesha", "ceph-osd", "qemu-block-extra"} <= wanted
    arrays = _setup_arrays()
    assert {network.name for network in protocols()} <= set(arrays), arrays
    assert set().union(*(arrays[n.name] for n in protocols())) == wanted


def test_the_fleet_role_installs_them_for_a_plan_of_every_protocol() -> None:
    """check.yml's search for a network backing's `type = …` line (then install.yml passes
    --shared-storage), tried on a plan line of each protocol and of a local backing."""
    text = (ROLE / "tasks" / "check.yml").read_text()
    pattern = re.search(r"is search\('(.*?)'\) \}\}", text)
    assert pattern is not None
    search = re.compile(pattern.group(1).replace("\\\\", "\\"))
    for network in protocols():
        assert search.search(f'[[backing]]\ntype = "{network.name}"\n'), network.name
        assert search.search(f"[[backing]]\n  type='{network.name}'\n"), network.name
    for local in _local_types():
        assert not search.search(f'[[backing]]\ntype = "{local}"\n'), local
    assert "--shared-storage" in (ROLE / "tasks" / "install.yml").read_text()
