"""Snippets for disks served over the network (issue 34): libvirt's <disk type="network"> checked by
the real virt-xml-validate, tgt's targets.conf read by the real tgt-admin (--pretend: the tgtadm
commands it would run), Proxmox's storage.cfg per client, and QEMU's -blockdev protocol node."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.backing.iscsi import free_control_port, tgtd_socket_files, tgtd_target_ids
from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import pool_of
from iomatrix.snippets import DiskConfig, minimal_domain_xml, snippet_backing, snippets_for
from iomatrix.vmconfig.network import parse_storage_cfg
from tests.conftest import needs

CELL = {
    "tier": "blocklayer",
    "format": "raw",
    "preallocation": "off",
    "cache": "none",
    "aio": "threads",
    "bus": "virtio-blk",
    "modifier": "none",
}
PLACE = NetworkPlace()


def _snippets(backing: str, **more: str) -> dict[str, tuple[str | None, str]]:
    cfg = DiskConfig.from_axes({**CELL, **more}, backing)
    # the first snippet of each tool, as SnippetSet.by_tool gives it (a storage may have more than
    # one)
    return {s.tool: (s.text, s.note) for s in reversed(snippets_for(cfg).snippets)}


@needs("virt-xml-validate")
def test_every_network_disk_is_valid_libvirt_xml(tmp_path: Path) -> None:
    disks = []
    for backing, client in (("iscsi", "initiator"), ("nfs", "nfs_client")):
        for value in ("kernel", None):
            for fmt in ("raw", "qcow2"):
                more = {client: value} if value else {}
                text = _snippets(backing, format=fmt, bus="virtio-scsi", **more)["libvirt"][0]
                assert text is not None
                disks.append(text.replace("<controller type='scsi' model='virtio-scsi'/>\n", ""))
    # Each disk its own target name (one domain holds all eight).
    body = "\n".join(d.replace('dev="sda"', f'dev="sd{chr(97 + i)}"') for i, d in enumerate(disks))
    path = tmp_path / "domain.xml"
    path.write_text(minimal_domain_xml("<controller type='scsi' model='virtio-scsi'/>\n" + body))
    res = subprocess.run(
        ["virt-xml-validate", str(path), "domain"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr + path.read_text()


def test_libvirt_names_the_protocol_host_and_lun() -> None:
    iscsi = _snippets("iscsi")["libvirt"]
    assert '<disk type="network" device="disk">' in iscsi[0]
    assert f'<source protocol="iscsi" name="{PLACE.iqn}/1">' in iscsi[0]
    assert f'<host name="{PLACE.host}" port="3260" />' in iscsi[0]
    assert 'io="threads"' not in iscsi[0] and "libiscsi" in iscsi[1]
    assert "write cache off, which is not tgt's default" in iscsi[1]
    kernel = _snippets("iscsi", initiator="kernel")["libvirt"]
    assert f'<source dev="{PLACE.by_path()}" />' in kernel[0] and "iscsiadm -m node" in kernel[1]
    nfs = _snippets("nfs", format="qcow2")["libvirt"][0]
    assert f'<source protocol="nfs" name="{PLACE.export}/vm-disk.qcow2">' in nfs
    mounted = _snippets("nfs", format="qcow2", nfs_client="kernel")["libvirt"][0]
    assert f'<source file="{PLACE.mount}/vm-disk.qcow2" />' in (mounted or "")


def test_qemu_blockdev_opens_the_disk_with_the_protocol_driver() -> None:
    iscsi = _snippets("iscsi", format="qcow2")["qemu"][0] or ""
    flat = iscsi.replace("\\\n", "")
    assert (
        "file.driver=iscsi,file.transport=tcp,file.portal=192.0.2.10:3260,"
        f"file.target={PLACE.iqn},file.lun=1"
    ) in flat
    assert "file.aio" not in flat and "file.filename" not in flat
    nfs = (_snippets("nfs")["qemu"][0] or "").replace("\\\n", "")
    assert (
        "file.driver=nfs,file.server.type=inet,file.server.host=192.0.2.10,"
        "file.path=/srv/nfs/vm/vm-disk.raw" in nfs
    )
    kernel = (_snippets("iscsi", initiator="kernel", aio="io_uring")["qemu"][0] or "").replace(
        "\\\n", ""
    )
    assert f"file.driver=host_device,file.filename={PLACE.by_path()},file.aio=io_uring" in kernel


def test_proxmox_storage_per_client() -> None:
    direct, direct_note = _snippets("iscsi")["proxmox"]
    assert (
        direct is not None and "iscsidirect: san-direct\n\tportal 192.0.2.10\n\ttarget " in direct
    )
    assert "--virtio0 san-direct:lun1,cache=none" in direct and "aio=" not in direct
    assert "QEMU's own initiator (libiscsi), as measured" in direct_note
    kernel = _snippets("iscsi", initiator="kernel")["proxmox"][0] or ""
    assert "iscsi: san\n" in kernel and "san:0.0.1.scsi-WWID" in kernel
    nfs, nfs_note = _snippets("nfs", format="qcow2", cache="writeback")["proxmox"]
    assert nfs is not None and "nfs: nfs-store\n\tserver 192.0.2.10\n\texport /srv/nfs/vm\n" in nfs
    assert "--virtio0 nfs-store:32,format=qcow2,cache=writeback" in nfs
    # libnfs measured, the kernel's mount in Proxmox
    assert "which Proxmox does not use" in nfs_note
    full = _snippets("nfs", format="qcow2", preallocation="full")["proxmox"][0] or ""
    # the storage's, for the images it creates
    assert "\toptions vers=3\n\tpreallocation full\n" in full
    qcow2_lun = _snippets("iscsi", format="qcow2")["proxmox"]
    assert qcow2_lun[0] is None and "format raw only" in qcow2_lun[1]


def test_tools_that_cannot_write_a_network_disk_say_so() -> None:
    snippets = _snippets("nfs")
    assert snippets["nova"][0] is None and "Cinder" in snippets["nova"][1]
    assert (
        snippets["virt-install"][0] is None and "libvirt XML above" in snippets["virt-install"][1]
    )
    assert _snippets("nfs", nfs_client="kernel")["virt-install"][0] is not None
    assert "tgt" not in snippets  # no target on NFS
    null = _snippets("iscsi", lun_type="null")
    assert null["libvirt"][0] is None and "no configuration to deploy" in null["libvirt"][1]


def _tgt_admin(conf_text: str, tmp_path: Path) -> str:
    lun = tmp_path / "lun.img"
    lun.write_bytes(b"\0" * (1 << 20))
    conf = tmp_path / "targets.conf"
    conf.write_text(conf_text.replace(PLACE.lun_file, str(lun)))
    res = subprocess.run(
        ["tgt-admin", "-c", str(conf), "--execute", "--pretend"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@needs("tgt-admin")
@pytest.mark.parametrize(
    ("lun_type", "cache", "expected", "absent"),
    [
        (
            "fileio",
            "off",
            [
                "--bstype rdwr",
                "mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:",
            ],
            ["--bsoflags"],
        ),
        ("blockio", "off", ["--bstype rdwr", "--bsoflags direct", "0x80:0x14:"], []),
        (
            "blockio",
            "on",
            ["--bstype rdwr", "--bsoflags direct", "Write cache is enabled"],
            ["mode_page"],
        ),
        ("null", "off", ["--bstype null", '-b "/dev/null"'], []),
    ],
)
def test_tgt_admin_reads_the_targets_conf_snippet(
    lun_type: str, cache: str, expected: list[str], absent: list[str], tmp_path: Path
) -> None:
    text, note = _snippets("iscsi", lun_type=lun_type, lun_write_cache=cache)["tgt"]
    assert text is not None
    out = _tgt_admin(text, tmp_path)
    assert f"-T {PLACE.iqn}" in out and "--lun 1" in out
    for word in expected:
        assert word in out, out
    for word in absent:
        assert word not in out, out
    assert ("volatile memory in the target host" in note) == (cache == "on")


def test_a_stored_network_backing_gives_its_protocol_to_the_snippets() -> None:

    assert snippet_backing({"backing_type": "iscsi", "kind": "network"}) == "iscsi"
    assert snippet_backing({"backing_type": "nfs", "kind": "network"}) == "nfs"
    assert snippet_backing({"backing_type": "lvm", "kind": "device"}) == "device"  # as before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(check: Callable[[], bool], what: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not ready after {bound_s:.0f} s")
        time.sleep(0.1)


@pytest.mark.slow
@needs("tgtd")
@needs("qemu-io")
def test_the_tgt_and_qemu_snippets_serve_and_open_a_real_lun(tmp_path: Path) -> None:
    # tgtd started here on its own portal and control port, configured by the tgt snippet through
    # tgt-admin, and opened by qemu-io with the QEMU snippet's own -blockdev options (the
    # placeholder portal made this one's). a control port no tgtd uses and no socket file of which
    # is left (a pid-derived one collided with leftovers)
    port, control = _free_port(), str(free_control_port())
    lun = tmp_path / "lun.img"
    lun.write_bytes(b"\0" * (16 << 20))
    tgtd = subprocess.Popen(
        ["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{port}", "-C", control],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tgtadm = ["tgtadm", "-C", control, "--lld", "iscsi"]
    try:
        _wait_for(
            lambda: (
                subprocess.run(
                    [*tgtadm, "--op", "show", "--mode", "target"], capture_output=True, timeout=30
                ).returncode
                == 0
            ),
            "tgtd",
        )
        snippets = _snippets("iscsi", lun_type="blockio")
        conf = tmp_path / "targets.conf"
        conf.write_text((snippets["tgt"][0] or "").replace(PLACE.lun_file, str(lun)))
        res = subprocess.run(
            ["tgt-admin", "-C", control, "-c", str(conf), "--execute"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        shown = subprocess.run(
            [*tgtadm, "--op", "show", "--mode", "target"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert f"Backing store path: {lun}" in shown and "Backing store flags: direct" in shown, (
            shown
        )
        blockdev = (snippets["qemu"][0] or "").replace("\\\n", "").split()[1]
        opts = blockdev.replace(PLACE.portal, f"127.0.0.1:{port}").replace("node-name=disk0,", "")
        written = subprocess.run(
            ["qemu-io", "--image-opts", opts, "-c", "write -P 0xab 4096 4096", "-c", "flush"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert written.returncode == 0 and "wrote 4096/4096 bytes" in written.stdout, (
            written.stdout + written.stderr
        )
        # on the target's file, through libiscsi and tgt
        assert lun.read_bytes()[4096:8192] == b"\xab" * 4096
    finally:
        # tgtd refuses to exit while it has targets (it then sat out the 30 s wait below and was
        # killed): they are deleted first, as the lab's own stop does
        for tid in tgtd_target_ids(int(control)):
            subprocess.run(
                [*tgtadm, "--mode", "target", "--op", "delete", "--force", "--tid", str(tid)],
                capture_output=True,
                timeout=30,
            )
        subprocess.run(
            [*tgtadm, "--op", "delete", "--mode", "system"], capture_output=True, timeout=30
        )
        try:
            tgtd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tgtd.kill()
            tgtd.wait(timeout=30)
        # tgtd leaves its control socket and lock in /run/tgtd when it exits: this test started it,
        # it removes them
        for f in tgtd_socket_files(int(control)):
            f.unlink(missing_ok=True)
    assert not any(f.exists() for f in tgtd_socket_files(int(control)))


# Each Proxmox storage type's properties (pve-storage: PVE/Storage/ISCSIPlugin.pm,
# ISCSIDirectPlugin.pm, NFSPlugin.pm, RBDPlugin.pm `options`): a stanza setting another is refused
# by Proxmox.
PROXMOX_PROPERTIES = {
    "iscsi": {"portal", "target", "content", "nodes", "disable"},
    "iscsidirect": {"portal", "target", "content", "nodes", "disable"},
    "nfs": {
        "server",
        "export",
        "path",
        "content",
        "options",
        "preallocation",
        "nodes",
        "disable",
        "format",
    },
    "rbd": {
        "pool",
        "monhost",
        "username",
        "content",
        "krbd",
        "namespace",
        "data-pool",
        "nodes",
        "disable",
    },
}


@pytest.mark.parametrize(
    ("backing", "more", "kind", "expected"),
    [
        (
            "iscsi",
            {},
            "iscsidirect",
            {"portal": "192.0.2.10", "target": PLACE.iqn, "content": "images"},
        ),
        ("iscsi", {"initiator": "kernel"}, "iscsi", {"portal": "192.0.2.10", "target": PLACE.iqn}),
        (
            "nfs",
            {},
            "nfs",
            {
                "server": "192.0.2.10",
                "export": PLACE.export,
                "options": "vers=3",
                "content": "images",
            },
        ),
        (
            "rbd",
            {},
            "rbd",
            {"pool": pool_of(PLACE), "monhost": "192.0.2.10", "krbd": "0", "content": "images"},
        ),
        ("rbd", {"rbd_client": "krbd"}, "rbd", {"krbd": "1"}),
    ],
)
def test_proxmox_storage_cfg_stanzas_read_back_with_the_options_measured(
    backing: str, more: dict[str, str], kind: str, expected: dict[str, str]
) -> None:
    # read back by iomatrix's reader of /etc/pve/storage.cfg (PVE/Storage/Plugin.pm parse_config's
    # format)
    text = _snippets(backing, **more)["proxmox"][0] or ""
    stanza = text.split("\n\n")[0]  # the storage.cfg part, before the qm set line
    ((_, (read_kind, props)),) = parse_storage_cfg(stanza).items()
    assert read_kind == kind and set(props) <= PROXMOX_PROPERTIES[kind], props
    assert expected.items() <= props.items(), props


def test_proxmox_nfs_says_its_kernel_mount_was_not_measured_and_its_risks() -> None:
    note = " ".join(_snippets("nfs", format="qcow2", cache="writeback")["proxmox"][1].split())
    assert (
        "Proxmox's nfs storage is a kernel NFS mount (under /mnt/pve/ID), which iomatrix "
        "did not measure" in note
    )
    assert (
        "it measured QEMU's own libnfs client" in note
        and "the figures above are libnfs's and the answer's risk lines the kernel mount's" in note
    )
    assert "writes also sit in this host's page cache until the guest flushes" in note
    assert "nfs(5) warns that a soft timeout can cause silent data corruption" in note
    kernel = _snippets("nfs", format="qcow2", nfs_client="kernel")["proxmox"][1]
    assert "as measured" in kernel and "did not measure" not in kernel
