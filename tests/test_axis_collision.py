"""Two axes may not set the same QEMU option: the registry refuses the second at registration.

Before the check, a demonstration `write_cache` axis beside the cache axis (which sets the device's write-cache)
produced ``-device virtio-blk-pci,…,write-cache=on,write-cache=off`` and `--current` read one option as both.
"""

from __future__ import annotations

import pytest

from iomatrix.domain import axes
from iomatrix.domain.axes import Axis, Layer, QemuOptions, ToolOption

WRITE_CACHE = Axis(
    "write_cache", "the guest-visible write cache (demonstration: the cache axis already sets it)", ("on", "off"),
    "on", ("on",), frozenset({Layer.DEVICE}),
    qemu=lambda v: QemuOptions(device=(("write-cache", v),)),
    tools={"libvirt": lambda v: ToolOption()})


def test_an_axis_setting_an_option_another_axis_sets_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        axes.register(WRITE_CACHE)
    message = str(err.value)
    assert message.startswith("axis 'write_cache' sets write-cache on the guest device (-device), which axis "
                              "'cache' already sets")
    assert "\n" not in message
    assert "write_cache" not in axes.REGISTRY
    with pytest.raises(ValueError, match="already sets"), axes.registered(WRITE_CACHE):
        pass  # (never reached)
    assert "write_cache" not in axes.REGISTRY


def test_a_collision_is_found_on_the_value_that_sets_it_and_on_cell_dependent_options() -> None:
    # Only "unmap" sets the node's discard (off sets nothing): the check reads every value.
    only_some = Axis("trim", "demo", ("off", "unmap"), "off", ("off",), frozenset({Layer.IMAGE}),
                     qemu=lambda v: QemuOptions() if v == "off" else QemuOptions(file_node=(("discard", v),)))
    with pytest.raises(ValueError, match=r"sets discard on the protocol node .* axis 'discard' already sets"):
        axes.register(only_some)
    # An option that depends on the cell (as the L2 cache bound does) is checked too.
    by_cell = Axis("l2_bound", "demo", ("a", "b"), "a", ("a",), frozenset({Layer.IMAGE}),
                   qemu_cell=lambda values, ctx: QemuOptions(format_node=(("l2-cache-size", "1M"),)))
    with pytest.raises(ValueError, match="axis 'l2_cache' already sets"):
        axes.register(by_cell)


def test_an_axis_with_options_of_its_own_registers() -> None:
    own = Axis("demo_locking", "demo", ("auto", "off"), "auto", ("auto",), frozenset({Layer.IMAGE}),
               qemu=lambda v: QemuOptions(file_protocol=(("locking", v),)))
    with axes.registered(own):
        assert axes.get("demo_locking") is own
        assert axes.qemu_options({"demo_locking": "off"}).file_protocol == (("locking", "off"),)
    assert "demo_locking" not in axes.REGISTRY


def test_the_shipped_registry_has_no_collision() -> None:
    listed = list(axes.REGISTRY.values())
    for i, axis in enumerate(listed):
        assert axes.collision(axis, listed[:i]) is None, axis.name
