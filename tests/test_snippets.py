"""Snippets are checked by the tools that consume them: libvirt's schema, QEMU itself, qemu-img, and
Proxmox's documented property-string format."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix import domain
from iomatrix.domain import Aio, BackingKind, Bus, CacheMode, Format, Modifier, Preallocation
from iomatrix.errors import UserError
from iomatrix.snippets import (
    EATMYDATA_WRAPPER,
    QEMU_BINARY,
    DiskConfig,
    eatmydata_wrapper_snippet,
    libvirt_disk_xml,
    minimal_domain_xml,
    proxmox_drive_value,
    qemu_argv,
    snippets_for,
)
from tests.conftest import needs, root_only


def _valid_configs(kind: BackingKind = BackingKind.FILE) -> list[DiskConfig]:
    out = []
    for fmt, cache, aio, bus in itertools.product(Format, CacheMode, Aio, Bus):
        for pre in domain.PREALLOCATIONS[fmt]:
            if domain.aio_rule(cache, aio) or domain.preallocation_rule(
                fmt, pre, on_block_device=kind == BackingKind.BLOCK
            ):
                continue
            out.append(DiskConfig(fmt, pre, cache, aio, bus, kind))
    return out


def _validate(
    xml: str, tmp_path: Path, name: str = "domain.xml"
) -> subprocess.CompletedProcess[str]:
    f = tmp_path / name
    f.write_text(xml)
    return subprocess.run(
        ["virt-xml-validate", str(f), "domain"], capture_output=True, text=True, timeout=60
    )


@needs("virt-xml-validate")
def test_every_libvirt_disk_validates_in_a_full_domain(tmp_path: Path) -> None:
    disks = []
    # local storage (network disks: test_snippets_network)
    for kind in (BackingKind.FILE, BackingKind.BLOCK):
        for cfg in _valid_configs(kind):
            s = snippets_for(cfg).by_tool("libvirt")
            if cfg.bus in domain.LIBVIRT_BUS_UNAVAILABLE:
                assert s.text is None and s.note.startswith("not available")
                continue
            assert s.text is not None
            disks.append(s.text)
    assert len(disks) > 100
    # One domain holding every disk: the schema checks each element (it does not check dev
    # uniqueness).
    res = _validate(minimal_domain_xml("\n".join(disks)), tmp_path)
    assert res.returncode == 0, res.stderr


@needs("virt-xml-validate")
def test_the_validator_rejects_a_misspelled_driver_attribute(tmp_path: Path) -> None:
    # The check above can fail: a value libvirt does not know is refused by the same validator.
    cfg = DiskConfig(Format.QCOW2, Preallocation.OFF, CacheMode.NONE, Aio.NATIVE, Bus.VIRTIO_BLK)
    bad = libvirt_disk_xml(cfg).replace('io="native"', 'io="linux-aio"')
    res = _validate(minimal_domain_xml(bad), tmp_path, "bad.xml")
    assert res.returncode != 0


def test_libvirt_xml_carries_the_axes() -> None:
    cfg = DiskConfig(
        Format.QCOW2, Preallocation.METADATA, CacheMode.WRITETHROUGH, Aio.IO_URING, Bus.SATA
    )
    xml = libvirt_disk_xml(cfg, "/srv/a,b.qcow2")
    assert 'type="qcow2"' in xml and 'cache="writethrough"' in xml and 'io="io_uring"' in xml
    assert 'bus="sata"' in xml and 'file="/srv/a,b.qcow2"' in xml


# --------------------------------------------------------------------------- QEMU accepts the
# arguments


def _qemu_accepts(args: list[str], node: str = "disk0") -> None:
    """Start QEMU paused with the snippet's disk, ask it over QMP for the node, then quit."""
    qmp = "\n".join(
        json.dumps(c)
        for c in (
            {"execute": "qmp_capabilities"},
            {"execute": "query-named-block-nodes"},
            {"execute": "quit"},
        )
    )
    argv = [
        "qemu-system-x86_64",
        "-S",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-machine",
        "pc",
        "-accel",
        "tcg",
        "-m",
        "64",
        "-qmp",
        "stdio",
        *args,
    ]
    res = subprocess.run(argv, input=qmp + "\n", capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{res.stderr}\n{argv}"
    replies = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    nodes = next(r["return"] for r in replies if isinstance(r.get("return"), list))
    assert node in {n["node-name"] for n in nodes}, res.stdout


# One configuration per value of every axis (a full product would start hundreds of QEMUs).
QEMU_CASES = [
    *(DiskConfig(Format.RAW, Preallocation.OFF, c, Aio.THREADS, Bus.VIRTIO_BLK) for c in CacheMode),
    *(DiskConfig(Format.QCOW2, Preallocation.METADATA, CacheMode.NONE, Aio.NATIVE, b) for b in Bus),
    DiskConfig(
        Format.QCOW2, Preallocation.FALLOC, CacheMode.DIRECTSYNC, Aio.IO_URING, Bus.VIRTIO_SCSI
    ),
    DiskConfig(Format.QED, Preallocation.OFF, CacheMode.WRITEBACK, Aio.THREADS, Bus.IDE),
]


def _create_image(cfg: DiskConfig, path: Path) -> None:
    cmd = snippets_for(cfg, str(path)).by_tool("qemu-img").text
    assert cmd is not None
    # The snippet's size, made test-sized. The snippet wraps a long path onto its own line, so only
    # the size word is matched: a missed replace once made this test fallocate a real 32 GiB image,
    # failing on a CI disk with less free.
    assert re.search(r"\s32G$", cmd), cmd
    small = cmd[: -len("32G")] + "64M"
    res = subprocess.run(small, shell=True, capture_output=True, text=True, timeout=120)
    # qemu-img's own words on failure (a CI run once saw only "non-zero exit status" for
    # preallocation=falloc)
    assert res.returncode == 0, (
        f"{small}: {res.stderr.strip()} (free on {path.parent}: "
        f"{shutil.disk_usage(path.parent).free >> 20} MiB)"
    )


@needs("qemu-system-x86_64")
@pytest.mark.parametrize("cfg", QEMU_CASES, ids=lambda c: c.label().replace(" ", ","))
def test_qemu_accepts_the_snippet_arguments(cfg: DiskConfig, tmp_path: Path) -> None:
    image = tmp_path / f"disk.{cfg.format}"
    _create_image(cfg, image)
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(image)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert info["format"] == cfg.format
    _qemu_accepts(qemu_argv(cfg, str(image)))


@needs("qemu-system-x86_64")
def test_qemu_refuses_what_the_snippets_never_emit(tmp_path: Path) -> None:
    # The acceptance check can fail: QEMU rejects aio=native without O_DIRECT (why DiskConfig
    # refuses it).
    cfg = DiskConfig(Format.RAW, Preallocation.OFF, CacheMode.NONE, Aio.NATIVE, Bus.VIRTIO_BLK)
    image = tmp_path / "disk.raw"
    _create_image(cfg, image)
    args = [a.replace("cache.direct=on", "cache.direct=off") for a in qemu_argv(cfg, str(image))]
    with pytest.raises(AssertionError):
        _qemu_accepts(args)
    with pytest.raises(UserError, match="aio=native needs O_DIRECT"):
        DiskConfig(Format.RAW, Preallocation.OFF, CacheMode.WRITEBACK, Aio.NATIVE, Bus.VIRTIO_BLK)


@root_only
@needs("qemu-system-x86_64")
def test_qemu_accepts_the_block_device_snippet(tmp_path: Path) -> None:
    backing = tmp_path / "lv.img"
    backing.write_bytes(b"")
    with open(backing, "wb") as f:
        f.truncate(64 << 20)
    loop = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        cfg = DiskConfig(
            Format.RAW,
            Preallocation.OFF,
            CacheMode.NONE,
            Aio.NATIVE,
            Bus.VIRTIO_BLK,
            BackingKind.BLOCK,
        )
        args = qemu_argv(cfg, loop)
        assert "file.driver=host_device" in args[1]
        _qemu_accepts(args)
    finally:
        subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)


