"""Collisions at every spelling (issue 48): two axes, or an axis and a network protocol, that write
one key of a tool's spelling (QEMU, libvirt, Proxmox, virt-install, Nova) are refused at
registration, in one line naming both, as a mistake the user can fix (a UserError the CLI prints as
one line, exit 2), never an internal error with a crash log.

What the protocols write is read from the protocols themselves (their QEMU protocol node over every
client and format, the nova.conf lines of their Nova snippet): the axis registry lists no protocol.
The axis against axis checks, and that iomatrix's own writers write no key they do not declare, are
in tests/test_axis_collision.py; installed axes in tests/test_axis_entry_point.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from iomatrix import protocols
from iomatrix.domain import axes
from iomatrix.domain.axes import Axis, AxisRefused, Layer, QemuOptions, SpellingKey, ToolOption
from iomatrix.errors import UserError
from iomatrix.matrix import complete
from iomatrix.plugins import PluginError
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.place import NetworkPlace
from iomatrix.snippets import DiskConfig, snippets_for
from tests.conftest import iomatrix_argv

# The cache axis's key in each tool's spelling, and where that tool's refusal says it goes.
CACHE_KEY = {
    "qemu": ("cache.direct", "the protocol node (-blockdev file.)"),
    "libvirt": ("cache", "libvirt's <disk>"),
    "proxmox": ("cache", "Proxmox's drive (qm set)"),
    "virt-install": ("cache", "virt-install's --disk"),
    "nova": ("disk_cachemodes", "Nova's configuration (nova.conf, image properties)"),
}


def _toy(tool: str, key: str) -> Axis:
    """An axis whose QEMU option is its own (file.locking) but for `tool`, where it writes `key`."""
    if tool == "qemu":
        return Axis(
            "host_cache",
            "demo",
            ("on", "off"),
            "on",
            ("on",),
            frozenset({Layer.IMAGE}),
            qemu=lambda v: QemuOptions(file_node=((key, v),)),
        )
    return Axis(
        "host_cache",
        "demo",
        ("on", "off"),
        "on",
        ("on",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions(file_protocol=(("locking", v),)),
        tools={tool: lambda v: ToolOption(((key, v),))},
    )


@pytest.mark.parametrize("tool", sorted(CACHE_KEY))
def test_a_toy_axis_colliding_with_cache_is_refused_in_one_line_naming_both(tool: str) -> None:
    key, where = CACHE_KEY[tool]
    with pytest.raises(AxisRefused) as err, axes.registered(_toy(tool, key)):
        pass  # (never reached)
    line = err.value.one_line()
    assert line == str(err.value) and "\n" not in line
    assert line.startswith(
        f"axis 'host_cache' sets {key} on {where}, which axis 'cache' already sets"
    )
    assert isinstance(err.value, UserError)  # the CLI's one line and exit 2, not an internal error
    assert "host_cache" not in axes.REGISTRY


def test_the_built_in_axes_and_protocols_collide_nowhere() -> None:
    """No two built-in axes share a key, and no built-in axis writes a key of iomatrix's own writers
    or of a built-in protocol (the protocol registry refused none of them as it registered them)."""
    listed = list(axes.REGISTRY.values())
    assert protocols.protocol_names() == ["iscsi", "nbd", "nfs", "rbd"]
    for i, axis in enumerate(listed):
        assert axes.collision(axis, listed[:i], axes.writers()) is None, axis.name
    for writer in axes.writers():
        assert axes.writer_collision(writer) is None, writer.name


def test_the_protocols_writers_are_read_from_the_protocols() -> None:
    by_name = {w.name: w.keys for w in axes.writers()}
    node = "the protocol node (-blockdev file.)"
    # Each protocol's QEMU node, for QEMU's own client and the kernel's (a device or a file).
    assert {
        SpellingKey("qemu", node, k) for k in ("portal", "target", "lun", "filename")
    } <= by_name["the iscsi protocol's QEMU node"]
    assert SpellingKey("qemu", node, "server.host") in by_name["the nfs protocol's QEMU node"]
    # Ceph's nova.conf lines, but images_type, the backend's own key the format axis writes for an
    # image file.
    assert {k.key for k in by_name["the rbd protocol's Nova snippet"]} == {
        "images_rbd_pool",
        "images_rbd_ceph_conf",
        "rbd_user",
        "rbd_secret_uuid",
    }
    nova = snippets_for(
        DiskConfig.from_axes(_cell(backing="rbd", rbd_client="librbd"), "rbd")
    ).by_tool("nova")
    written = {line.split(" = ")[0] for line in (nova.text or "").splitlines() if " = " in line}
    assert {k.key for k in by_name["the rbd protocol's Nova snippet"]} <= written


def test_an_axis_writing_a_protocols_nova_key_is_refused_naming_the_protocol() -> None:
    toy = Axis(
        "ceph_user",
        "demo",
        ("a", "b"),
        "a",
        ("a",),
        frozenset({Layer.IMAGE}),
        tools={"nova": lambda v: ToolOption((("rbd_user", v),))},
    )
    with pytest.raises(AxisRefused) as err:
        axes.register(toy)
    assert str(err.value) == (
        "axis 'ceph_user' sets rbd_user on Nova's configuration (nova.conf, image "
        "properties), which the rbd "
        "protocol's Nova snippet already sets: one nova option belongs to one axis (set "
        "another option)"
    )
    assert "ceph_user" not in axes.REGISTRY


class _ToyProtocol(NetworkProtocol):
    """A fourth protocol (NBD-like) whose QEMU node writes `extra` beside its own keys."""

    name = "toynbd"
    title = "toy NBD"
    client_axis = "toynbd_client"
    kernel_client = "kernel"
    userspace_library = "QEMU's nbd driver"
    server_noun = "NBD server"
    is_volume = True
    spec = "iomx_toy:NotLoaded"  # (a backing spec is imported on use only)
    extra: tuple[tuple[str, str], ...] = ()

    def url(self, place: NetworkPlace, fmt: str) -> str:
        return f"nbd://{place.host}:10809/{place.image}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> tuple[str, dict[str, str], dict[str, str] | None]:
        return "network", {"protocol": self.name, "name": place.image}, {"name": place.host}

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        if self.client_is_kernel(values):
            return [("driver", "host_device"), ("filename", "/dev/nbd0")]
        return [
            ("driver", "nbd"),
            ("server.type", "inet"),
            ("server.host", place.host),
            ("server.port", "10809"),
            ("export", place.image),
            *self.extra,
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        return f"nbd-client {place.host} /dev/nbd0"

    def placeholder_where(self, place: NetworkPlace) -> str:
        return f"server {place.host}"

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        return "nbd", "nbd-store", "nbd: nbd-store"

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        return []


class _CollidingProtocol(_ToyProtocol):
    extra = (("aio", "io_uring"),)  # the aio axis's key on the protocol node


class _ReconnectingProtocol(_ToyProtocol):
    extra = (("reconnect-delay", "0"),)  # a key of its own: no axis and no other protocol sets it


def test_a_protocol_writing_an_axis_key_is_refused_naming_both() -> None:
    with pytest.raises(PluginError) as err, protocols.registered(_CollidingProtocol):
        pass  # (never reached)
    assert str(err.value) == (
        "the toynbd protocol's QEMU node sets aio on the protocol node (-blockdev file.), "
        "which axis 'aio' already sets: one QEMU option belongs to one owner"
    )
    assert isinstance(err.value, UserError)
    assert "toynbd" not in protocols.protocol_names()
    # One that writes only its own keys registers, and its keys are then checked against a new axis
    # (one the built-in nbd protocol does not write: its server.port would be refused naming nbd).
    reconnect = Axis(
        "nbd_reconnect",
        "demo",
        ("0",),
        "0",
        ("0",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions(file_node=(("reconnect-delay", v),)),
    )
    with protocols.registered(_ReconnectingProtocol):
        assert "toynbd" in protocols.protocol_names()
        with pytest.raises(AxisRefused, match="which the toynbd protocol's QEMU node already sets"):
            axes.register(reconnect)
    assert "toynbd" not in protocols.protocol_names() and "nbd_reconnect" not in axes.REGISTRY


def _cell(**values: str) -> dict[str, str]:
    base = {
        "tier": "guest",
        "backing": "dir",
        "modifier": "none",
        "aio": "threads",
        "preallocation": "off",
        "format": "raw",
        "bus": "virtio-blk",
        "cache": "none",
    }
    return dict(complete({**base, **values}))


def test_an_axis_that_collides_nowhere_registers_and_every_snippet_shows_it() -> None:
    own = Axis(
        "copy_on_read",
        "demo: populate the image from its backing file on read",
        ("off", "on"),
        "off",
        ("off",),
        frozenset({Layer.IMAGE}),
        qemu=lambda v: QemuOptions(format_node=(("copy-on-read", v),)),
        tools={
            "libvirt": lambda v: ToolOption((("copy_on_read", v),)),
            "proxmox": lambda v: ToolOption((("copy_on_read", v),)),
            "virt-install": lambda v: ToolOption((("driver.copy_on_read", v),)),
            "nova": lambda v: ToolOption((("hw_copy_on_read", v),)),
        },
    )
    with axes.registered(own):
        snips = snippets_for(DiskConfig.from_axes(_cell(copy_on_read="on")), "/images/vm.raw")
        shown = {tool: (snips.by_tool(tool).text or "").replace("\\\n", "") for tool in CACHE_KEY}
    assert "copy-on-read=on" in shown["qemu"]
    assert 'copy_on_read="on"' in shown["libvirt"]
    assert "copy_on_read=on" in shown["proxmox"]
    assert "driver.copy_on_read=on" in shown["virt-install"]
    assert "--property hw_copy_on_read=on" in shown["nova"]
    assert "copy_on_read" not in axes.REGISTRY


# --------------------------------------------------------------------------- through the CLI,
# installed packages

# A protocol package whose QEMU node writes aio (the aio axis's); and an axis package whose Nova
# spelling writes rbd_user (the rbd protocol's Nova line).
PACKAGE = """
from iomatrix.domain.axes import Axis, Layer, ToolOption
from iomatrix.protocols.base import NetworkProtocol


