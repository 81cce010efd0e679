"""`--current` changes only what the sweep measured (issue 49).

Before: `recommend --current 101.conf --target proxmox` (a VM on virtio-scsi-single with iothread=1
    and
`boot: order=scsi0`) printed `qm set 101 --delete scsi0` and `qm set 101 --virtio0 …,aio=threads,…`:
it changed the bus and aio and dropped the IOThread, none of which the sweep varied, and left
`boot:` naming a deleted drive. Here the snippets are applied to the user's files as the tools would
apply them (a Proxmox .conf through qm set's semantics and iomatrix's own qm config parser; a
libvirt domain through virt-xml and virt-xml-validate; the image through qemu-img convert and
compare), and what the sweep did not vary must still be there afterwards."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.report.headline import headline
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import rank_workload
from iomatrix.report.recommend import Recommendation, Verdict, workload_verdict
from iomatrix.report.render import FIRST_SCREEN_LINES, headline_text, recommendation_text
from iomatrix.snippets import DiskConfig, edited_domain
from iomatrix.vmconfig.keeping import keep_unmeasured
from iomatrix.vmconfig.proxmox import from_proxmox
from tests.conftest import DATA, iomatrix_argv, needs

BLOCK = {
    "tier": "blocklayer",
    "preallocation": "off",
    "aio": "threads",
    "bus": "-",
    "backing": "dir",
    "modifier": "none",
}
GUEST = {**BLOCK, "tier": "guest", "bus": "virtio-blk"}

PROXMOX_VM = """boot: order=scsi0;net0
cores: 2
memory: 2048
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0
scsihw: virtio-scsi-single
scsi0: local:101/vm-101-disk-0.qcow2,iothread=1,serial=data101,size=32G
"""


def _cell(cid: int, values: list[float], base: dict[str, str], **axes: str) -> CellWorkload:
    c = CellWorkload(
        cid,
        f"k{cid}",
        {**base, **axes},
        {"kind": "dir"},
        "rand-read-4k",
        ["kvm"],
        runs=[cid * 100 + i for i in range(len(values))],
    )
    c.samples["read.iops"] = list(values)
    return c


def _quick_plan_cells() -> list[CellWorkload]:
    """The quick plan's block-layer cells: raw|qcow2 × none|writeback, aio=threads only, no bus (no
    guest); raw · writeback clearly the best."""
    return [
        _cell(1, [400.0, 402.0, 399.0, 401.0], BLOCK, format="raw", cache="writeback"),
        _cell(2, [200.0, 201.0, 199.0, 200.0], BLOCK, format="raw", cache="none"),
        _cell(3, [150.0, 151.0, 149.0, 150.0], BLOCK, format="qcow2", cache="writeback"),
        _cell(4, [100.0, 101.0, 99.0, 100.0], BLOCK, format="qcow2", cache="none"),
    ]


def _verdict(cells: list[CellWorkload], current: str) -> Verdict:
    wr = rank_workload(cells, "rand-read-4k", None, min_n=2)
    assert wr is not None
    v = workload_verdict(cells, wr, [], parse_current(current))
    assert v.choice is not None and v.snippets is not None
    return v


def _commands(text: str) -> list[list[str]]:
    """A snippet's commands as bash reads them: continued lines joined, each line one command."""
    return [shlex.split(line) for line in text.replace("\\\n", "").splitlines() if line.strip()]


def apply_qm(conf: str, text: str) -> str:
    """A VM's .conf after the snippet's `qm` commands, as qemu-server applies them to a stopped VM:
    `qm set --delete KEY` moves a drive's volume to the first free unusedN; `qm set --KEY VALUE`
    sets KEY whole (a volume that was unusedN is taken back from there); `qm disk move VMID KEY
    STORAGE --format F` puts the drive on a new volume of format F and leaves the old one as
    unusedN."""
    lines = conf.splitlines()
    cfg = dict(line.split(": ", 1) for line in lines if line.strip())

    def unused(volume: str) -> None:
        cfg[next(f"unused{n}" for n in range(100) if f"unused{n}" not in cfg)] = volume

    for argv in _commands(text):
        assert argv[0] == "qm", argv
        if argv[1] == "disk":
            _, _, _, _, key, _storage, flag, fmt = argv
            assert flag == "--format"
            volume, _, opts = cfg[key].partition(",")
            unused(volume)
            cfg[key] = ",".join(
                filter(
                    None, [volume.rsplit(".", 1)[0].replace("disk-0", "disk-1") + f".{fmt}", opts]
                )
            )
            continue
        assert argv[1] == "set" and argv[2] == "101", argv
        for flag, value in zip(argv[3::2], argv[4::2], strict=True):
            key = flag.removeprefix("--")
            if key == "delete":
                unused(cfg.pop(value).split(",")[0])
                continue
            volume = value.split(",")[0]
            for k in [k for k, v in cfg.items() if k.startswith("unused") and v == volume]:
                del cfg[k]
            cfg[key] = value
    return "".join(f"{k}: {v}\n" for k, v in cfg.items())