# --------------------------------------------------------------------------- Proxmox property
# string

# The documented format of a Proxmox VE disk property (pve-docs, qm.conf(5) / "VM Configuration
# Options", e.g. https://pve.proxmox.com/pve-docs/qm.conf.5.html):
#   ide[n]|sata[n]|scsi[n]|virtio[n]: [file=]<volume> [,aio=<native|threads|io_uring>]
#       [,cache=<directsync | none | unsafe | writeback | writethrough>] [,detect_zeroes=<boolean>]
#       [,discard=<ignore|on>] [,format=<cloop | qcow | qcow2 | qed | raw | vmdk>] ...
#   "Use volume as IDE hard disk or CD-ROM (n is 0 to 3)"; SATA n is 0 to 5, SCSI 0 to 30, VirtIO 0 to 15.  # noqa: E501
#   qm(1): "Use the special syntax STORAGE_ID:SIZE_IN_GiB to allocate a new volume."
PVE_ENUMS = {
    "aio": {"native", "threads", "io_uring"},
    "cache": {"directsync", "none", "unsafe", "writeback", "writethrough"},
    "format": {"cloop", "qcow", "qcow2", "qed", "raw", "vmdk"},
    "discard": {"ignore", "on"},
    "detect_zeroes": {"0", "1", "on", "off", "yes", "no", "true", "false"},  # a PVE <boolean>
}
PVE_KEY = re.compile(r"^(ide|sata|scsi|virtio)(\d+)$")
PVE_MAX = {"ide": 3, "sata": 5, "scsi": 30, "virtio": 15}
# storage ids: pve-storage-id
PVE_NEW_VOLUME = re.compile(r"^(?:file=)?[A-Za-z][A-Za-z0-9\-_.]*:\d+(?:\.\d+)?$")


