"""--current reads NBD exports (issue 48): libvirt's <disk type='network'> with <source
protocol='nbd'>, QEMU's -drive nbd:// URL (and the older nbd:HOST:PORT filename) and -blockdev
driver=nbd; the snippets iomatrix writes for an NBD disk read back as the export they name; an
export on a UNIX socket and bad input are one line. Proxmox has no NBD storage type: nothing to
read there. The captured example is tests/data/current_network/nbd.xml."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from iomatrix.protocols.place import NetworkPlace
from iomatrix.snippets import DiskConfig, minimal_domain_xml, snippets_for
from tests.conftest import needs, run_cli

DATA = Path(__file__).parent / "data" / "current_network"


@needs("virt-xml-validate")
def test_the_captured_nbd_domain_is_valid_libvirt_xml() -> None:
    res = subprocess.run(
        ["virt-xml-validate", str(DATA / "nbd.xml"), "domain"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


def test_libvirt_nbd_disk_with_host_port_and_export() -> None:
    cur = parse_current(str(DATA / "nbd.xml"))
    assert cur.protocol == "nbd" and cur.disk is not None
    assert cur.disk.path == "nbd://10.40.0.9:10809/build-root.qcow2"
    assert cur.axes == {"format": "qcow2", "cache": "none", "aio": "threads", "bus": "virtio-blk"}
    assert "QEMU's own client" in cur.notes[0]


def test_libvirt_nbd_disk_without_port_or_name_is_the_default_export() -> None:
    cur = parse_current(str(DATA / "nbd.xml"), disk="vdb")
    assert cur.protocol == "nbd" and cur.disk is not None
    assert cur.disk.path == "nbd://nbd.example.com:10809/"
    assert cur.axes["format"] == "raw" and cur.axes["cache"] == "writeback"


def test_libvirt_nbd_disk_on_a_unix_socket_is_one_line() -> None:
    with pytest.raises(
        UserError, match=r"cannot read disk vdc source host 'transport='unix''"
    ) as e:
        parse_current(str(DATA / "nbd.xml"), disk="vdc")
    assert "over TCP" in (e.value.hint or "") and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("value", "url"),
    [
        (
            "-drive file=nbd://10.40.0.9/vm1.qcow2,format=qcow2,cache=none,if=virtio",
            "nbd://10.40.0.9:10809/vm1.qcow2",
        ),
        (
            "-drive file=nbd+tcp://[fd00::9]:10810/vm1,format=raw,cache=none,if=virtio",
            "nbd://[fd00::9]:10810/vm1",
        ),
        (
            "-drive file=nbd:10.40.0.9:10811:exportname=vm1,format=raw,cache=none,if=virtio",
            "nbd://10.40.0.9:10811/vm1",
        ),
        # the protocol node inline under the format node, and named by reference
        (
            "-blockdev driver=qcow2,node-name=d,file.driver=nbd,file.server.type=inet,"
            "file.server.host=127.0.0.1,file.server.port=10812,file.export=disk.qcow2,"
            "cache.direct=on -device virtio-blk-pci,drive=d",
            "nbd://127.0.0.1:10812/disk.qcow2",
        ),
        (
            "-blockdev driver=nbd,node-name=proto,server.type=inet,server.host=10.40.0.9,"
            "export=vm2,cache.direct=on -blockdev driver=raw,node-name=disk,file=proto,"
            "cache.direct=on -device virtio-blk-pci,drive=disk",
            "nbd://10.40.0.9:10809/vm2",
        ),
    ],
)
def test_qemu_nbd_disks(value: str, url: str) -> None:
    cur = parse_current(value)
    assert cur.protocol == "nbd" and cur.disk is not None and cur.disk.path == url
    # QEMU's own client: no aio of the file protocol, the default said once
    assert cur.axes["cache"] == "none" and cur.axes["aio"] == "threads"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "-drive file=nbd+unix:///vm1?socket=/run/nbd.sock,format=raw,cache=none",
            "cannot read -drive file 'nbd+unix:///vm1?socket=/run/nbd.sock'",
        ),
        ("-drive file=nbd:unix:/run/nbd.sock,format=raw,cache=none", "over TCP"),
        ("-drive file=nbd://,format=raw,cache=none", "cannot read -drive file 'nbd://'"),
        ("-drive file=nbd://h:99999/vm1,format=raw,cache=none", "a TCP port 1–65535"),
        (
            "-blockdev driver=raw,node-name=d,file.driver=nbd,file.server.type=unix,"
            "file.server.path=/run/nbd.sock -device virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=nbd server.type 'unix'",
        ),
        (
            "-blockdev driver=raw,node-name=d,file.driver=nbd,file.export=vm1 "
            "-device virtio-blk-pci,drive=d",
            "cannot read -blockdev driver=nbd 'server.host='",
        ),
    ],
)
def test_bad_nbd_qemu_options_are_one_line(value: str, expected: str) -> None:
    with pytest.raises(UserError) as e:
        parse_current(value)
    assert expected in f"{e.value} {e.value.hint}" and "\n" not in str(e.value)


def _snippet(tool: str) -> str:
    cell = {"tier": "blocklayer", "format": "qcow2", "preallocation": "off", "cache": "none"}
    cfg = DiskConfig.from_axes({**cell, "aio": "threads", "bus": "virtio-blk"}, "nbd")
    return next(s.text or "" for s in snippets_for(cfg).snippets if s.tool == tool)


def test_the_nbd_snippets_read_back_as_the_export_they_name(tmp_path: Path) -> None:
    """What iomatrix writes for an NBD disk (libvirt's <disk>, QEMU's -blockdev), given to
    --current, is the same export: the reader reads what the house's spellings write."""
    place = NetworkPlace()
    url = f"nbd://{place.host}:10809/{place.image}.qcow2"
    path = tmp_path / "vm.xml"
    path.write_text(minimal_domain_xml(_snippet("libvirt")))
    from_libvirt = parse_current(str(path))
    assert from_libvirt.protocol == "nbd" and from_libvirt.disk is not None
    assert from_libvirt.disk.path == url and from_libvirt.axes["format"] == "qcow2"
    from_qemu = parse_current(_snippet("qemu").replace("\\\n", ""))
    assert from_qemu.protocol == "nbd" and from_qemu.disk is not None
    assert from_qemu.disk.path == url and from_qemu.axes["cache"] == "none"


def test_the_cli_prints_one_line_for_an_unreadable_nbd_disk(tmp_path: Path) -> None:
    r = run_cli(
        "recommend",
        "--db",
        str(tmp_path / "x.sqlite"),
        "--current",
        "-drive file=nbd+unix:///vm1?socket=/run/nbd.sock,format=raw,cache=none",
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot read -drive file 'nbd+unix:///vm1?socket=/run/nbd.sock'" in r.stderr
    assert not (tmp_path / "x.sqlite").exists()
