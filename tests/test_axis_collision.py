"""Two axes may not write the same key of any tool's spelling (QEMU, libvirt, Proxmox, virt-install,
Nova), nor an axis a key one of iomatrix's own writers or a network protocol writes: the registry
refuses the second at registration, in one line naming both, as a mistake the user can fix (a
UserError), never an internal error.

Before the check, a demonstration `write_cache` axis beside the cache axis (which sets the device's
write-cache) produced ``-device virtio-blk-pci,…,write-cache=on,write-cache=off`` and `--current`
read one option as both; a toy axis spelling libvirt's, Proxmox's or virt-install's ``cache``
registered silently, libvirt's <driver> then kept one of the two values and Proxmox and virt-install
printed ``cache=`` twice."""

from __future__ import annotations

import json
import shlex
from itertools import product
from pathlib import Path

import pytest

from iomatrix.domain import Bus, axes
from iomatrix.domain.axes import (
    Axis,
    AxisRefused,
    Layer,
    QemuOptions,
    SpellingKey,
    ToolOption,
    Writer,
)
from iomatrix.errors import UserError
from iomatrix.matrix import complete
from iomatrix.protocols import protocol as protocol_named
from iomatrix.protocols.place import NetworkPlace
from iomatrix.qemu_block import DiskSpec, disk_args
from iomatrix.snippets import DiskConfig, libvirt_disk_element, virt_install_snippet
from iomatrix.tiers.blocklayer import export_spec

WRITE_CACHE = Axis(
    "write_cache",
    "the guest-visible write cache (demonstration: the cache axis already sets it)",
    ("on", "off"),
    "on",
    ("on",),
    frozenset({Layer.DEVICE}),
    qemu=lambda v: QemuOptions(device=(("write-cache", v),)),
    tools={"libvirt": lambda v: ToolOption()},
)


def test_an_axis_setting_an_option_another_axis_sets_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        axes.register(WRITE_CACHE)
    message = str(err.value)
    assert message.startswith(
        "axis 'write_cache' sets write-cache on the guest device (-device), which axis "
        "'cache' already sets"
    )
    assert "\n" not in message
    assert "write_cache" not in axes.REGISTRY
    with pytest.raises(ValueError, match="already sets"), axes.registered(WRITE_CACHE):
        pass  # (never reached)
    assert "write_cache" not in axes.REGISTRY


