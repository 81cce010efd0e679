"""--current: today's configuration from libvirt XML, QEMU options or plain axes; bad input is one
line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from tests.conftest import needs, run_cli

DOMAIN = """<domain type='kvm'>
  <name>web1</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/iso/debian.iso'/>
      <target dev='hdc' bus='ide'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' io='native'/>
      <source file='/var/lib/libvirt/images/web1.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/web1-data.raw'/>
      <target dev='sda' bus='scsi'/>
    </disk>
  </devices>
</domain>
"""


@pytest.fixture
def domain_xml(tmp_path: Path) -> Path:
    p = tmp_path / "web1.xml"
    p.write_text(DOMAIN)
    return p


@needs("virt-xml-validate")
def test_the_test_domain_is_valid_libvirt_xml(domain_xml: Path) -> None:
    res = subprocess.run(
        ["virt-xml-validate", str(domain_xml), "domain"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


def test_libvirt_first_disk_skips_the_cdrom(domain_xml: Path) -> None:
    cur = parse_current(str(domain_xml))
    assert cur.axes == {"format": "qcow2", "cache": "none", "aio": "native", "bus": "virtio-blk"}
    assert cur.defaulted == [] and "vda" in cur.source


def test_libvirt_named_disk_takes_the_hypervisor_defaults(domain_xml: Path) -> None:
    cur = parse_current(str(domain_xml), disk="sda")
    assert cur.axes == {
        "format": "raw",
        "cache": "writeback",
        "aio": "threads",
        "bus": "virtio-scsi",
    }
    assert any("libvirt default" in d for d in cur.defaulted)


def test_libvirt_unknown_disk_lists_the_disks(domain_xml: Path) -> None:
    with pytest.raises(UserError) as e:
        parse_current(str(domain_xml), disk="vdz")
    assert "disks in it: vda, sda (" in e.value.one_line()  # the CD-ROM hdc is no disk


@pytest.mark.parametrize(
    ("text", "axes"),
    [
        (
            "-drive file=/vm/a.qcow2,format=qcow2,cache=none,aio=native,if=virtio",
            {"format": "qcow2", "cache": "none", "aio": "native", "bus": "virtio-blk"},
        ),
        ("file=/vm/a,,b.raw,format=raw", {"format": "raw", "cache": "writeback", "aio": "threads"}),
        (
            "-drive if=none,id=d0,file=/vm/x.qcow2,format=qcow2,cache.direct=on -device "
            "nvme,drive=d0,serial=x",
            {"format": "qcow2", "cache": "none", "aio": "threads", "bus": "nvme"},
        ),
        (
            "-blockdev driver=qcow2,node-name=d0,cache.direct=on,file.driver=file,"
            "file.filename=/x,file.aio=io_uring "
            "-device virtio-scsi-pci,id=s0 -device scsi-hd,drive=d0,bus=s0.0,write-cache=off",
            {"format": "qcow2", "cache": "directsync", "aio": "io_uring", "bus": "virtio-scsi"},
        ),
        (
            "cache=unsafe,aio=io_uring,format=qed,bus=ide,preallocation=off",
            {
                "cache": "unsafe",
                "aio": "io_uring",
                "format": "qed",
                "bus": "ide",
                "preallocation": "off",
            },
        ),
    ],
)
def test_qemu_strings_and_axes(text: str, axes: dict[str, str]) -> None:
    assert parse_current(text).axes == axes


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("cache=nonee", "cache 'nonee'"),
        ("speed=fast", "axis 'speed=fast'"),
        ("-drive file=x,aio=posix", "aio 'posix'"),
        ("-drive file=x,if=floppy", "if 'floppy'"),
        ("aio=threads", "no cache mode"),
        ("cache=writeback,aio=native", "aio=native needs O_DIRECT"),
        ("/nonexistent/vm.xml", "no such file"),
    ],
)
def test_unparseable_input_names_the_field(text: str, names: str) -> None:
    with pytest.raises(UserError) as e:
        parse_current(text)
    line = e.value.one_line()
    assert names in line and "\n" not in line


def test_cli_bad_current_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    res = run_cli("recommend", "--db", str(db), "--current", "cache=fast")
    assert res.returncode != 0
    assert "cache 'fast'" in res.stderr and "Traceback" not in res.stderr
