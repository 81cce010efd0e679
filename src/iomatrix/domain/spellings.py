"""The keys of the tools' disk statements, and who writes them beside the axes.

Every axis writes keys of some tool's disk statement (QEMU's -blockdev nodes, -device and --export;
libvirt's <disk>, Proxmox's drive, virt-install's --disk, Nova's configuration), and so do writers
that are no axis: iomatrix's own QEMU and libvirt builders, and each network protocol (its QEMU
protocol node, the nova.conf lines of its Nova snippet). One key belongs to one owner: the axis
registry (:mod:`iomatrix.domain.axes`) refuses a second at registration.

The axis registry reads each network protocol's writers from the protocol itself
(`axes.network_writers`). This module imports nothing of iomatrix: the axis registry and the
protocols' modules both import it.
"""

from __future__ import annotations

from dataclasses import dataclass


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
