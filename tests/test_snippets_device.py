"""The device axes (iothread, queues, bus virtio-scsi-single) in every tool's snippet, each with the
tool's own structure, checked by the tools that consume them: libvirt's schema, QEMU itself,
virt-install (against libvirt's test driver) and the documented Proxmox drive schema; and read back
by `--current` (round trips)."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest

from iomatrix import qemu_caps
from iomatrix.current import parse_current
from iomatrix.domain import axes
from iomatrix.errors import UserError
from iomatrix.snippets import DiskConfig, minimal_domain_xml, qemu_argv, snippets_for
from tests.conftest import needs
from tests.test_snippets import _create_image, _qemu_accepts, _validate
from tests.test_snippets_wrapped import shell_words

VIRTIO = ("virtio-blk", "virtio-scsi", "virtio-scsi-single")
BASE = {"format": "qcow2", "preallocation": "off", "cache": "none", "aio": "native"}
# Every value of the device axes on every virtio bus (vq-mapping needs 2 or more queues).
DEVICE_CELLS = [
    {**BASE, "bus": b, "iothread": i, "queues": q}
    for b, i, q in itertools.product(VIRTIO, axes.get("iothread").values, axes.get("queues").values)
    if i != "vq-mapping" or q not in ("auto", "1")
]
# What --current reads back: the axes a tool spells (the snippets write discard/detect-zeroes as
# measured).
READ_BACK = ("format", "cache", "aio", "bus", "iothread", "queues")


def _cfg(cell: dict[str, str], backing: str = "dir") -> DiskConfig:
    return DiskConfig.from_axes(cell, backing)


def _expected(cell: dict[str, str], *keys: str) -> dict[str, str]:
    """The cell's values of `keys`, a later axis at its default left out (as --current leaves it
    out)."""
    return {
        k: cell[k]
        for k in keys
        if k in cell and (axes.get(k).always_named or cell[k] != axes.get(k).default)
    }


def _id(cell: dict[str, str]) -> str:
    return f"{cell['bus']},iothread={cell['iothread']},queues={cell['queues']}"


# --------------------------------------------------------------------------- libvirt


@needs("virt-xml-validate")
def test_every_device_value_validates_in_libvirt(tmp_path: Path) -> None:
    texts = []
    for cell, backing in itertools.product(DEVICE_CELLS, ("dir", "lvm")):
        s = snippets_for(_cfg(cell, backing)).by_tool("libvirt")
        if cell["iothread"] == "vq-mapping":  # libvirt 9.0's schema has no mapping
            assert s.text is None and "libvirt ≥ 10.0" in s.note
            continue
        assert s.text is not None
        texts.append(s.text)
        res = _validate(minimal_domain_xml(s.text), tmp_path)  # each on its own: one domain, one VM
        assert res.returncode == 0, f"{_id(cell)}\n{res.stderr}"
    assert len(texts) == 2 * 3 * 2 * 5


def test_libvirt_puts_each_option_where_libvirt_wants_it() -> None:
    blk = snippets_for(
        _cfg({**BASE, "bus": "virtio-blk", "iothread": "on", "queues": "4"})
    ).by_tool("libvirt")
    assert blk.text and "<iothreads>1</iothreads>" in blk.text and "<controller" not in blk.text
    assert re.search(r'<driver name="qemu"[^>]* iothread="1" queues="4"', blk.text)
    shared = snippets_for(
        _cfg({**BASE, "bus": "virtio-scsi", "iothread": "on", "queues": "2"})
    ).by_tool("libvirt")
    assert shared.text and re.search(
        r'<controller type="scsi" model="virtio-scsi">\s*<driver iothread="1" '
        r'queues="2" />',
        shared.text,
    )
    disk = shared.text[shared.text.index("<disk") :]
    assert "iothread" not in disk and "queues" not in disk and "<address" not in disk
    single = snippets_for(
        _cfg({**BASE, "bus": "virtio-scsi-single", "iothread": "on", "queues": "auto"})
    )
    text = single.by_tool("libvirt").text or ""
    assert (
        '<controller type="scsi" index="0" model="virtio-scsi">' in text
        and '<driver iothread="1" />' in text
    )
    assert '<address type="drive" controller="0" bus="0" target="0" unit="0" />' in text
    assert "a virtio-scsi controller per disk" in single.by_tool("libvirt").note
    # Without device axes a virtio-scsi snippet is the one it always was.
    plain = snippets_for(_cfg({**BASE, "bus": "virtio-scsi", "iothread": "off", "queues": "auto"}))
    assert (plain.by_tool("libvirt").text or "").startswith(
        "<controller type='scsi' model='virtio-scsi'/>\n<disk"
    )


@needs("virt-xml-validate")
def test_the_validator_refuses_iothreads_among_the_devices(tmp_path: Path) -> None:
    # The placement above can fail: <iothreads> inside <devices> is not libvirt XML.
    text = (
        snippets_for(_cfg({**BASE, "bus": "virtio-blk", "iothread": "on", "queues": "auto"}))
        .by_tool("libvirt")
        .text
    )
    assert text is not None
    domain = minimal_domain_xml(text)
    moved = domain.replace("  <iothreads>1</iothreads>\n", "").replace(
        "<devices>\n", "<devices>\n<iothreads>1</iothreads>\n"
    )
    assert _validate(domain, tmp_path, "ok.xml").returncode == 0
    assert _validate(moved, tmp_path, "bad.xml").returncode != 0


@pytest.mark.parametrize(
    "cell", [c for c in DEVICE_CELLS if c["iothread"] != "vq-mapping"], ids=_id
)
def test_libvirt_snippet_reads_back_as_the_same_cell(cell: dict[str, str], tmp_path: Path) -> None:
    xml = tmp_path / "vm.xml"
    xml.write_text(minimal_domain_xml(snippets_for(_cfg(cell)).by_tool("libvirt").text or ""))
    cur = parse_current(str(xml))
    assert {k: v for k, v in cur.axes.items() if k in READ_BACK} == _expected(cell, *READ_BACK)


# --------------------------------------------------------------------------- QEMU

QEMU_DEVICE_CELLS = [
    {**BASE, "bus": "virtio-blk", "iothread": "on", "queues": "4"},
    {**BASE, "bus": "virtio-scsi", "iothread": "on", "queues": "2"},
    {**BASE, "bus": "virtio-scsi-single", "iothread": "on", "queues": "4"},
    {**BASE, "bus": "virtio-scsi-single", "iothread": "off", "queues": "1"},
]


@needs("qemu-system-x86_64")
@pytest.mark.parametrize("cell", QEMU_DEVICE_CELLS, ids=_id)
def test_qemu_accepts_the_device_snippets(cell: dict[str, str], tmp_path: Path) -> None:
    cfg = _cfg(cell)
    image = tmp_path / "disk.qcow2"
    _create_image(cfg, image)
    argv = qemu_argv(cfg, str(image))
    assert ("-object" in argv) == (cell["iothread"] == "on")
    _qemu_accepts(argv)


@needs("qemu-system-x86_64")
def test_qemu_takes_vq_mapping_only_from_the_version_that_has_it(tmp_path: Path) -> None:
    cfg = _cfg({**BASE, "bus": "virtio-blk", "iothread": "vq-mapping", "queues": "2"})
    image = tmp_path / "disk.qcow2"
    _create_image(cfg, image)
    argv = qemu_argv(cfg, str(image))
    assert any(
        a.startswith('{"driver":"virtio-blk-pci"') and "iothread-vq-mapping" in a for a in argv
    )
    note = snippets_for(cfg).by_tool("qemu").note
    assert "iothread-vq-mapping needs QEMU ≥ 9.0" in note
    if qemu_caps.probe().has_property("virtio-blk-pci", "iothread-vq-mapping"):
        _qemu_accepts(argv)
    else:  # QEMU < 9.0 refuses it by name: the note's version is the one that matters
        with pytest.raises(AssertionError, match=r"Property '\S*iothread-vq-mapping' not found"):
            _qemu_accepts(argv)


@pytest.mark.parametrize(
    "cell", [c for c in DEVICE_CELLS if c["bus"] != "virtio-scsi-single"], ids=_id
)
def test_qemu_snippet_reads_back_as_the_same_cell(cell: dict[str, str]) -> None:
    text = (snippets_for(_cfg(cell)).by_tool("qemu").text or "").replace(" \\\n", " ")
    cur = parse_current(text)
    assert {k: v for k, v in cur.axes.items() if k in READ_BACK} == _expected(cell, *READ_BACK)


def test_qemu_command_lines_tell_a_controller_of_its_own_only_among_several_disks() -> None:
    single = (
        snippets_for(_cfg({**BASE, "bus": "virtio-scsi-single", "iothread": "on", "queues": "4"}))
        .by_tool("qemu")
        .text
        or ""
    ).replace(" \\\n", " ")
    # One scsi disk: the same arguments as a shared controller with one disk on it.
    assert parse_current(single).axes["bus"] == "virtio-scsi"
    two = single + (
        " -blockdev driver=raw,node-name=d2,file.driver=file,file.filename=/x -device "
        "virtio-scsi-pci,id=s2 -device scsi-hd,drive=d2,bus=s2.0"
    )
    cur = parse_current(two).axes
    assert (cur["bus"], cur["iothread"], cur["queues"]) == ("virtio-scsi-single", "on", "4")
    shared = two.replace("bus=s2.0", "bus=scsi-disk0.0")
    assert parse_current(shared).axes["bus"] == "virtio-scsi"


# --------------------------------------------------------------------------- Proxmox

# qemu-server PVE/QemuServer/Drive.pm: the options each drive kind's schema has beyond the common
# ones (aio, cache, detect_zeroes, discard, format, …): scsi has iothread and queues (an integer,
# minimum 2), virtio only iothread, ide and sata neither. PVE booleans: 1/0.
PVE_DEVICE_OPTIONS = {
    "scsi": {"iothread", "queues"},
    "virtio": {"iothread"},
    "ide": set(),
    "sata": set(),
}


def _qm_set(text: str) -> dict[str, str]:
    """`qm set VMID --key value …` (its first command) → {key: value}."""
    # its first command (continued lines and all)
    words = shell_words(re.split(r"(?<!\\)\n", text, maxsplit=1)[0])
    assert words[:2] == ["qm", "set"] and words[2] == "VMID"
    return {words[i].removeprefix("--"): words[i + 1] for i in range(3, len(words), 2)}


@pytest.mark.parametrize("cell", DEVICE_CELLS, ids=_id)
def test_proxmox_spells_what_it_can_and_says_what_it_cannot(cell: dict[str, str]) -> None:
    s = snippets_for(_cfg(cell)).by_tool("proxmox")
    iothread, queues, bus = cell["iothread"], cell["queues"], cell["bus"]
    cannot = (
        iothread == "vq-mapping"
        or (bus == "virtio-scsi" and (iothread, queues) != ("off", "auto"))
        or (bus == "virtio-blk" and queues != "auto")
        or queues == "1"
    )
    if cannot:
        assert s.text is None and s.note.startswith("not available: ") and "\n" not in s.note
        return
    args = _qm_set(s.text or "")
    key = next(k for k in args if re.fullmatch(r"(scsi|virtio)\d+", k))
    props = dict(p.split("=") for p in args[key].split(",")[1:])
    kind = key.rstrip("0123456789")
    assert (
        set(props) - {"format", "cache", "aio", "discard", "detect_zeroes"}
        <= PVE_DEVICE_OPTIONS[kind]
    )
    assert props.get("iothread") == ("1" if iothread == "on" else None)
    assert props.get("queues") == (None if queues == "auto" else queues)
    assert int(props.get("queues", "2")) >= 2
    assert args.get("scsihw") == {
        "virtio-scsi": "virtio-scsi-pci",
        "virtio-scsi-single": "virtio-scsi-single",
    }.get(bus)


@pytest.mark.parametrize(
    "cell", [c for c in DEVICE_CELLS if snippets_for(_cfg(c)).by_tool("proxmox").text], ids=_id
)
def test_proxmox_snippet_reads_back_as_the_same_cell(cell: dict[str, str], tmp_path: Path) -> None:
    s = snippets_for(_cfg(cell)).by_tool("proxmox")
    assert s.text is not None
    # What `qm config` shows after the `qm set`: the options as lines, the new volume allocated.
    conf = "".join(
        f"{k}: {v.replace('STORAGE:32', 'local:100/vm-100-disk-0.qcow2')},size=32G\n"
        if re.fullmatch(r"(scsi|virtio)\d+", k)
        else f"{k}: {v}\n"
        for k, v in _qm_set(s.text).items()
    )
    f = tmp_path / "100.conf"
    f.write_text("boot: order=scsi0;virtio0;net0\ncores: 2\nmemory: 2048\n" + conf)
    cur = parse_current(str(f))
    assert {k: v for k, v in cur.axes.items() if k in READ_BACK} == _expected(cell, *READ_BACK)
    # as measured, spelled by the snippet
    assert cur.axes["detect_zeroes"] == "off" and "discard" not in cur.axes


# --------------------------------------------------------------------------- virt-install, Nova


@needs("virt-install")
@needs("virt-xml-validate")
@pytest.mark.parametrize(
    "cell",
    [c for c in DEVICE_CELLS if c["iothread"] != "vq-mapping" and c["queues"] in ("auto", "4")],
    ids=_id,
)
def test_virt_install_builds_the_same_cell(cell: dict[str, str], tmp_path: Path) -> None:
    """virt-install turns the snippet into a domain (libvirt's test driver, nothing defined or
    started): it is valid libvirt XML and reads back as the same cell."""
    image = tmp_path / "vm.qcow2"
    image.write_bytes(b"")
    text = snippets_for(_cfg(cell), str(image)).by_tool("virt-install").text or ""
    argv = [
        "virt-install",
        "--connect",
        "test:///default",
        "--print-xml",
        "--dry-run",
        "--name",
        "iomatrix-snippet",
        "--memory",
        "64",
        "--osinfo",
        "detect=off,name=linux2022",
        "--import",
        "--network",
        "none",
        "--graphics",
        "none",
        *shell_words(text),
    ]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{res.stderr}\n{argv}"
    xml = tmp_path / "vm.xml"
    xml.write_text(res.stdout)
    assert _validate(res.stdout, tmp_path, "virt-install.xml").returncode == 0
    cur = parse_current(str(xml))
    # (libvirt's test driver drops the format and the driver name; the rest is kept)
    keys = tuple(k for k in READ_BACK if k != "format")
    assert {k: v for k, v in cur.axes.items() if k in keys} == _expected(cell, *keys)


def test_nova_says_in_one_line_what_it_cannot_set() -> None:
    for cell in DEVICE_CELLS:
        s = snippets_for(_cfg(cell)).by_tool("nova")
        if (cell["iothread"], cell["queues"], cell["bus"]) == ("off", "auto", "virtio-blk"):
            assert s.text and "hw_disk_bus=virtio" in s.text
        elif (
            cell["iothread"] == "off" and cell["queues"] == "auto" and cell["bus"] == "virtio-scsi"
        ):
            assert s.text and "hw_scsi_model=virtio-scsi" in s.text
        else:
            assert s.text is None and s.note.startswith("not available: ") and "\n" not in s.note


def test_a_refused_device_combination_is_one_line() -> None:
    with pytest.raises(UserError, match=r"iothread=vq-mapping .* needs queues of 2 or more"):
        _cfg({**BASE, "bus": "virtio-blk", "iothread": "vq-mapping", "queues": "1"})
