"""With --current naming the user's disk, the answers change that disk and keep its data (issue 38).

Before: a libvirt XML with an existing qcow2 (discard=unmap) got `qemu-img create -f raw
    …vm-disk.raw 32G` and
discard="ignore"; a Proxmox qm config got `qm set VMID --virtio0 STORAGE:32,…`, a new empty volume.
Here the qemu-img part is run on a real image with known content (written and read back with
qemu-io)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.snippets import DiskConfig, minimal_domain_xml, snippets_for
from tests.conftest import needs
from tests.test_snippets import _validate
from tests.test_snippets_wrapped import shell_words

RAW_FALLOC = {
    "format": "raw",
    "preallocation": "falloc",
    "cache": "none",
    "aio": "io_uring",
    "bus": "virtio-blk",
}
QCOW2_SAME = {
    "format": "qcow2",
    "preallocation": "off",
    "cache": "none",
    "aio": "io_uring",
    "bus": "virtio-blk",
}


def _domain(
    image: Path, driver: str = "type='qcow2' cache='none' io='native' discard='unmap'"
) -> str:
    return f"""<domain type='kvm'>
  <name>vm</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' {driver}/>
      <source file='{image}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
  </devices>
</domain>
"""


def _qemu_io(image: Path, fmt: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["qemu-io", "-f", fmt, "-c", command, str(image)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs("qemu-img")
@needs("qemu-io")
@needs("virt-xml-validate")
def test_the_libvirt_answer_converts_the_existing_image_and_its_data_survives(
    tmp_path: Path,
) -> None:
    old = tmp_path / "vm.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(old), "64M"], check=True, capture_output=True
    )
    # Known content at two places, one past the first cluster, and a hole between them.
    for pattern, offset in (("0xa5", "0"), ("0x3c", "40M")):
        assert _qemu_io(old, "qcow2", f"write -P {pattern} {offset} 1M").returncode == 0
    xml = tmp_path / "vm.xml"
    xml.write_text(_domain(old))
    current = parse_current(str(xml))
    s = snippets_for(DiskConfig.from_axes(RAW_FALLOC), current=current)

    img = s.by_tool("qemu-img")
    text = img.text or ""
    assert text.startswith("qemu-img convert ") and "create" not in text and "32G" not in text
    new = tmp_path / "vm.raw"
    assert shell_words(text) == [
        "qemu-img",
        "convert",
        "-p",
        "-f",
        "qcow2",
        "-O",
        "raw",
        "-o",
        "preallocation=falloc",
        str(old),
        str(new),
    ]
    assert "shut the VM down first" in img.note and f"leaves {old} as it is" in img.note
    subprocess.run(shell_words(text), check=True, capture_output=True, timeout=300)
    # The data survived, in the new raw image; the old image is still there, unchanged.
    for pattern, offset in (("0xa5", "0"), ("0x3c", "40M")):
        for image, fmt in ((new, "raw"), (old, "qcow2")):
            res = _qemu_io(image, fmt, f"read -P {pattern} {offset} 1M")
            assert res.returncode == 0 and "Pattern verification failed" not in res.stdout, (
                res.stdout
            )
    assert _qemu_io(new, "raw", "read -P 0 20M 1M").stdout.count("Pattern verification failed") == 0
    compare = subprocess.run(
        ["qemu-img", "compare", "-f", "qcow2", "-F", "raw", str(old), str(new)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compare.returncode == 0, compare.stdout + compare.stderr

    libvirt = s.by_tool("libvirt")
    body = libvirt.text or ""
    assert f'<source file="{new}" />' in body and '<target dev="vda"' in body
    # The current disk's discard policy is kept (the recommendation did not measure another one).
    assert 'discard="unmap"' in body and 'discard="ignore"' not in body
    assert "the old image is kept" in libvirt.note
    res = _validate(minimal_domain_xml(body), tmp_path)
    assert res.returncode == 0, res.stderr
    qemu = s.by_tool("qemu").text or ""
    assert f"file.filename={new}" in qemu and "discard=unmap" in qemu


@needs("qemu-img")
def test_an_image_that_needs_no_conversion_is_kept_and_only_its_options_change(
    tmp_path: Path,
) -> None:
    old = tmp_path / "vm.qcow2"
    xml = tmp_path / "vm.xml"
    xml.write_text(_domain(old, "type='qcow2' cache='writeback'"))
    s = snippets_for(DiskConfig.from_axes(QCOW2_SAME), current=parse_current(str(xml)))
    img = s.by_tool("qemu-img")
    assert img.text is None and "stays as it is" in img.note and "untouched" in img.note
    libvirt = s.by_tool("libvirt")
    assert (
        f'<source file="{old}" />' in (libvirt.text or "")
        and "the data is untouched" in libvirt.note
    )
    # The current disk did not set discard, which is QEMU's default, as measured: its <disk> stays
    # without it.
    assert "discard" not in (libvirt.text or "") and 'cache="none"' in (libvirt.text or "")


def test_the_proxmox_answer_sets_the_existing_volume_and_moves_it_where_the_format_changes(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "qm100.conf"
    conf.write_text(
        "boot: order=virtio0\nvirtio0: local:100/vm-100-disk-0.qcow2,cache=writeback,discard=on,"
        "size=32G\n"
    )
    s = snippets_for(DiskConfig.from_axes(RAW_FALLOC), current=parse_current(str(conf)))
    pm = s.by_tool("proxmox")
    lines = (pm.text or "").replace(" \\\n", " ").replace("\\\n", "").splitlines()
    # qm set replaces the whole drive line: the user's own options (size=32G, discard=on) stay in
    # it; aio=io_uring is Proxmox's default already, so nothing is written for it.
    assert lines == [
        "qm set 100 --virtio0 local:100/vm-100-disk-0.qcow2,cache=none,discard=on,size=32G,"
        "detect_zeroes=0",
        "qm disk move 100 virtio0 local --format raw",
    ]
    assert "STORAGE:32" not in (pm.text or "") and "allocates a new volume" not in pm.note
    assert "the data is untouched" in pm.note and "stays as unused0" in pm.note
    # Same format: only qm set on the volume, nothing moved.
    same = snippets_for(DiskConfig.from_axes(QCOW2_SAME), current=parse_current(str(conf))).by_tool(
        "proxmox"
    )
    assert (same.text or "").replace(" \\\n", " ").splitlines() == [
        "qm set 100 --virtio0 local:100/vm-100-disk-0.qcow2,cache=none,discard=on,"
        "size=32G,detect_zeroes=0"
    ]


def test_the_proxmox_answer_reattaches_the_volume_where_the_bus_changes(tmp_path: Path) -> None:
    conf = tmp_path / "100.conf"
    conf.write_text(
        "scsihw: virtio-scsi-single\nscsi0: local-lvm:vm-100-disk-0,iothread=1,size=32G\n"
    )
    cfg = DiskConfig.from_axes({**RAW_FALLOC, "preallocation": "off"}, "lvm")
    pm = snippets_for(cfg, current=parse_current(str(conf))).by_tool("proxmox")
    assert (pm.text or "").replace(" \\\n", " ").splitlines() == [
        "qm set 100 --delete scsi0",
        "qm set 100 --virtio0 local-lvm:vm-100-disk-0,size=32G,detect_zeroes=0",
    ]
    assert "becomes unused, not deleted" in pm.note
    # no 'boot:' line: said, nothing written
    assert "your boot order does not name scsi0" in pm.note


@pytest.mark.parametrize("value", ["cache=none,aio=threads", None])
def test_without_an_existing_disk_the_snippets_are_for_a_new_one(value: str | None) -> None:
    cfg = DiskConfig.from_axes(RAW_FALLOC)
    current = parse_current(value) if value else None
    assert snippets_for(cfg, current=current).as_dict() == snippets_for(cfg).as_dict()
    assert (snippets_for(cfg).by_tool("qemu-img").text or "").startswith("qemu-img create")