def parse_pve_disk(key: str, value: str) -> dict[str, str]:
    m = PVE_KEY.match(key)
    assert m, f"{key} is not a disk key"
    assert int(m.group(2)) <= PVE_MAX[m.group(1)], f"{key}: index out of range"
    volume, *opts = value.split(",")
    assert PVE_NEW_VOLUME.match(volume), f"{volume} is not STORAGE:SIZE"
    out = {"volume": volume}
    for opt in opts:
        k, sep, v = opt.partition("=")
        assert sep, f"'{opt}' is not key=value"
        assert k in PVE_ENUMS, f"unexpected property {k}"
        assert v in PVE_ENUMS[k], f"{k}={v} is not one of {sorted(PVE_ENUMS[k])}"
        assert k not in out, f"{k} given twice"
        out[k] = v
    return out


def test_every_proxmox_snippet_matches_the_documented_format() -> None:
    seen_buses = set()
    # local storage (network disks: test_snippets_network)
    for kind in (BackingKind.FILE, BackingKind.BLOCK):
        for cfg in _valid_configs(kind):
            s = snippets_for(cfg).by_tool("proxmox")
            if domain.BUS[cfg.bus].proxmox is None:
                assert s.text is None and "not available" in s.note
                continue
            assert s.text is not None
            # (its first command, a line continued with a backslash read as one)
            m = re.search(r"--(\w+) (\S+)$", s.text.replace(" \\\n", " ").splitlines()[0])
            assert m, s.text
            parsed = parse_pve_disk(m.group(1), m.group(2))
            assert parsed["cache"] == cfg.cache and parsed["aio"] == cfg.aio
            # What was measured: QEMU's discard=ignore, detect-zeroes=off (Proxmox's own default is
            # on).
            assert parsed["discard"] == "ignore" and parsed["detect_zeroes"] == "0"
            assert parsed.get("format", cfg.format) == cfg.format
            seen_buses.add(m.group(1))
    assert seen_buses == {"ide0", "sata0", "scsi0", "virtio0"}


def test_the_proxmox_parser_rejects_what_the_documentation_does_not_allow() -> None:
    for key, value in (
        ("nvme0", "local:32"),
        ("ide4", "local:32"),
        ("virtio0", "local:32,aio=posix"),
        ("virtio0", "local:32,cache=default"),
        ("scsi0", "local-lvm,cache=none"),
    ):
        with pytest.raises(AssertionError):
            parse_pve_disk(key, value)
    cfg = DiskConfig(Format.QCOW2, Preallocation.OFF, CacheMode.NONE, Aio.IO_URING, Bus.VIRTIO_BLK)
    assert parse_pve_disk("virtio0", proxmox_drive_value(cfg, "local-lvm", 8))["aio"] == "io_uring"


def test_tools_that_cannot_express_a_configuration_say_so() -> None:
    nvme = DiskConfig(Format.QED, Preallocation.OFF, CacheMode.NONE, Aio.THREADS, Bus.NVME)
    s = snippets_for(nvme)
    for tool in ("proxmox", "libvirt", "virt-install", "nova"):
        assert s.by_tool(tool).text is None and s.by_tool(tool).note.startswith("not available"), (
            tool
        )
    assert s.by_tool("qemu").text and "driver=qed" in s.by_tool("qemu").text


def test_nova_and_virt_install_spellings() -> None:
    cfg = DiskConfig(
        Format.RAW, Preallocation.FULL, CacheMode.DIRECTSYNC, Aio.NATIVE, Bus.VIRTIO_SCSI
    )
    s = snippets_for(cfg, "/images/vm.raw")
    nova = s.by_tool("nova").text or ""
    assert "disk_cachemodes = file=directsync" in nova and "preallocate_images = space" in nova
    assert "hw_disk_bus=scsi" in nova
    vi = s.by_tool("virt-install").text or ""
    assert "--disk path=/images/vm.raw,format=raw,bus=scsi,cache=directsync,io=native" in vi
    assert (
        s.by_tool("qemu-img").text
        == "qemu-img create -f raw -o preallocation=full /images/vm.raw 32G"
    )