class Nbd(NetworkProtocol):
    name = "toynbd"
    title = "NBD"
    client_axis = "nbd_client"
    kernel_client = "kernel"
    userspace_library = "QEMU's nbd driver"
    server_noun = "NBD server"
    is_volume = True
    spec = "iomx_spelling_demo:NbdSpec"

    def url(self, place, fmt):
        return "nbd://192.0.2.10:10809/disk"

    def libvirt_source(self, values, fmt, place):
        return "network", {"protocol": "nbd", "name": "disk"}, {"name": place.host}

    def qemu_node(self, values, fmt, place):
        return [("driver", "nbd"), ("server.host", place.host), ("aio", "io_uring")]

    def kernel_client_steps(self, place):
        return "nbd-client"

    def placeholder_where(self, place):
        return "server"

    def proxmox_storage(self, values, place):
        return "nbd", "nbd-store", "nbd: nbd-store"

    def proxmox_notes(self, values, kind, place):
        return []


CEPH_USER = Axis("ceph_user", "demo", ("a", "b"), "a", ("a",), frozenset({Layer.IMAGE}),
                 tools={"nova": lambda v: ToolOption((("rbd_user", v),))})
"""


def _install(site: Path, entry_points: str) -> dict[str, str]:
    """The package as pip leaves it in site-packages; the environment of a process that has it
    installed."""
    (site / "iomx_spelling_demo.py").write_text(PACKAGE)
    info = site / "iomx_spelling_demo-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: iomx-spelling-demo\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    path = os.pathsep.join(
        [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    return {
        **os.environ,
        "PYTHONPATH": path,
        "COLUMNS": "200",
        "XDG_CACHE_HOME": str(site / "cache"),
    }


def test_an_installed_protocol_writing_an_axis_key_is_one_cli_line_exit_2(tmp_path: Path) -> None:
    env = _install(tmp_path, "[iomatrix.protocols]\ntoynbd = iomx_spelling_demo:Nbd\n")
    plan = tmp_path / "p.toml"
    plan.write_text(
        'name = "p"\ntier = ["baremetal"]\nformat = ["raw"]\ncache = ["none"]\naio = ["threads"]\n'
        'workloads = ["rand-read-4k"]\nsize = "64M"\n\n[[backing]]\ntype = "nfs"\n'
    )
    res = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan)], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: entry point iomatrix.protocols:toynbd: the toynbd protocol's QEMU node sets "
        "aio on the protocol node "
        "(-blockdev file.), which axis 'aio' already sets: one QEMU option belongs to "
        "one owner; fix or uninstall "
        "the package that declares it"
    ]
    assert not (tmp_path / "cache").exists()  # no crash log


def test_an_installed_axis_writing_a_protocols_nova_key_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """Checked while the axis registry is still being imported (an installed axis is registered
    then): the protocol registry is asked for its writers at that point, and the axis is refused,
    not the import."""
    env = _install(tmp_path, "[iomatrix.axes]\nceph_user = iomx_spelling_demo:CEPH_USER\n")
    code = (
        "from iomatrix.domain import axes\nfrom iomatrix import protocols\n"
        "print('ceph_user' in axes.REGISTRY, protocols.protocol_names())"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False ['iscsi', 'nbd', 'nfs', 'rbd']"
    assert res.stderr.strip().splitlines() == [
        "iomatrix: an installed axis was refused: iomatrix.axes: axis 'ceph_user' sets "
        "rbd_user on Nova's "
        "configuration (nova.conf, image properties), which the rbd protocol's Nova "
        "snippet already sets: one nova "
        "option belongs to one axis (set another option)"
    ]
