"""--current reads Ceph RBD disks (issue 35): libvirt <disk type='network'> with <source
protocol='rbd'> (its monitors' <host>, <auth>) and the krbd-mapped /dev/rbd/POOL/IMAGE, QEMU's
-drive file=rbd:… and -blockdev driver=rbd, Proxmox volumes on rbd storages (krbd 0|1 from a
storage.cfg beside the qm config); the librbd cache settings a QEMU filename gives and the one
QEMU's cache mode decides; bad input is one line. The captured examples are in
tests/data/current_network/ (rbd.xml, 102.conf, storage.cfg)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from tests.conftest import needs, run_cli

DATA = Path(__file__).parent / "data" / "current_network"


@needs("virt-xml-validate")
def test_the_captured_rbd_domain_is_valid_libvirt_xml() -> None:
    res = subprocess.run(
        ["virt-xml-validate", str(DATA / "rbd.xml"), "domain"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


def test_libvirt_rbd_disk_with_monitors_and_auth() -> None:
    cur = parse_current(str(DATA / "rbd.xml"))
    assert (
        cur.protocol == "rbd" and cur.disk is not None and cur.disk.path == "rbd:vms/web-ceph-disk0"
    )
    assert {k: cur.axes[k] for k in ("format", "cache", "aio", "bus")} == {
        "format": "raw",
        "cache": "writeback",
        "aio": "threads",
        "bus": "virtio-blk",
    }
    # librbd, cache on: the defaults
    assert "rbd_client" not in cur.axes and "rbd_cache" not in cur.axes
    assert (
        "librbd" in cur.notes[0]
        and "10.30.0.12:6789" in cur.notes[0]
        and "user libvirt" in cur.notes[0]
    )


def test_libvirt_rbd_disk_without_host_takes_ceph_conf_monitors() -> None:
    # <auth> inside <source> and no <host>: the monitors are ceph.conf's (libvirt's schema allows
    # both).
    cur = parse_current(str(DATA / "rbd.xml"), disk="vdb")
    assert (
        cur.protocol == "rbd" and cur.disk is not None and cur.disk.path == "rbd:vms/web-ceph-data"
    )
    assert "monitors from ceph.conf" in cur.notes[0] and "user libvirt" in cur.notes[0]


def test_cache_none_says_qemu_turns_librbds_cache_off() -> None:
    # QEMU sets rbd_cache from its cache mode over ceph.conf (block/rbd.c); the cell keeps rbd_cache
    # at its default (the rbd axes' rule prunes rbd_cache=off as a repeat of cache=none), and the
    # note says so.
    none = parse_current(str(DATA / "rbd.xml"), disk="vdb")
    assert (
        "rbd_cache" not in none.axes
        and "QEMU turns librbd's cache off for cache=none" in none.notes[0]
    )
    writeback = parse_current(str(DATA / "rbd.xml"))
    assert "rbd_cache" not in writeback.axes and "cache off" not in writeback.notes[0]


def test_libvirt_krbd_mapped_device() -> None:
    cur = parse_current(str(DATA / "rbd.xml"), disk="vdc")
    assert (
        cur.protocol == "rbd" and cur.axes["rbd_client"] == "krbd" and cur.axes["aio"] == "native"
    )
    assert cur.disk is not None and cur.disk.path == "rbd:vms/web-ceph-logs" and cur.disk.block


def test_libvirt_bad_rbd_name_is_one_line() -> None:
    with pytest.raises(UserError, match=r"cannot read disk vdd source name 'no-image-here'") as e:
        parse_current(str(DATA / "rbd.xml"), disk="vdd")
    assert "POOL/IMAGE" in (e.value.hint or "")


@pytest.mark.parametrize(
    ("value", "url", "expected", "note"),
    [
        (
            "-drive file=rbd:vms/db:id=admin:conf=/etc/ceph/ceph.conf,format=raw,"
            "cache=writeback,if=virtio",
            "rbd:vms/db",
            {"format": "raw", "cache": "writeback", "aio": "threads"},
            "user admin",
        ),
        # A monitor address with its colon escaped, as qemu_rbd_parse_filename reads it.
        (
            r"-drive 'file=rbd:vms/db:mon_host=10.30.0.11\:6789,format=raw,cache=none,if=virtio'",
            "rbd:vms/db",
            {"cache": "none"},
            "librbd",
        ),
        (
            "-drive file=rbd:vms/ns1/db@snap1,format=raw,cache=none,if=virtio",
            "rbd:vms/ns1/db@snap1",
            {},
            "librbd",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=rbd,file.pool=vms,"
            "file.image=db,file.conf=/etc/ceph/ceph.conf,"
            "file.user=libvirt,cache.direct=on -device virtio-blk-pci,drive=d",
            "rbd:vms/db",
            {"format": "raw", "cache": "none", "aio": "threads"},
            "user libvirt",
        ),
        # The protocol node first, named by the format node.
        (
            "-blockdev driver=rbd,node-name=p,pool=vms,namespace=ns1,image=db -blockdev "
            "driver=raw,node-name=d,file=p "
            "-device virtio-blk-pci,drive=d",
            "rbd:vms/ns1/db",
            {"format": "raw", "cache": "writeback"},
            "librbd",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=host_device,"
            "file.filename=/dev/rbd/vms/db,file.aio=native,"
            "cache.direct=on -device virtio-blk-pci,drive=d",
            "rbd:vms/db",
            {"rbd_client": "krbd", "aio": "native"},
            "krbd",
        ),
    ],
)
def test_qemu_rbd_disks(value: str, url: str, expected: dict[str, str], note: str) -> None:
    cur = parse_current(value)
    assert cur.protocol == "rbd" and cur.disk is not None and cur.disk.path == url
    assert {k: cur.axes[k] for k in expected} == expected
    assert note in cur.notes[0]


def test_a_qemu_filename_gives_librbds_cache_policy() -> None:
    cur = parse_current(
        "-drive "
        "file=rbd:vms/db:rbd_cache_policy=writeback:rbd_cache_writethrough_until_flush=false,"
        "format=raw,cache=writeback,if=virtio"
    )
    assert (
        cur.axes["rbd_cache_policy"] == "writeback"
        and cur.axes["rbd_cache_writethrough_until_flush"] == "off"
    )
    with pytest.raises(UserError, match="rbd_cache_policy 'sometimes'"):
        parse_current("-drive file=rbd:vms/db:rbd_cache_policy=sometimes,format=raw,cache=none")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("-drive file=rbd:vms,format=raw,cache=none", "cannot read -drive file 'rbd:vms'"),
        (
            "-drive file=rbd:vms/db:junk,format=raw,cache=none",
            "rbd:POOL/IMAGE[:id=USER][:conf=FILE]",
        ),
        (
            "-drive file=rbd:vms/db:rbd_cache_writethrough_until_flush=maybe,format=raw,cache=none",
            "true or false",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=rbd,file.pool=vms -device "
            "virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=rbd 'pool=vms,image='",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=rbd,file.pool=vms/x,"
            "file.image=db -device virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=rbd pool 'vms/x'",
        ),
    ],
)
def test_bad_rbd_qemu_options_are_one_line(value: str, expected: str) -> None:
    with pytest.raises(UserError) as e:
        parse_current(value)
    assert expected in f"{e.value} {e.value.hint}" and "\n" not in str(e.value)


def test_proxmox_rbd_volumes_with_storage_cfg_beside_it(tmp_path: Path) -> None:
    conf = tmp_path / "102.conf"
    shutil.copy(DATA / "102.conf", conf)
    shutil.copy(DATA / "storage.cfg", tmp_path / "storage.cfg")
    librbd = parse_current(str(conf))  # virtio0, the boot disk on ceph-vm (krbd 0)
    assert (
        librbd.protocol == "rbd"
        and librbd.disk is not None
        and librbd.disk.path == "rbd:vms/vm-102-disk-0"
    )
    assert (
        "rbd_client" not in librbd.axes
        and librbd.axes["format"] == "raw"
        and librbd.axes["aio"] == "threads"
    )
    assert (
        librbd.disk.volume == "ceph-vm:vm-102-disk-0"
        and "Proxmox-managed cluster" in librbd.notes[0]
    )
    krbd = parse_current(str(conf), disk="virtio1")  # ceph-ext: krbd 1, an external cluster
    assert krbd.axes["rbd_client"] == "krbd" and krbd.axes["aio"] == "native"
    assert (
        krbd.disk is not None
        and krbd.disk.path == "rbd:ssd/vm-102-disk-1"
        and "10.30.0.11" in krbd.notes[0]
    )
    # a linked clone: the image is the clone, not its base
    clone = parse_current(str(conf), disk="virtio2")
    assert clone.disk is not None and clone.disk.path == "rbd:vms/vm-102-disk-2"


def test_proxmox_rbd_volume_without_storage_cfg_says_how_to_read_it(tmp_path: Path) -> None:
    shutil.copy(DATA / "102.conf", tmp_path / "102.conf")
    cur = parse_current(str(tmp_path / "102.conf"))
    assert cur.protocol is None
    assert any("may be LVM, ZFS or Ceph RBD" in n and "storage.cfg" in n for n in cur.notes)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("krbd 0", "krbd yes"), "cannot read storage.cfg rbd: ceph-vm krbd 'yes'"),
        (
            ("virtio0: ceph-vm:vm-102-disk-0", "virtio0: ceph-vm:not a volume"),
            "cannot read volume ceph-vm:not a volume",
        ),
    ],
)
def test_bad_proxmox_rbd_input_is_one_line(
    change: tuple[str, str], expected: str, tmp_path: Path
) -> None:
    old, new = change
    (tmp_path / "102.conf").write_text((DATA / "102.conf").read_text().replace(old, new))
    (tmp_path / "storage.cfg").write_text((DATA / "storage.cfg").read_text().replace(old, new))
    with pytest.raises(UserError) as e:
        parse_current(str(tmp_path / "102.conf"))
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_the_cli_prints_one_line_for_an_unreadable_rbd_disk(tmp_path: Path) -> None:
    r = run_cli(
        "recommend",
        "--db",
        str(tmp_path / "x.sqlite"),
        "--current",
        "-drive file=rbd:vms,format=raw",
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot read -drive file 'rbd:vms'" in r.stderr
