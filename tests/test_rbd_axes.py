"""The Ceph RBD axes of issue 35 (rbd_cache, rbd_cache_policy, rbd_cache_writethrough_until_flush,
rbd_client, rbd_object_size): registered with Ceph 16's defaults, kept on RBD backings with the
reason shown elsewhere, the cells QEMU contradicts pruned (it sets rbd_cache from its own cache
mode), krbd pruned where the host has no rbd module, and librbd's writeback policy read as a risk
like a disk's volatile cache."""

from __future__ import annotations

import pytest

from iomatrix import storage_clients
from iomatrix.domain import SafetyLevel, axes
from iomatrix.domain.axes import BackingFacts, RuleContext
from iomatrix.matrix import Cell
from iomatrix.tiers.declared.blocklayer import BlockLayer

LOCAL = BackingFacts(unavailable=None, o_direct=True, is_device=False)
ISCSI = BackingFacts(unavailable=None, o_direct=True, is_device=True, protocol="iscsi")
RBD = BackingFacts(unavailable=None, o_direct=True, is_device=False, protocol="rbd")
RBD_NO_MODULE = BackingFacts(
    unavailable=None,
    o_direct=True,
    is_device=False,
    protocol="rbd",
    kernel_client_missing="no rbd kernel module (loaded or installed) on this host",
)
NEW = (
    "rbd_cache",
    "rbd_cache_policy",
    "rbd_cache_writethrough_until_flush",
    "rbd_client",
    "rbd_object_size",
)


def _why(facts: BackingFacts, **values: str) -> str | None:
    base = {a.name: a.default for a in axes.plan_axes()}
    cell = {**base, "tier": "blocklayer", "backing": "b", "bus": "-", "cache": "none", **values}
    return axes.prune_reason(cell, RuleContext(facts, "b"))


def test_the_axes_have_cephs_own_defaults() -> None:
    # ceph-conf -c /dev/null --show-config-value on Debian 12's Ceph 16.2.15: rbd_cache true,
    # rbd_cache_policy writearound, rbd_cache_writethrough_until_flush true, rbd_default_order 22 (4
    # MiB objects)
    got = {n: axes.get(n).default for n in NEW}
    assert got == {
        "rbd_cache": "on",
        "rbd_cache_policy": "writearound",
        "rbd_cache_writethrough_until_flush": "on",
        "rbd_client": "librbd",
        "rbd_object_size": "4M",
    }
    assert set(axes.get("rbd_cache_policy").values) == {"writearound", "writeback", "writethrough"}


@pytest.mark.parametrize(
    ("values", "facts", "expected"),
    [
        (
            {"rbd_cache_policy": "writeback"},
            LOCAL,
            "rbd_cache_policy applies to rbd backings only; b is a local",
        ),
        ({"rbd_object_size": "16M"}, ISCSI, "b is a iscsi backing"),
        (
            {"rbd_client": "krbd"},
            RBD_NO_MODULE,
            "rbd_client=krbd needs the host's kernel client: no rbd kernel module",
        ),
        (
            {"rbd_client": "krbd", "rbd_cache_policy": "writeback"},
            RBD,
            "krbd (rbd_client=krbd) uses the host's page",
        ),
        (
            {"rbd_cache": "off", "cache": "writeback"},
            RBD,
            "rbd_cache=off cannot take effect through QEMU",
        ),
        ({"rbd_cache": "off", "cache": "none"}, RBD, "already sets rbd_cache=off for cache=none"),
        ({"aio": "native"}, RBD, "QEMU's rbd driver on backing b"),
        ({"rtt": "2ms"}, RBD, "connects to them directly, past any relay"),
        ({"format": "qed"}, RBD, "iomatrix makes RBD images raw or qcow2"),
        ({"format": "qcow2", "preallocation": "full"}, RBD, "preallocates only off or metadata"),
    ],
)
def test_a_value_where_it_does_not_belong_is_pruned_with_the_reason(
    values: dict[str, str], facts: BackingFacts, expected: str
) -> None:
    why = _why(facts, **values)
    assert why is not None and expected in why


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "cache": "writeback",
            "rbd_cache_policy": "writeback",
            "rbd_cache_writethrough_until_flush": "off",
        },
        {"rbd_object_size": "1M", "cache": "writethrough"},
        {"format": "qcow2", "preallocation": "metadata"},
        {
            "rbd_client": "krbd",
            "aio": "native",
        },  # a mapped /dev/rbdN is a block device: aio applies
    ],
)
def test_a_value_where_it_belongs_runs(values: dict[str, str]) -> None:
    assert _why(RBD, **values) is None


def test_object_size_is_checked_like_cephs() -> None:
    a = axes.get("rbd_object_size")
    assert a.invalid("8M") is None and a.invalid("4K") is None
    assert "power of two from 4K to 32M" in (a.invalid("3M") or "")
    assert "power of two" in (a.invalid("64M") or "")


def test_writeback_and_writearound_policies_are_a_risk_like_a_disk_cache() -> None:
    # writearound acknowledges a write while it is in flight to the OSDs: unflushed writes die with
    # the client
    risk = axes.get("rbd_cache_policy").risk
    assert risk("writeback") == SafetyLevel.LIKE_A_DISK_CACHE
    assert risk("writearound") == SafetyLevel.LIKE_A_DISK_CACHE
    assert risk("writethrough") is None


def test_krbd_probe_names_what_is_missing() -> None:
    assert storage_clients.krbd_missing("/usr/bin/rbd", True) is None
    assert storage_clients.krbd_missing(None, False) == (
        "no rbd tool (Debian package ceph-common); no rbd kernel "
        "module (loaded or installed) on this host"
    )


@pytest.mark.parametrize(
    ("protocol", "axis", "kernel", "userspace"),
    [
        ("rbd", "rbd_client", "krbd", "librbd"),
        ("iscsi", "initiator", "kernel", "libiscsi"),
        ("nfs", "nfs_client", "kernel", "libnfs"),
    ],
)
def test_the_block_layer_prunes_every_protocols_kernel_client(
    protocol: str, axis: str, kernel: str, userspace: str
) -> None:
    """The block-layer tier opens a network disk with QEMU's own client only: it asks the backing's
    protocol whether a cell chose the kernel's (krbd was let through, and measured librbd)."""
    facts = BackingFacts(None, True, False, protocol=protocol, lab_started=True)
    cell = {"tier": "blocklayer", "backing": protocol, "format": "raw", "cache": "none"}
    pruned = BlockLayer.prune_reason(Cell({**cell, axis: kernel}), facts) or ""
    assert pruned.startswith(f"{axis}={kernel}: the block-layer tier opens"), pruned
    assert BlockLayer.prune_reason(Cell({**cell, axis: userspace}), facts) is None