def test_a_collision_is_found_on_the_value_that_sets_it_and_on_cell_dependent_options() -> None:
    # Only "unmap" sets the node's discard (off sets nothing): the check reads every value.
    only_some = Axis(
        "trim",
        "demo",
        ("off", "unmap"),
        "off",
        ("off",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions() if v == "off" else QemuOptions(file_node=(("discard", v),)),
    )
    with pytest.raises(
        ValueError, match=r"sets discard on the protocol node .* axis 'discard' already sets"
    ):
        axes.register(only_some)
    # An option that depends on the cell (as the L2 cache bound does) is checked too.
    by_cell = Axis(
        "l2_bound",
        "demo",
        ("a", "b"),
        "a",
        ("a",),
        frozenset({Layer.IMAGE}),
        qemu_cell=lambda values, ctx: QemuOptions(format_node=(("l2-cache-size", "1M"),)),
    )
    with pytest.raises(ValueError, match="axis 'l2_cache' already sets"):
        axes.register(by_cell)


def test_an_axis_with_options_of_its_own_registers() -> None:
    own = Axis(
        "demo_locking",
        "demo",
        ("auto", "off"),
        "auto",
        ("auto",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions(file_protocol=(("locking", v),)),
    )
    with axes.registered(own):
        assert axes.get("demo_locking") is own
        assert axes.qemu_options({"demo_locking": "off"}).file_protocol == (("locking", "off"),)
    assert "demo_locking" not in axes.REGISTRY


def test_the_shipped_registry_has_no_collision() -> None:
    listed = list(axes.REGISTRY.values())
    for i, axis in enumerate(listed):
        assert axes.collision(axis, listed[:i]) is None, axis.name


# Each tool's key for the cache mode, as the cache axis spells it.
CACHE_KEYS = {
    "libvirt": ("cache", "libvirt's <disk>"),
    "proxmox": ("cache", "Proxmox's drive (qm set)"),
    "virt-install": ("cache", "virt-install's --disk"),
    "nova": ("disk_cachemodes", "Nova's configuration (nova.conf, image properties)"),
}


@pytest.mark.parametrize("tool", sorted(CACHE_KEYS))
def test_an_axis_writing_another_axis_key_in_any_tool_is_refused(tool: str) -> None:
    key, where = CACHE_KEYS[tool]
    # Its QEMU options are its own (file.locking); only its spelling for `tool` collides with the
    # cache axis's.
    toy = Axis(
        "host_cache",
        "demo",
        ("on", "off"),
        "on",
        ("on",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions(file_protocol=(("locking", v),)),
        tools={tool: lambda v: ToolOption(((key, v),))},
    )
    with pytest.raises(AxisRefused) as err:
        axes.register(toy)
    assert str(err.value) == (
        f"axis 'host_cache' sets {key} on {where}, which axis 'cache' already sets: one {tool} "
        "option belongs to one axis (extend 'cache''s values instead, or set another option)"
    )
    # the CLI's one line
    assert isinstance(err.value, UserError) and err.value.one_line() == str(err.value)
    assert "host_cache" not in axes.REGISTRY


def test_a_value_that_writes_nothing_for_a_tool_is_no_collision() -> None:
    # A spelling is read over every value: only "drop" writes libvirt's discard, and that is found.
    some = Axis(
        "trim_policy",
        "demo",
        ("keep", "drop"),
        "keep",
        ("keep",),
        frozenset({Layer.IMAGE}),
        tools={
            "libvirt": lambda v: (
                ToolOption() if v == "keep" else ToolOption((("discard", "unmap"),))
            )
        },
    )
    with pytest.raises(
        AxisRefused, match="sets discard on libvirt's <disk>, which axis 'discard' already sets"
    ):
        axes.register(some)
    own = Axis(
        "demo_shareable",
        "demo",
        ("off", "on"),
        "off",
        ("off",),
        frozenset({Layer.IMAGE}),
        tools={"libvirt": lambda v: ToolOption((("shareable", v),))},
    )
    with axes.registered(own):
        assert SpellingKey("libvirt", "libvirt's <disk>", "shareable") in axes.spelling_keys(own)


@pytest.mark.parametrize(
    ("axis", "message"),
    [
        (
            Axis(
                "driver_name",
                "demo",
                ("qemu",),
                "qemu",
                ("qemu",),
                frozenset({Layer.IMAGE}),
                tools={"libvirt": lambda v: ToolOption((("name", v),))},
            ),
            "axis 'driver_name' sets name on libvirt's <disk>, which iomatrix's libvirt "
            "disk writer already sets: one "
            "libvirt option belongs to one axis (set another option)",
        ),
        (
            Axis(
                "portal",
                "demo",
                ("a",),
                "a",
                ("a",),
                frozenset({Layer.IMAGE}),
                qemu=lambda v: QemuOptions(file_node=(("portal", v),)),
            ),
            "axis 'portal' sets portal on the protocol node (-blockdev file.), which the "
            "iscsi protocol's QEMU node "
            "already sets: one QEMU option belongs to one axis (set another option)",
        ),
        (
            Axis(
                "serial_no",
                "demo",
                ("a",),
                "a",
                ("a",),
                frozenset({Layer.DEVICE}),
                qemu=lambda v: QemuOptions(device=(("serial", v),)),
            ),
            "axis 'serial_no' sets serial on the guest device (-device), which "
            "iomatrix's QEMU disk builder (qemu_block) "
            "already sets: one QEMU option belongs to one axis (set another option)",
        ),
    ],
)
def test_an_axis_writing_a_key_a_writer_or_protocol_writes_is_refused(
    axis: Axis, message: str
) -> None:
    with pytest.raises(AxisRefused) as err:
        axes.register(axis)
    assert str(err.value) == message
    assert axis.name not in axes.REGISTRY


def test_a_writer_writing_an_axis_key_is_refused() -> None:
    """A protocol's QEMU node (registered by its module) that sets an option an axis sets: refused,
    naming both."""
    writer = Writer(
        "the demo protocol's QEMU node",
        frozenset({SpellingKey("qemu", axes._PROTOCOL_NODE, "aio")}),
    )
    with pytest.raises(AxisRefused) as err:
        axes.register_writer(writer)
    assert str(err.value) == (
        "the demo protocol's QEMU node sets aio on the protocol node (-blockdev file.), which "
        "axis 'aio' already sets: one QEMU option belongs to one owner"
    )
    assert writer not in axes.WRITERS


# --------------------------------------------------------------------------- the writers declare
# what they write


def _cells() -> list[dict[str, str]]:
    """Guest cells over the axes that shape the statements (format, bus, cache, iothread, queues),
    unpruned."""
    out = []
    for fmt, bus, cache, iothread, queues in product(
        ("raw", "qcow2"),
        list(Bus),
        ("none", "writeback"),
        axes.get("iothread").values,
        axes.get("queues").values,
    ):
        values = dict(
            complete(
                {
                    "tier": "guest",
                    "backing": "dir",
                    "modifier": "none",
                    "aio": "threads",
                    "preallocation": "off",
                    "format": fmt,
                    "bus": bus.value,
                    "cache": cache,
                    "iothread": iothread,
                    "queues": queues,
                }
            )
        )
        if axes.prune_reason(values, axes.RuleContext()) is None:
            out.append(values)
    assert len(out) > 20
    return out


def _pairs(text: str) -> list[str]:
    return [kv.split("=", 1)[0] for kv in text.split(",") if "=" in kv]


def _undeclared(found: set[SpellingKey]) -> list[SpellingKey]:
    owned = set().union(
        *(axes.spelling_keys(a) for a in axes.axes()), *(w.keys for w in axes.writers())
    )
    return sorted(found - owned)


def test_the_qemu_builders_write_no_key_nobody_declares() -> None:
    found: set[SpellingKey] = set()
    for values in _cells():
        disk = DiskSpec.for_cell(values, "/images/vm.img")
        argv = disk_args(disk)
        for key in _pairs(argv[argv.index("-blockdev") + 1]):
            where = axes._PROTOCOL_NODE if key.startswith("file.") else axes._FORMAT_NODE
            found.add(SpellingKey("qemu", where, key.removeprefix("file.")))
        devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
        disk_device = next(d for d in devices if "drive=" in d or '"drive"' in d)
        if disk_device.startswith("{"):  # JSON syntax (iothread-vq-mapping)
            keys = [k for k in json.loads(disk_device) if k != "driver"]
        else:
            keys = _pairs(disk_device)
        found |= {SpellingKey("qemu", axes._DEVICE, k) for k in keys}
        found |= {SpellingKey("qemu", axes._EXPORT, k) for k in _pairs(export_spec(disk))}
    for protocol, client in (("iscsi", "libiscsi"), ("nfs", "libnfs"), ("rbd", "librbd")):
        values = {"initiator": client, "nfs_client": client, "rbd_client": client}
        found |= {
            SpellingKey("qemu", axes._PROTOCOL_NODE, k)
            for k, _ in protocol_named(protocol).qemu_node(values, "raw", NetworkPlace())
        }
    assert not _undeclared(found)


def test_the_libvirt_and_virt_install_writers_write_no_key_nobody_declares(tmp_path: Path) -> None:
    found: set[SpellingKey] = set()
    for values in _cells():
        cfg = DiskConfig.from_axes(values)
        disk = libvirt_disk_element(cfg, str(tmp_path / "vm.img"))
        for element in ("driver", "target"):
            found |= {
                SpellingKey("libvirt", "libvirt's <disk>", k) for k in disk.find(element).attrib
            }
        snippet = virt_install_snippet(cfg, str(tmp_path / "vm.img"))
        if snippet.text is None:
            continue
        words = shlex.split(snippet.text.replace("\\\n", " "))
        disk_keys = _pairs(words[words.index("--disk") + 1])
        found |= {SpellingKey("virt-install", "virt-install's --disk", k) for k in disk_keys}
    assert not _undeclared(found)
