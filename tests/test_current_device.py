"""--current reads the device axes back (libvirt's controllers and <iothreads>, QEMU's -device) and
a new form, Proxmox VE's `qm config VMID` output, with Proxmox's own defaults; bad input is one
line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from tests.conftest import needs, run_cli

# A libvirt VM as `virsh dumpxml` writes it (addresses filled in): vda on virtio-blk with an
# IOThread, sda and sdb sharing scsi controller 0, sdc alone on controller 1 with the second
# IOThread and 4 queues.
DOMAIN = """<domain type='kvm'>
  <name>db1</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>4</vcpu>
  <iothreads>2</iothreads>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' io='io_uring' iothread='1' queues='2'/>
      <source file='/var/lib/libvirt/images/db1.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source file='/var/lib/libvirt/images/db1-a.raw'/>
      <target dev='sda' bus='scsi'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source file='/var/lib/libvirt/images/db1-b.raw'/>
      <target dev='sdb' bus='scsi'/>
      <address type='drive' controller='0' bus='0' target='0' unit='1'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='none' io='native'/>
      <source file='/var/lib/libvirt/images/db1-c.raw'/>
      <target dev='sdc' bus='scsi'/>
      <address type='drive' controller='1' bus='0' target='0' unit='0'/>
    </disk>
    <controller type='scsi' index='0' model='virtio-scsi'>
      <driver queues='2'/>
    </controller>
    <controller type='scsi' index='1' model='virtio-scsi'>
      <driver iothread='2' queues='4'/>
    </controller>
  </devices>