def test_axes_a_sweep_did_not_vary_are_assumed_and_named() -> None:
    cfg = DiskConfig.from_axes(
        {"format": "-", "preallocation": "-", "cache": "writeback", "aio": "threads", "bus": "-"}
    )
    assert cfg.format == Format.RAW and cfg.bus == Bus.VIRTIO_BLK
    assert cfg.assumed == ("format", "preallocation", "bus")


# --------------------------------------------------------------------------- eatmydata, discard,
# detect-zeroes

EATMYDATA_CASES = [
    DiskConfig(
        Format.RAW, Preallocation.OFF, c, Aio.THREADS, Bus.VIRTIO_BLK, modifier=Modifier.EATMYDATA
    )
    for c in CacheMode
    if c != CacheMode.UNSAFE
]


@needs("virt-xml-validate")
def test_eatmydata_says_it_needs_a_wrapper_and_the_xml_still_validates(tmp_path: Path) -> None:
    for cfg in EATMYDATA_CASES:
        s = snippets_for(cfg)
        lib = s.by_tool("libvirt")
        assert lib.text and f"<emulator>{EATMYDATA_WRAPPER}</emulator>" in lib.text
        assert "libvirt cannot preload a library into QEMU" in lib.note and "wrapper" in lib.note
        wrapper = s.by_tool("qemu-wrapper")
        assert wrapper.text and f"exec eatmydata {QEMU_BINARY}" in wrapper.text
        assert "eatmydata qemu-system-x86_64" in s.by_tool("qemu").note
        assert "eatmydata cannot be expressed" in s.by_tool("proxmox").note
        assert "eatmydata cannot be expressed" in s.by_tool("nova").note
        assert f"--xml ./devices/emulator={EATMYDATA_WRAPPER}" in (
            s.by_tool("virt-install").text or ""
        )
        res = _validate(minimal_domain_xml(lib.text), tmp_path)  # one <emulator> per domain
        assert res.returncode == 0, res.stderr
    plain = snippets_for(
        DiskConfig(Format.RAW, Preallocation.OFF, CacheMode.NONE, Aio.THREADS, Bus.VIRTIO_BLK)
    )
    assert "<emulator>" not in (plain.by_tool("libvirt").text or "")
    assert not any(x.tool == "qemu-wrapper" for x in plain.snippets)


def test_eatmydata_with_unsafe_is_refused_and_read_from_a_cells_axes() -> None:
    with pytest.raises(UserError, match="eatmydata would change nothing"):
        DiskConfig(
            Format.RAW,
            Preallocation.OFF,
            CacheMode.UNSAFE,
            Aio.THREADS,
            Bus.VIRTIO_BLK,
            modifier=Modifier.EATMYDATA,
        )
    axes = {
        "format": "raw",
        "preallocation": "off",
        "cache": "writeback",
        "aio": "threads",
        "bus": "virtio-blk",
    }
    assert DiskConfig.from_axes({**axes, "modifier": "eatmydata"}).modifier == Modifier.EATMYDATA
    assert DiskConfig.from_axes({**axes, "modifier": "-"}).modifier == Modifier.NONE
    assert DiskConfig.from_axes(axes).label().endswith("bus=virtio-blk")


@needs("eatmydata")
@needs("qemu-system-x86_64")
def test_the_eatmydata_wrapper_script_runs_qemu(tmp_path: Path) -> None:
    wrapper = tmp_path / "qemu-eatmydata"
    text = eatmydata_wrapper_snippet().text or ""
    script = text.replace(EATMYDATA_WRAPPER, str(wrapper)).replace(
        QEMU_BINARY, shutil.which("qemu-system-x86_64") or QEMU_BINARY
    )
    subprocess.run(["sh", "-c", script], check=True, timeout=30)
    out = subprocess.run([str(wrapper), "-version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "QEMU emulator version" in out.stdout, out.stderr


def test_discard_and_detect_zeroes_are_spelled_as_measured() -> None:
    cfg = DiskConfig(Format.QCOW2, Preallocation.OFF, CacheMode.NONE, Aio.NATIVE, Bus.VIRTIO_BLK)
    s = snippets_for(cfg)
    assert 'discard="ignore"' in (s.by_tool("libvirt").text or "")
    assert 'detect_zeroes="off"' in (s.by_tool("libvirt").text or "")
    assert "discard=ignore,detect_zeroes=off" in (s.by_tool("virt-install").text or "")
    # QEMU's own defaults are what was measured: the graph does not repeat them, the note names
    # them.
    assert "discard=unmap" in s.by_tool("qemu").note and "not measured" in s.by_tool("qemu").note
