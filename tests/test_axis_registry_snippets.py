"""An axis added to the registry reaches every snippet and `--current` with no other code change.

The demonstration axis is QEMU's zero detection (detect-zeroes), an option every tool but Nova can
spell. It is registered for one test at a time (`axes.registered`); snippets.py and current.py know
nothing of it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.domain import axes
from iomatrix.domain.axes import Axis, Layer, QemuOptions, ToolOption
from iomatrix.errors import UserError
from iomatrix.snippets import DiskConfig, minimal_domain_xml, qemu_argv, snippets_for
from tests.conftest import axis_set_aside, needs
from tests.test_snippets import _create_image, _qemu_accepts, _validate

NOVA_REASON = "Nova has no option for QEMU's zero detection"
DEMO = Axis(
    "demo_zeroes",
    "demonstration: QEMU's detection of written zeroes",
    ("off", "on"),
    "off",
    ("off",),
    frozenset({Layer.IMAGE}),
    qemu=lambda v: QemuOptions(format_node=(("detect-zeroes", v),)),
    tools={
        "libvirt": lambda v: ToolOption((("detect_zeroes", v),)),
        "proxmox": lambda v: ToolOption((("detect_zeroes", "1" if v == "on" else "0"),)),
        "virt-install": lambda v: ToolOption((("detect_zeroes", v),)),
        "nova": lambda v: ToolOption(unavailable=NOVA_REASON),
    },
)
CELL = {
    "tier": "guest",
    "format": "qcow2",
    "preallocation": "metadata",
    "cache": "none",
    "aio": "native",
    "bus": "virtio-scsi",
    "backing": "dir",
    "modifier": "none",
}


@pytest.fixture(autouse=True)
def without_zero_detection() -> Iterator[None]:
    """The demonstration axis spells QEMU's and libvirt's zero detection, which the registry has as
    a real axis (detect_zeroes) since: set the real one aside, so the demo stands for an axis the
    registry does not have yet."""
    with axis_set_aside("detect_zeroes"):
        yield


@pytest.fixture
def demo() -> Iterator[Axis]:
    with axes.registered(DEMO) as axis:
        yield axis


def test_the_axis_is_unknown_before_it_is_registered() -> None:
    # What the tests below check can fail: without the registry entry nothing spells the axis.
    cfg = DiskConfig.from_axes({**CELL, "demo_zeroes": "on"})
    assert cfg.more == {} and "demo_zeroes" not in cfg.label()
    assert 'detect_zeroes="off"' in (snippets_for(cfg).by_tool("libvirt").text or "")
    with pytest.raises(UserError, match="axis 'demo_zeroes=on'"):
        parse_current("cache=none,demo_zeroes=on")


def test_every_snippet_spells_the_new_axis(demo: Axis) -> None:
    cfg = DiskConfig.from_axes({**CELL, "demo_zeroes": "on"}, "dir")
    assert cfg.more == {"demo_zeroes": "on"} and cfg.label().endswith(" demo_zeroes=on")
    s = snippets_for(cfg, "/images/vm.qcow2")
    libvirt = s.by_tool("libvirt").text or ""
    driver = re.search(r"<driver [^>]*/>", libvirt)
    assert (
        driver
        and 'detect_zeroes="on"' in driver.group()
        and driver.group().count("detect_zeroes") == 1
    )
    # the measured default the axis does not spell stays
    assert 'discard="ignore"' in driver.group()
    assert "zero detection off" not in s.by_tool("libvirt").note
    proxmox = s.by_tool("proxmox").text or ""
    assert ",detect_zeroes=1" in proxmox and proxmox.count("detect_zeroes") == 1
    assert "detect_zeroes=0 because" not in s.by_tool("proxmox").note
    virt_install = s.by_tool("virt-install").text or ""
    assert "detect_zeroes=on" in virt_install and virt_install.count("detect_zeroes") == 1
    nova = s.by_tool("nova")
    assert nova.text is None and nova.note == f"not available: {NOVA_REASON}"
    assert "detect-zeroes=on" in (s.by_tool("qemu").text or "")
    # Its default is spelled too (off: the measured default, now from the axis).
    off = snippets_for(DiskConfig.from_axes({**CELL, "demo_zeroes": "off"}))
    assert ",detect_zeroes=0" in (off.by_tool("proxmox").text or "")
    assert "demo_zeroes" not in DiskConfig.from_axes({**CELL, "demo_zeroes": "off"}).label()


def test_a_cell_without_the_axis_assumes_its_default(demo: Axis) -> None:
    # stored before the axis existed, or a tier it does not apply to
    cfg = DiskConfig.from_axes(CELL)
    # A later axis a cell does not name is at QEMU's default, what was measured: it sets nothing,
    # assumes nothing.
    assert cfg.more == {} and cfg.assumed == ()
    with pytest.raises(UserError, match="demo_zeroes=maybe is not a value of demo_zeroes"):
        DiskConfig.from_axes({**CELL, "demo_zeroes": "maybe"})


@needs("virt-xml-validate")
def test_the_libvirt_snippet_with_the_new_axis_validates(demo: Axis, tmp_path: Path) -> None:
    disks = [
        snippets_for(DiskConfig.from_axes({**CELL, "demo_zeroes": v}, backing))
        .by_tool("libvirt")
        .text
        for v in demo.values
        for backing in ("dir", "lvm")
    ]
    res = _validate(minimal_domain_xml("\n".join(d or "" for d in disks)), tmp_path)
    assert res.returncode == 0, res.stderr


@needs("qemu-system-x86_64")
def test_qemu_accepts_the_new_axis(demo: Axis, tmp_path: Path) -> None:
    cfg = DiskConfig.from_axes({**CELL, "demo_zeroes": "on"})
    image = tmp_path / "disk.qcow2"
    _create_image(cfg, image)
    argv = qemu_argv(cfg, str(image))
    assert "detect-zeroes=on" in argv[1]
    _qemu_accepts(argv)


def test_current_reads_the_new_axis_back(demo: Axis, tmp_path: Path) -> None:
    # The libvirt snippet, read back as --current, gives the configuration it was made from.
    cfg = DiskConfig.from_axes({**CELL, "demo_zeroes": "on"})
    xml = tmp_path / "vm.xml"
    xml.write_text(minimal_domain_xml(snippets_for(cfg).by_tool("libvirt").text or ""))
    cur = parse_current(str(xml))
    assert cur.axes == {
        "format": "qcow2",
        "cache": "none",
        "aio": "native",
        "bus": "virtio-scsi",
        # (the snippet writes discard as measured)
        "discard": "ignore",
        "demo_zeroes": "on",
    }
    assert cur.defaulted == [] and cur.label().endswith(" demo_zeroes=on")
    # Without the attribute, libvirt leaves it to QEMU: at the axis's default, left out as in a
    # cell's key.
    xml.write_text(xml.read_text().replace(' detect_zeroes="on"', ""))
    cur = parse_current(str(xml))
    assert "demo_zeroes" not in cur.axes and not any(
        d.startswith("demo_zeroes") for d in cur.defaulted
    )
    xml.write_text(
        xml.read_text().replace('discard="ignore"', 'discard="ignore" detect_zeroes="unmap"')
    )
    with pytest.raises(UserError) as e:
        parse_current(str(xml))
    assert (
        "driver detect_zeroes 'unmap'" in e.value.one_line() and "off or on" in e.value.one_line()
    )
    # The plain form and QEMU's options.
    assert parse_current("cache=none,demo_zeroes=on").axes == {"cache": "none", "demo_zeroes": "on"}
    with pytest.raises(UserError) as e:
        parse_current("cache=none,demo_zeroes=maybe")
    assert "demo_zeroes 'maybe'" in e.value.one_line() and "off or on" in e.value.one_line()
    assert (
        parse_current("-drive file=/vm/a.qcow2,format=qcow2,cache=none,detect-zeroes=on").axes[
            "demo_zeroes"
        ]
        == "on"
    )
    blockdev = parse_current(
        "-blockdev driver=raw,node-name=d0,detect-zeroes=on,file.driver=file,file.filename=/x"
    )
    assert blockdev.axes["demo_zeroes"] == "on"
    assert "demo_zeroes" not in parse_current("-drive file=/vm/a.raw,format=raw").axes
