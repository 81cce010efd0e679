"""The keys of the tools' disk statements, and who writes them beside the axes.

Every axis writes keys of some tool's disk statement (QEMU's -blockdev nodes, -device and --export;
libvirt's <disk>, Proxmox's drive, virt-install's --disk, Nova's configuration), and so do writers
that are no axis: iomatrix's own QEMU and libvirt builders, and each network protocol (its QEMU
protocol node, the nova.conf lines of its Nova snippet). One key belongs to one owner: the axis
registry (:mod:`iomatrix.domain.axes`) refuses a second at registration.

The network protocols are another registry (:mod:`iomatrix.protocols`), which the axis registry
cannot import without a loop (its axis_model names the protocols). So that registry offers its
writers here, as a *source* the axis registry asks whenever it registers an axis
(:data:`WRITER_SOURCES`); this module imports nothing of iomatrix, so both registries import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class SpellingKey:
    """One key of one tool's disk statement: QEMU's -blockdev node, -device, --export or qemu-img
    create -o (where it goes matters: `cache.direct` on the format node and on the protocol node are
    two options), or the disk statement of libvirt, Proxmox, virt-install or Nova."""

    tool: str  # "qemu", or a key of axes.TOOL_PLACES
    where: str  # as an error message says it: "the guest device (-device)", "libvirt's <disk>"
    key: str


@dataclass(frozen=True)
class Writer:
    """Something other than an axis that writes keys of a tool's disk statement: iomatrix's own QEMU
    and libvirt writers (the format node's driver, libvirt's <driver name=>), a network protocol's
    QEMU protocol node. It declares the keys it writes; an axis writing one of them is refused at
    registration as one writing another axis's key is (the statement would hold the key twice, or
    one of the two would silently win)."""

    # as a refusal names it: "iomatrix's QEMU disk builder", "the iscsi protocol's QEMU node"
    name: str
    keys: frozenset[SpellingKey]


# nova.conf's keys choosing the instance disks' backend: an image file's (the format and
# preallocation axes write them), which a protocol's Nova snippet naming another backend (Ceph's
# images_type = rbd) replaces as a whole, leaving the axes' out (vmconfig.nova). Written by both by
# design, so no collision.
NOVA_BACKEND_KEYS = ("images_type", "preallocate_images")

# Registries that own writers (the network protocols), each a function returning its writers as
# they are now (a protocol an installed package adds included). The axis registry calls them when
# it registers an axis; never while it is being imported (a source may import the axis registry).
WRITER_SOURCES: list[Callable[[], Iterable[Writer]]] = []
# The protocol registry's lookup (a backing's protocol name → its NetworkProtocol, None for a local
# backing), offered the same way: the axes' rules ask a protocol what it allows (why the rtt relay
# cannot sit between its client and server) and cannot import that registry. Set as it loads, which
# is before any rule runs (the axes import the protocol modules, which load the registry first).
PROTOCOL_LOOKUP: list[Callable[[str | None], Any]] = []
