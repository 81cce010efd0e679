"""A real image's disk under test on a lab network backing (issue 51; slow: run with -m slow or
-m ''): the lab's nbdkit, tgtd or nfs-ganesha serves the run's disk, QEMU's own client opens it, the
Debian guest built here measures it through its agent.

Each run is in a network and mount namespace of its own (tests/own_network.py): a lab NFS server
registers program 100003 with rpcbind on port 111, one per machine at a time, and on the host the
lab server of this module made another suite's refuse to start ("an NFS server is already
registered with rpcbind"). In its own namespace its rpcbind and ganesha (and the nbd and iSCSI
cases' nbdkit and tgtd) and QEMU are beside any other, so the module is in no xdist group."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.guest.debian_image import DebianImage
from tests.conftest import needs
from tests.own_network import own_network
from tests.test_real_guest import _processes_naming

pytestmark = pytest.mark.slow


NETWORK_PLAN = """
tier = ["guest"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
bus = ["virtio-blk"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "32M"
runtime = 1
run_timeout = 900
null_ceiling = false
retry_disturbed = false
[repetitions]
min = 1
max = 1
[[backing]]
type = "{protocol}"
[guest]
image = "{image}"
"""

# protocol → (the lab server's process, the start of the run's disk URL): each served by the lab's
# own server on 127.0.0.1 and opened by QEMU's own client (qemu-block-extra for iSCSI and NFS)
LAB_SERVERS = {
    "nbd": ("nbdkit", "nbd://127.0.0.1:"),
    "iscsi": ("tgtd", "iscsi://127.0.0.1"),
    "nfs": ("ganesha.nfsd", "nfs://127.0.0.1/"),
}


@pytest.mark.parametrize(
    "protocol",
    [
        pytest.param("nbd", marks=needs("nbdkit")),
        pytest.param("iscsi", marks=needs("tgtd")),
        pytest.param("nfs", marks=needs("ganesha.nfsd")),
    ],
)
def test_a_sweep_in_the_image_on_a_lab_network_backing_measures_the_network_disk_and_leaves_nothing(
    image: DebianImage, tmp_path: Path, protocol: str
) -> None:
    """A network backing in a real image: the lab's server (nbdkit, tgtd, ganesha) serves the
    run's disk, QEMU opens it with its own client (the same -blockdev node as the built-in
    guest's), the Debian guest sees it as its disk under test and fio measures it through the
    agent; the run records the network disk, the server and the guest's view. Afterwards no
    server, QEMU, server file, ledger entry or disk image is left."""
    server, url = LAB_SERVERS[protocol]
    (tmp_path / "p.toml").write_text(NETWORK_PLAN.format(image=image.qcow2, protocol=protocol))
    # leaving the namespace checks that nothing of the run is left in it, and that it is gone
    with own_network() as ns:
        proc = ns.run_cli(
            *("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--accel", "tcg"),
            cwd=tmp_path,
            timeout=1800,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        rows = db.execute("SELECT status, meta_json, error FROM runs").fetchall()
    assert len(rows) == 1 and rows[0][0] == "ok", rows
    meta = json.loads(rows[0][1])
    disk = meta["network_disk"]
    assert disk["protocol"] == protocol and disk["format"] == "raw", disk
    assert disk["url"].startswith(url), disk
    if protocol == "nbd":
        assert disk["nbd_mode"] == "lab-started"
    # QEMU's own client under the cell's format node, as the built-in guest's
    argv = " ".join(meta["qemu_argv"])
    assert f"file.driver={protocol}" in argv and "driver=raw,node-name=" in argv, argv
    assert meta["guest_image"]["image_sha256"] == image.sha256
    view = meta["guest_disk"]
    print(f"Debian guest on a {protocol} disk: {view}, phases {meta.get('boot_phases')}")
    assert view["driver"] == "virtio_blk" and view["sectors"] == (32 << 20) // 512, view
    assert server in {p["name"] for p in meta["server_processes"]}
    workdir = tmp_path / "w"
    assert _processes_naming(server, workdir) == []
    assert _processes_naming("qemu-system-x86_64", tmp_path) == []
    assert leftovers.pending(workdir) == []
    backings = workdir / "backings"
    assert not backings.exists() or not any(f.is_file() for f in backings.rglob("*"))
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".raw", ".qcow2")]