def test_the_quick_plan_answer_keeps_the_proxmox_bus_iothread_aio_slot_and_boot_order(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "101.conf"
    conf.write_text(PROXMOX_VM)
    v = _verdict(_quick_plan_cells(), str(conf))
    assert v.snippets is not None
    pm = v.snippets.by_tool("proxmox")
    # Only what the sweep varied changes: cache (writeback) on the same drive, and the format by qm
    # disk move.
    assert _commands(pm.text or "") == [
        [
            "qm",
            "set",
            "101",
            "--scsi0",
            "local:101/vm-101-disk-0.qcow2,iothread=1,serial=data101,size=32G,cache=writeback",
        ],
        ["qm", "disk", "move", "101", "scsi0", "local", "--format", "raw"],
    ]
    assert v.snippets.kept == (
        "kept as you have it: aio=io_uring, bus=virtio-scsi-single, detect_zeroes=on, "
        "iothread=on — not measured by this sweep"
    )
    # Applied to the VM's .conf and read back by the qm config parser: bus, IOThread, aio, serial
    # and the boot disk are the user's; cache and format are the answer's.
    after = apply_qm(PROXMOX_VM, pm.text or "")
    read = from_proxmox(after, "101.conf")
    assert read.disk is not None and read.disk.device == "scsi0"
    assert {k: str(read.axes[k]) for k in ("bus", "iothread", "aio", "cache", "format")} == {
        "bus": "virtio-scsi-single",
        "iothread": "on",
        "aio": "io_uring",
        "cache": "writeback",
        "format": "raw",
    }
    assert "boot: order=scsi0;net0" in after and "serial=data101" in (read.disk.settings or "")


def test_a_measured_bus_change_moves_the_slot_and_the_boot_order_follows(tmp_path: Path) -> None:
    conf = tmp_path / "101.conf"
    conf.write_text(PROXMOX_VM)
    # A guest tier that measured virtio-blk against virtio-scsi-single: the bus may change; IOThread
    # was not varied.
    cells = [
        _cell(1, [400.0, 402.0, 399.0, 401.0], GUEST, format="qcow2", cache="none"),
        _cell(
            2,
            [200.0, 201.0, 199.0, 200.0],
            GUEST,
            format="qcow2",
            cache="none",
            bus="virtio-scsi-single",
        ),
    ]
    pm = _verdict(cells, str(conf)).snippets.by_tool("proxmox")  # type: ignore[union-attr]
    assert _commands(pm.text or "") == [
        ["qm", "set", "101", "--delete", "scsi0"],
        [
            "qm",
            "set",
            "101",
            "--virtio0",
            "local:101/vm-101-disk-0.qcow2,iothread=1,serial=data101,size=32G",
        ],
        ["qm", "set", "101", "--boot", "order=virtio0;net0"],
    ]
    after = apply_qm(PROXMOX_VM, pm.text or "")
    read = from_proxmox(after, "101.conf")
    # The boot disk qemu-server picks is the moved drive, with its IOThread; no drive the boot order
    # names is gone.
    assert read.disk is not None and read.disk.device == "virtio0"
    assert read.axes["bus"] == "virtio-blk" and read.axes["iothread"] == "on"
    boot = next(line for line in after.splitlines() if line.startswith("boot: ")).removeprefix(
        "boot: order="
    )
    assert all(f"{k}: " in after for k in boot.split(";")) and "unused" not in after


LIBVIRT_VM = """<domain type='kvm'>
  <name>web1</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <iothreads>1</iothreads>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <controller type='scsi' index='0' model='virtio-scsi'>
      <driver iothread='1'/>
    </controller>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='writeback' io='io_uring' discard='unmap'/>
      <source file='{image}'/>
      <target dev='sda' bus='scsi'/>
      <serial>web1-root</serial>
      <boot order='1'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
  </devices>
</domain>
"""


def _disk_of(domain_xml: str) -> ET.Element:
    root = ET.fromstring(domain_xml)
    disk = root.find("devices/disk")
    assert disk is not None
    return disk


def _summary(disk: ET.Element) -> dict[str, object]:
    """What a <disk> sets, element by element (attribute order and whitespace mean nothing to
    libvirt)."""
    return {child.tag: (dict(child.attrib), (child.text or "").strip()) for child in disk}


@needs("qemu-img")
@needs("virt-xml-validate")
def test_the_libvirt_disk_keeps_its_bus_iothread_address_and_boot_order(tmp_path: Path) -> None:
    old = tmp_path / "vm.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(old), "16M"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 1M 2M", str(old)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    domain = tmp_path / "web1.xml"
    domain.write_text(LIBVIRT_VM.format(image=old))
    v = _verdict(_quick_plan_cells(), str(domain))
    assert v.snippets is not None
    assert v.snippets.kept == (
        "kept as you have it: aio=io_uring, bus=virtio-scsi-single, discard=unmap, "
        "iothread=on — not measured by this sweep"
    )
    # The data step: the real image converted, and the copy compared with the original.
    step = v.snippets.data_step()
    assert step is not None
    new = tmp_path / "vm.raw"
    assert _commands(step.text or "") == [
        ["qemu-img", "convert", "-p", "-f", "qcow2", "-O", "raw", str(old), str(new)]
    ]
    subprocess.run(_commands(step.text or "")[0], check=True, capture_output=True, timeout=300)
    compare = subprocess.run(
        ["qemu-img", "compare", "-f", "qcow2", "-F", "raw", str(old), str(new)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compare.returncode == 0, compare.stdout + compare.stderr
    # The user's own <disk>, edited: format, cache and source change; the rest is theirs.
    lv = v.snippets.by_tool("libvirt")
    edited = _summary(ET.fromstring(lv.text or ""))
    assert edited == {
        "driver": (
            {
                "name": "qemu",
                "type": "raw",
                "cache": "writeback",
                "io": "io_uring",
                "discard": "unmap",
            },
            "",
        ),
        "source": ({"file": str(new)}, ""),
        "target": ({"dev": "sda", "bus": "scsi"}, ""),
        "serial": ({}, "web1-root"),
        "boot": ({"order": "1"}, ""),
        "address": (
            {"type": "drive", "controller": "0", "bus": "0", "target": "0", "unit": "0"},
            "",
        ),
    }
    # The whole domain with it is valid libvirt XML and reads back as the user's bus and IOThread.
    whole = tmp_path / "web1-new.xml"
    whole.write_text(edited_domain(domain.read_text(), "sda", lv.text or ""))
    res = subprocess.run(
        ["virt-xml-validate", str(whole), "domain"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    read = parse_current(str(whole))
    assert {k: str(read.axes[k]) for k in ("bus", "iothread", "aio", "cache", "format")} == {
        "bus": "virtio-scsi-single",
        "iothread": "on",
        "aio": "io_uring",
        "cache": "writeback",
        "format": "raw",
    }
    _check_virt_xml(v, domain, new, tmp_path)


def _check_virt_xml(v: Verdict, domain: Path, new: Path, tmp_path: Path) -> None:
    """virt-xml's form of the edit, run on the domain defined in libvirt's test driver (nothing real
    defined), gives the same <disk> as the XML snippet."""
    assert v.snippets is not None
    command = v.snippets.by_tool("virt-xml").text or ""
    argv = _commands(command)[0]
    assert argv[:5] == ["virt-xml", "web1", "--edit", "target=sda", "--disk"]
    if shutil.which("virt-xml") is None:
        return
    node = tmp_path / "node.xml"
    node.write_text(f"<node>\n{domain.read_text()}</node>\n")
    res = subprocess.run(
        [argv[0], "--connect", f"test://{node}", *argv[1:], "--print-xml"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    theirs = _summary(_disk_of(res.stdout))
    ours = _summary(ET.fromstring(v.snippets.by_tool("libvirt").text or ""))
    assert theirs == ours, (theirs, ours)
    assert str(new) in command


def test_the_data_step_stands_next_to_the_snippet_on_the_first_screen(tmp_path: Path) -> None:
    image = tmp_path / "vm.qcow2"
    domain = tmp_path / "web1.xml"
    domain.write_text(LIBVIRT_VM.format(image=image))
    v = _verdict(_quick_plan_cells(), str(domain))
    rec = Recommendation(1, "quick", "finished", [], parse_current(str(domain)), [v])
    lines = headline_text(headline(rec, "host", "libvirt"), 100).splitlines()
    assert len(lines) <= FIRST_SCREEN_LINES, "\n".join(lines)
    assert max(len(line) for line in lines) <= 100
    convert = next(
        i for i, line in enumerate(lines) if line.strip().startswith("qemu-img convert ")
    )
    # The edit in its shortest form, virt-xml's one command (the edited XML is in --detail).
    edit = next(
        i
        for i, line in enumerate(lines)
        if line.strip().startswith("virt-xml web1 --edit target=sda")
    )
    # the copy is made before the configuration points at it
    assert convert < edit, "\n".join(lines)
    assert any(line.strip().startswith("kept as you have it: aio=io_uring") for line in lines)
    # --detail: the edited <disk> too, after the same line saying what was kept.
    detail = recommendation_text(rec, width=100, target="libvirt")
    assert (
        '<target dev="sda" bus="scsi" />' in detail
        and "kept as you have it: aio=io_uring" in detail
    )
    # what virt-xml's title promises (issue 70): --detail's answer shows the edited <disk> whole
    # right after the virt-xml line
    whole = headline_text(headline(rec, "host", "libvirt"), 100, fit=False)
    assert "the edited XML: --detail" in whole
    after = whole.split("virt-xml web1 --edit target=sda", 1)[1]
    assert "the same edit whole: libvirt domain XML" in after, whole
    assert '<target dev="sda" bus="scsi" />' in after, whole


def test_a_value_qemu_refuses_beside_the_measured_one_changes_and_says_why() -> None:
    # aio=native needs O_DIRECT: with a measured cache=writeback the user's aio cannot stay.
    answer = DiskConfig.from_axes(
        {
            "format": "raw",
            "preallocation": "off",
            "cache": "writeback",
            "aio": "threads",
            "bus": "virtio-blk",
        }
    )
    kept = keep_unmeasured(
        answer,
        {"format": "raw", "cache": "none", "aio": "native", "bus": "virtio-scsi"},
        {"cache", "format"},
    )
    assert kept.config.aio == "threads" and kept.config.bus == "virtio-scsi"
    assert kept.kept == (("bus", "virtio-scsi"),)
    assert kept.line().startswith(
        "kept as you have it: bus=virtio-scsi — not measured by this sweep; "
        "aio changes to threads all the same: "
    )


@pytest.mark.parametrize("varied", [{"format", "cache", "aio", "bus", "iothread", "detect_zeroes"}])
def test_what_the_sweep_varied_changes(tmp_path: Path, varied: set[str]) -> None:
    conf = tmp_path / "101.conf"
    conf.write_text(PROXMOX_VM)
    answer = DiskConfig.from_axes(
        {
            "format": "qcow2",
            "preallocation": "off",
            "cache": "none",
            "aio": "threads",
            "bus": "virtio-scsi-single",
        }
    )
    kept = keep_unmeasured(answer, parse_current(str(conf)).axes, varied)
    assert kept.kept == () and kept.config == answer and kept.line() == ""


def test_recommend_current_on_the_quick_sweep_keeps_the_proxmox_vm_as_it_is(tmp_path: Path) -> None:
    # The user's command, on a real quick-plan sweep (tests/data/golden, read only: a copy).
    db = tmp_path / "quick.sqlite"
    shutil.copy(DATA / "golden" / "quick-sweep.sqlite", db)
    conf = tmp_path / "101.conf"
    conf.write_text(PROXMOX_VM)
    res = subprocess.run(
        [
            *iomatrix_argv(),
            "recommend",
            "--db",
            str(db),
            "--current",
            str(conf),
            "--target",
            "proxmox",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "--delete" not in out and "virtio0" not in out and "aio=threads," not in out, out
    words = " ".join(out.replace(" \\\n", " ").split())  # the commands as the shell reads them
    assert (
        "qm set 101 --scsi0 local:101/vm-101-disk-0.qcow2,iothread=1,serial=data101,size=32G,cache="
        in words
    ), out
    assert "kept as you have it: aio=io_uring, bus=virtio-scsi-single" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_nothing_measured_differs_nothing_to_run(tmp_path: Path) -> None:
    # The answer differs from the VM only in what the sweep did not vary: no qm command, and the
    # line says why.
    conf = tmp_path / "101.conf"
    conf.write_text(PROXMOX_VM.replace(".qcow2", ".raw"))
    cells = [
        _cell(1, [400.0, 402.0, 399.0, 401.0], BLOCK, format="raw", cache="none"),
        _cell(2, [200.0, 201.0, 199.0, 200.0], BLOCK, format="raw", cache="writeback"),
    ]
    v = _verdict(cells, str(conf))
    assert v.snippets is not None
    pm = v.snippets.by_tool("proxmox")
    assert pm.text is None and "scsi0's own options stay as they are" in pm.note
    assert v.snippets.kept.startswith("kept as you have it: aio=io_uring, bus=virtio-scsi-single")


def test_an_axis_kept_is_the_users_not_an_assumed_default(tmp_path: Path) -> None:
    # The block layer has no bus ("-"): the answer alone would assume virtio-blk; kept, it is the
    # user's.
    domain = tmp_path / "web1.xml"
    domain.write_text(LIBVIRT_VM.format(image=tmp_path / "vm.qcow2"))
    v = _verdict(_quick_plan_cells(), str(domain))
    assert v.snippets is not None and "bus" not in v.snippets.config.assumed
    assert v.snippets.config.bus == "virtio-scsi-single"
    assert v.snippets.snippets[0].tool == "qemu-img"  # the data step comes first in --detail too
