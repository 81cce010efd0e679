"""--current reads network disks (issue 34): libvirt <disk type='network'> (iscsi, nfs) and the
kernel initiator's by-path device, QEMU's -drive iscsi:// / nfs:// URLs and -blockdev driver=iscsi /
driver=nfs, Proxmox volumes on iscsidirect / iscsi / nfs storages (the last one only with a
storage.cfg beside the qm config); bad input is one line. The captured examples are in
tests/data/current_network/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from iomatrix.vmconfig.network import parse_storage_cfg
from tests.conftest import needs, run_cli

DATA = Path(__file__).parent / "data" / "current_network"
SAN_IQN = "iqn.2003-01.org.linux-iscsi.san1"


@needs("virt-xml-validate")
def test_the_captured_domain_is_valid_libvirt_xml() -> None:
    res = subprocess.run(
        ["virt-xml-validate", str(DATA / "iscsi-libiscsi.xml"), "domain"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


def test_libvirt_iscsi_network_disk() -> None:
    cur = parse_current(str(DATA / "iscsi-libiscsi.xml"))
    assert cur.protocol == "iscsi" and cur.disk is not None
    assert cur.disk.path == f"iscsi://10.20.0.5:3260/{SAN_IQN}:db/2"
    assert cur.axes == {"format": "raw", "cache": "none", "aio": "threads", "bus": "virtio-blk"}
    assert "libiscsi" in cur.notes[0]


def test_libvirt_nfs_network_disk() -> None:
    cur = parse_current(str(DATA / "iscsi-libiscsi.xml"), disk="vdb")
    assert cur.protocol == "nfs" and cur.disk is not None
    assert cur.disk.path == "nfs://nas.example.com/srv/nfs/vm/db1-data.qcow2"
    assert cur.axes["format"] == "qcow2" and cur.axes["cache"] == "writeback"
    assert "nfs_client" not in cur.axes  # libnfs, the default


def test_libvirt_kernel_initiator_device() -> None:
    cur = parse_current(str(DATA / "iscsi-libiscsi.xml"), disk="vdc")
    assert (
        cur.protocol == "iscsi"
        and cur.axes["initiator"] == "kernel"
        and cur.axes["aio"] == "native"
    )
    assert cur.disk is not None and cur.disk.path == f"iscsi://10.20.0.5:3260/{SAN_IQN}:db/3"


def test_libvirt_other_network_protocols_are_one_line(tmp_path: Path) -> None:
    xml = (
        (DATA / "iscsi-libiscsi.xml")
        .read_text()
        .replace("protocol='rbd' name='pool/image'", "protocol='gluster' name='vol/image'")
    )
    (tmp_path / "vm.xml").write_text(xml)
    with pytest.raises(UserError, match=r"cannot read disk vdd source protocol 'gluster'") as e:
        parse_current(str(tmp_path / "vm.xml"), disk="vdd")
    assert "iscsi, nbd, nfs or rbd" in (e.value.hint or "")
    # (issue 35)
    assert parse_current(str(DATA / "iscsi-libiscsi.xml"), disk="vdd").protocol == "rbd"


def test_libvirt_network_disk_without_host(tmp_path: Path) -> None:
    xml = (
        (DATA / "iscsi-libiscsi.xml")
        .read_text()
        .replace("<host name='10.20.0.5' port='3260'/>", "")
    )
    (tmp_path / "vm.xml").write_text(xml)
    with pytest.raises(UserError, match="cannot read disk vda source host"):
        parse_current(str(tmp_path / "vm.xml"))


@pytest.mark.parametrize(
    ("value", "protocol", "url", "axes"),
    [
        (
            f"-drive file=iscsi://10.20.0.5/{SAN_IQN}:db/1,format=raw,cache=none,if=virtio",
            "iscsi",
            f"iscsi://10.20.0.5:3260/{SAN_IQN}:db/1",
            {"format": "raw", "cache": "none", "aio": "threads"},
        ),
        (
            "-drive file=nfs://10.20.0.7/srv/nfs/pve/images/101/vm-101-disk-0.qcow2,"
            "format=qcow2,cache=writeback,if=virtio",
            "nfs",
            "nfs://10.20.0.7/srv/nfs/pve/images/101/vm-101-disk-0.qcow2",
            {"format": "qcow2", "cache": "writeback"},
        ),
        # The feasibility note's command line: the protocol node named by the format node.
        (
            "-blockdev driver=iscsi,node-name=proto,transport=tcp,portal=127.0.0.1:3261,"
            "target=iqn.2026-11.lab:t1,lun=1,"
            "cache.direct=on -blockdev driver=raw,node-name=disk,file=proto,cache.direct=on "
            "-device virtio-blk-pci,drive=disk",
            "iscsi",
            "iscsi://127.0.0.1:3261/iqn.2026-11.lab:t1/1",
            {"format": "raw", "cache": "none"},
        ),
        (
            "-blockdev driver=qcow2,node-name=d,file.driver=nfs,file.server.type=inet,"
            "file.server.host=127.0.0.1,"
            "file.path=/export/disk.qcow2,cache.direct=on -device virtio-blk-pci,drive=d",
            "nfs",
            "nfs://127.0.0.1/export/disk.qcow2",
            {"format": "qcow2", "cache": "none"},
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=host_device,file.aio=io_uring,"
            "cache.direct=on,"
            f"file.filename=/dev/disk/by-path/ip-10.20.0.5:3260-iscsi-{SAN_IQN}:db-lun-0 "
            "-device virtio-blk-pci,drive=d",
            "iscsi",
            f"iscsi://10.20.0.5:3260/{SAN_IQN}:db/0",
            {"initiator": "kernel", "aio": "io_uring"},
        ),
    ],
)
def test_qemu_network_disks(value: str, protocol: str, url: str, axes: dict[str, str]) -> None:
    cur = parse_current(value)
    assert cur.protocol == protocol and cur.disk is not None and cur.disk.path == url
    assert {k: cur.axes[k] for k in axes} == axes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "-drive file=iscsi://10.20.0.5/no-lun,format=raw,cache=none",
            "cannot read -drive file 'iscsi://10.20.0.5/no-lun'",
        ),
        (
            "-drive file=nfs://10.20.0.7/,format=raw,cache=none",
            "cannot read -drive file 'nfs://10.20.0.7/'",
        ),
        (
            "-drive file=sheepdog://h/vdi,format=raw,cache=none",
            "iomatrix does not measure sheepdog disks",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=iscsi,file.target=iqn.x:y "
            "-device virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=iscsi",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=nfs,file.server.host=h -device "
            "virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=nfs",
        ),
        (
            f"-drive file=iscsi://10.20.0.5/{SAN_IQN}:db/99999,format=raw,cache=none",
            "a LUN number 0–16383",
        ),
    ],
)
def test_bad_network_qemu_options_are_one_line(value: str, expected: str) -> None:
    with pytest.raises(UserError) as e:
        parse_current(value)
    assert expected in f"{e.value} {e.value.hint}" and "\n" not in str(e.value)


def test_proxmox_iscsi_volumes_without_storage_cfg(tmp_path: Path) -> None:
    conf = tmp_path / "101.conf"
    shutil.copy(DATA / "101.conf", conf)
    direct = parse_current(str(conf))  # scsi0, the boot disk: iscsidirect's lun4
    assert (
        direct.protocol == "iscsi"
        and "initiator" not in direct.axes
        and direct.axes["aio"] == "threads"
    )
    assert (
        direct.disk is not None
        and direct.disk.volume == "san-direct:lun4"
        and direct.disk.path is None
    )
    kernel = parse_current(str(conf), disk="scsi1")
    assert kernel.protocol == "iscsi" and kernel.axes["initiator"] == "kernel"
    nfs_or_dir = parse_current(str(conf), disk="scsi2")
    assert nfs_or_dir.protocol is None
    assert any(
        "may be a directory or an NFS storage" in n and "storage.cfg" in n for n in nfs_or_dir.notes
    )


def test_proxmox_with_storage_cfg_beside_it(tmp_path: Path) -> None:
    conf = tmp_path / "101.conf"
    shutil.copy(DATA / "101.conf", conf)
    shutil.copy(DATA / "storage.cfg", tmp_path / "storage.cfg")
    direct = parse_current(str(conf))
    assert direct.disk is not None and direct.disk.path == f"iscsi://10.20.0.5:3260/{SAN_IQN}:web/4"
    kernel = parse_current(str(conf), disk="scsi1")
    assert (
        kernel.disk is not None and kernel.disk.path == f"iscsi://10.20.0.5:3260/{SAN_IQN}:web2/2"
    )
    nfs = parse_current(str(conf), disk="scsi2")
    assert (
        nfs.protocol == "nfs"
        and nfs.axes["nfs_client"] == "kernel"
        and nfs.axes["format"] == "qcow2"
    )
    assert "10.20.0.7:/srv/nfs/pve" in nfs.notes[0]


def test_a_bad_storage_cfg_is_one_line(tmp_path: Path) -> None:
    shutil.copy(DATA / "101.conf", tmp_path / "101.conf")
    (tmp_path / "storage.cfg").write_text("this is not a storage.cfg\n")
    with pytest.raises(UserError, match=r"cannot read storage\.cfg line 1"):
        parse_current(str(tmp_path / "101.conf"))
    assert parse_storage_cfg((DATA / "storage.cfg").read_text())["nfs-store"][0] == "nfs"


def test_the_cli_prints_one_line_for_an_unreadable_network_disk(tmp_path: Path) -> None:
    r = run_cli(
        "recommend",
        "--db",
        str(tmp_path / "x.sqlite"),
        "--current",
        "-drive file=iscsi://h/x,format=raw,cache=none",
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot read -drive file 'iscsi://h/x'" in r.stderr