</domain>
"""


@pytest.fixture
def domain_xml(tmp_path: Path) -> Path:
    p = tmp_path / "db1.xml"
    p.write_text(DOMAIN)
    return p


@needs("virt-xml-validate")
def test_the_test_domain_is_valid_libvirt_xml(domain_xml: Path) -> None:
    res = subprocess.run(
        ["virt-xml-validate", str(domain_xml), "domain"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    ("dev", "device_axes"),
    [
        ("vda", {"bus": "virtio-blk", "iothread": "on", "queues": "2"}),
        ("sda", {"bus": "virtio-scsi", "queues": "2"}),  # controller 0 is shared with sdb
        ("sdb", {"bus": "virtio-scsi", "queues": "2"}),
        # a controller of its own
        ("sdc", {"bus": "virtio-scsi-single", "iothread": "on", "queues": "4"}),
    ],
)
def test_libvirt_device_axes_come_from_where_the_bus_puts_them(
    domain_xml: Path, dev: str, device_axes: dict[str, str]
) -> None:
    cur = parse_current(str(domain_xml), disk=dev)
    assert {k: v for k, v in cur.axes.items() if k in ("bus", "iothread", "queues")} == device_axes


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        (
            ("<iothreads>2</iothreads>", "<iothreads>1</iothreads>"),
            "iothread='2' names no IOThread",
        ),
        (
            (
                "model='virtio-scsi'>\n      <driver iothread",
                "model='lsilogic'>\n      <driver iothread",
            ),
            "scsi controller 1 model 'lsilogic'",
        ),
        (("iothread='2' queues='4'", "iothread='2' queues='3'"), "driver queues '3'"),
    ],
)
def test_libvirt_device_errors_are_one_line(
    domain_xml: Path, edit: tuple[str, str], names: str
) -> None:
    domain_xml.write_text(DOMAIN.replace(*edit))
    with pytest.raises(UserError) as e:
        parse_current(str(domain_xml), disk="sdc")
    assert names in e.value.one_line() and "\n" not in e.value.one_line()


def test_libvirt_vq_mapping_of_a_newer_libvirt_is_read(domain_xml: Path) -> None:
    domain_xml.write_text(
        DOMAIN.replace(
            "iothread='1' queues='2'/>",
            "queues='2'><iothreads><iothread id='1'><queue id='0'/></iothread><iothread "
            "id='2'><queue id='1'/>"
            "</iothread></iothreads></driver>",
        )
    )
    assert parse_current(str(domain_xml)).axes["iothread"] == "vq-mapping"


# --------------------------------------------------------------------------- Proxmox VE `qm config`

QM_CONFIG = """boot: order=scsi0;ide2;net0
cores: 4
ide2: local:iso/debian-12.iso,media=cdrom,size=628M
memory: 4096
meta: creation-qemu=8.1.5,ctime=1717000000
name: web1
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1
numa: 0
ostype: l26
scsi0: local-lvm:vm-100-disk-0,cache=writeback,discard=on,iothread=1,aio=io_uring,size=32G
scsi1: local:100/vm-100-disk-1.qcow2,iothread=1,queues=4,size=8G
scsihw: virtio-scsi-single
virtio0: local-zfs:vm-100-disk-2,size=16G
[before-upgrade]
scsihw: virtio-scsi-pci
"""


@pytest.fixture
def qm_config(tmp_path: Path) -> Path:
    p = tmp_path / "100.conf"
    p.write_text(QM_CONFIG)
    return p


def test_proxmox_boot_disk_with_its_options(qm_config: Path) -> None:
    cur = parse_current(str(qm_config))
    assert cur.axes == {
        "format": "raw",
        "cache": "writeback",
        "aio": "io_uring",
        "bus": "virtio-scsi-single",
        "discard": "unmap",
        "detect_zeroes": "unmap",
        "iothread": "on",
    }
    assert "scsi0" in cur.source and "Proxmox" in cur.source
    # Proxmox's default: on (unmap: discard)
    assert [d.split(" ")[0] for d in cur.defaulted] == ["detect_zeroes"]


def test_proxmox_defaults_where_a_drive_sets_nothing(qm_config: Path) -> None:
    cur = parse_current(str(qm_config), disk="virtio0")
    # qemu-server: cache none, aio io_uring (Proxmox VE ≥ 7.0), zero detection on; a volume without
    # an extension (ZFS, LVM) is raw.
    assert cur.axes == {
        "format": "raw",
        "cache": "none",
        "aio": "io_uring",
        "bus": "virtio-blk",
        "detect_zeroes": "on",
    }
    assert {d.split(" ")[0] for d in cur.defaulted} == {"cache", "aio", "detect_zeroes"}
    data = parse_current(str(qm_config), disk="scsi1")
    assert (data.axes["format"], data.axes["queues"], data.axes["iothread"]) == ("qcow2", "4", "on")


def test_proxmox_ignores_scsi_iothread_and_queues_on_a_shared_controller(qm_config: Path) -> None:
    # qemu-server gives a scsi drive's iothread/queues to its controller with virtio-scsi-single
    # only.
    qm_config.write_text(
        QM_CONFIG.replace("scsihw: virtio-scsi-single\n", "scsihw: virtio-scsi-pci\n", 1)
    )
    cur = parse_current(str(qm_config), disk="scsi1")
    assert (
        cur.axes["bus"] == "virtio-scsi" and "iothread" not in cur.axes and "queues" not in cur.axes
    )


def test_proxmox_legacy_bootdisk_and_first_disk(qm_config: Path) -> None:
    qm_config.write_text(QM_CONFIG.replace("boot: order=scsi0;ide2;net0", "bootdisk: virtio0"))
    assert parse_current(str(qm_config)).axes["bus"] == "virtio-blk"
    qm_config.write_text(QM_CONFIG.replace("boot: order=scsi0;ide2;net0\n", ""))
    assert "scsi0" in parse_current(str(qm_config)).source  # ide2 is a CD-ROM: scsi0 comes next


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        (("scsihw: virtio-scsi-single\n", ""), "scsihw 'lsi'"),
        (("cache=writeback", "cache=fast"), "cache 'fast'"),
        (("discard=on", "discard=maybe"), "discard 'maybe'"),
        (("iothread=1,aio", "iothread=perhaps,aio"), "iothread 'perhaps'"),
        (("cache=writeback", "cache=writeback,aio=native"), "aio=native needs O_DIRECT"),
    ],
)
def test_proxmox_errors_are_one_line(qm_config: Path, edit: tuple[str, str], names: str) -> None:
    text = (
        QM_CONFIG.replace(*edit, 1)
        if edit[1] != "cache=writeback,aio=native"
        else QM_CONFIG.replace("aio=io_uring,", "").replace(*edit, 1)
    )
    qm_config.write_text(text)
    with pytest.raises(UserError) as e:
        parse_current(str(qm_config))
    assert names in e.value.one_line() and "\n" not in e.value.one_line()


def test_proxmox_unknown_disk_lists_the_disks(qm_config: Path) -> None:
    with pytest.raises(UserError) as e:
        parse_current(str(qm_config), disk="sata3")
    assert "scsi0, scsi1, virtio0" in e.value.one_line()


def test_cli_reads_a_qm_config(qm_config: Path, tmp_path: Path) -> None:
    qm_config.write_text(QM_CONFIG.replace("cache=writeback", "cache=fast"))
    res = run_cli("recommend", "--db", str(tmp_path / "x.sqlite"), "--current", str(qm_config))
    assert res.returncode != 0
    assert "cache 'fast'" in res.stderr and "Traceback" not in res.stderr
