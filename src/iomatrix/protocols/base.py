"""What a network protocol promises the rest of iomatrix: the base every protocol's house
subclasses.

A protocol (iSCSI, NFS, Ceph RBD, or one an installed package adds) is one module holding a subclass
of :class:`NetworkProtocol`; the registry (:mod:`iomatrix.protocols`) finds it by its module (the
built-in ones) or by the ``iomatrix.protocols`` entry point group (an installed package's). Generic
code asks the registry for the protocol of a disk or backing and calls it, instead of comparing its
name with a literal.

The promises, kept by every subclass (the registry checks what it can when it registers one):

- ``name`` is the plan's ``[[backing]] type``, the disk's protocol in a stored result and libvirt's
  ``<source protocol=…>``: lower case letters, digits and ``_``; unique among the registered
  protocols.
- ``client_axis`` names the axis choosing the protocol's client; ``kernel_client`` is that axis's
  value for the host kernel's client. Any other value is QEMU's own client (``userspace_library``).
- The spelling methods are pure: they write text from a :class:`NetworkPlace` (placeholders or the
  user's own, read by ``--current``) and a cell's axis values; none opens a socket or runs a
  program.
- What a protocol names by ``"module:attribute"`` (its backing spec, its extra snippets) is imported
  only when it is used, as a tier's implementation is: the registry itself imports no lab or snippet
  code.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from iomatrix.domain.axis_model import Axis
from iomatrix.protocols.place import NetworkPlace

# How the durability tier cuts a network disk: the target's power (a LUN over a volatile cache), or
# the client (QEMU SIGKILLed with its library's cache in it, then fenced).
CUT_TARGET_POWER, CUT_CLIENT_CRASH = "target power loss", "client crash"
DURABILITY_CUTS = (CUT_TARGET_POWER, CUT_CLIENT_CRASH)
# A protocol's name: a plan's backing type and a libvirt protocol attribute both take it as it is.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# (the <disk type=…>, the <source> attributes, its <host> attributes or None)
LibvirtSource = tuple[str, dict[str, str], "dict[str, str] | None"]


@dataclass(frozen=True)
class FlushGatedCache:
    """A client-side write cache that stays writethrough until the guest's first flush, with the
    axes that set it: what report/flush_gate.py names in its sentence."""

    client: str  # the client library whose cache it is, as a sentence names it ("librbd")
    where: str  # the backing as the sentence names it ("on rbd")
    until_flush_axis: str  # the axis of the until-flush switch (on: writethrough until a flush)
    policy_axis: str  # the axis of the cache's policy
    default_policy: str
    default_until_flush: str
    defaults_of: str  # whose defaults those are ("Ceph": "Ceph's default")
    scope: str  # what one switch covers ("image": the first flush turns it on for the image)
    # the protocol's axes that change the figures: a finding is stated per value of them
    context_axes: tuple[str, ...] = ()


class NetworkProtocol(ABC):
    """One network protocol: its names, its client choice and its spellings for each tool."""

    name: ClassVar[str]
    # How a sentence names it ("iSCSI", "NFS", "Ceph RBD") and the article before that name.
    title: ClassVar[str]
    article: ClassVar[str] = "an"
    # The axis choosing the client, and its value for the host kernel's client.
    client_axis: ClassVar[str]
    kernel_client: ClassVar[str]
    # QEMU's own client of it (a library of Debian's qemu-block-extra), as the notes name it.
    userspace_library: ClassVar[str]
    # What serves it, as a sentence names it ("iSCSI target", "NFS server", "Ceph cluster").
    server_noun: ClassVar[str]
    # Whether the disk is a volume of a fixed size (a LUN, an RBD image: raw is the volume itself,
    # and the kernel's client gives a block device), rather than an image file on a shared
    # filesystem.
    is_volume: ClassVar[bool]
    # The backing spec (a pydantic model with `type: Literal[name]`), by "module:Class": imported on
    # use.
    spec: ClassVar[str]
    # Extra snippets beside every tool's, each a "module:function" taking a DiskConfig (tgt's
    # targets.conf, ceph.conf's [client] lines): imported on use.
    extra_snippets: ClassVar[tuple[str, ...]] = ()
    # The tools those snippets are for (the server's or the client host's own configuration, written
    # beside every VM tool's): `recommend --target` takes each, and --detail shows them whatever the
    # VM tool.
    snippet_targets: ClassVar[tuple[str, ...]] = ()
    # Why `qemu-img create` makes nothing for a raw disk on it (a raw disk on a volume is the volume
    # itself); None where it makes the image file.
    qemu_img_raw_note: ClassVar[str | None] = None
    # Nova's snippet for a disk on it, a "module:function" taking (DiskConfig, title), where
    # nova.conf's instance-disk settings can put one there (Ceph's rbd image backend); None where
    # they cannot.
    nova_snippet: ClassVar[str | None] = None
    # How an answer's first screen shows its storage-side snippet (issue 49: only what the answer
    # sets, ceph.conf's [client] lines), a "module:function" taking (the snippet, the DiskConfig,
    # the axes the sweep varied) and returning the snippet to show: imported on use; None: shown as
    # it is.
    answer_snippet: ClassVar[str | None] = None
    # How a disk of it is read back from a VM's configuration (`--current`): a
    # vmconfig.network.DiskReader by "module:OBJECT", imported on use; None where it is not read.
    reader: ClassVar[str | None] = None
    # Proxmox storage types (storage.cfg) a disk of this protocol is on: its volumes are read by
    # its reader's `proxmox` (vmconfig/network.py read_proxmox_volume).
    proxmox_types: ClassVar[tuple[str, ...]] = ()
    # Whether Proxmox's storage of it is always the host kernel's client (an nfs storage is a kernel
    # mount under /mnt/pve), whatever client a cell measured: its Proxmox snippet's risks are then
    # the kernel client's (report/recommend/risks.py target_risks).
    proxmox_kernel_mount: ClassVar[bool] = False
    # Whether Proxmox's storage of it holds raw disks only (a LUN, an RBD image), and why not
    # another format.
    proxmox_raw_only: ClassVar[str | None] = None
    # What a sweep's figures on it show beyond the answers (librbd's writethrough-until-flush trap),
    # each a "module:function" taking (its cells, threshold, shapes, interference, short, brief)
    # and returning sentences (report/flush_gate.py flush_gate_findings): imported on use.
    findings: ClassVar[tuple[str, ...]] = ()
    # Its client's cache, where it stays writethrough until the guest's first flush (librbd's):
    # the facts report/flush_gate.py tells its trap with (its `flush_gate_findings` is then one of
    # `findings`); None for a client without one.
    flush_gated_cache: ClassVar[FlushGatedCache | None] = None
    # Its client-side axes (the LUN's type and write cache, the client, librbd's cache, …), defined
    # in its own module and registered by the axis registry as it loads (domain/axes.py reads every
    # built-in protocol's, issue 48), so adding one touches only the protocol's files. An installed
    # package's protocol offers its axes through the `iomatrix.axes` entry point instead (the axis
    # registry loads before any protocol is registered); the registry refuses one listed here only.
    axes: ClassVar[tuple[Axis, ...]] = ()
    # Where those axes go in the registry's order (cells' keys, tables' columns): before the shared
    # network axis of that name (rtt, clients: domain/network_axes.py), the place iSCSI's and NFS's
    # had when their cells were first stored; None: after every other axis, where a new protocol's
    # go (built-in protocols in module name order within each place).
    axes_before: ClassVar[str | None] = None
    # Seconds one durability trial takes on it where that differs from the tier's own (a Ceph trial
    # makes and fences more: docs/benchmarks-history.md, "Issue 35: a Ceph client crash").
    durability_trial_s: ClassVar[float | None] = None
    # Seconds from a sweep's start to its first run that starting its lab server takes (the sweep's
    # estimate counts it once per lab-started backing: estimate.py). An installed protocol that
    # gives none is counted as the slowest built-in server (Ceph's), so its estimate errs long.
    lab_setup_s: ClassVar[float] = 16.0

    # ----------------------------------------------------------------------- the lab and the tiers
    # Its lab half by "module:function", imported on use (a lab module imports what imports this
    # registry): what starts its server or checks the existing one, taking (spec, workdir, scratch,
    # td, allowed_devices) and returning (server, metadata); and what says why an existing server
    # cannot serve, taking the spec (a bounded, read-only check). The spec's own provision_server
    # and serving_problem may take their place (NBD's).
    lab_server: ClassVar[str | None] = None
    existing_check: ClassVar[str | None] = None
    # The Debian packages a measuring host needs for it: its lab server's and QEMU's client driver
    # (scripts/setup.sh --shared-storage and the fleet role install them;
    # tests/test_protocol_packages.py holds setup.sh to these lists).
    packages: ClassVar[tuple[str, ...]] = ()
    # The check of this host's kernel client of it, a "module:function" returning why that client
    # cannot be used (one line) or None: imported on use.
    kernel_probe: ClassVar[str | None] = None
    # Why the bare-metal tier's server-side baseline (fio on the disk's file on the server) cannot
    # run on it; None where a lab-started server shows that file.
    server_baseline_unavailable: ClassVar[str | None] = None
    # Whether a lab-started server of it keeps each run's disk as a file in the working directory (a
    # LUN file, an export's image): the space check before a sweep counts it there.
    lab_disks_in_workdir: ClassVar[bool] = False
    # The leftover kinds its lab half records in the leftovers ledger beside the host's own
    # (backing.leftover_kinds), "module:Class" each, imported when a ledger names one.
    leftover_kinds: ClassVar[tuple[str, ...]] = ()
    # Its side of the rtt axis's delaying relay, "module:function" imported on use (a client that
    # takes a port): a context manager `(disk, rtt_ms, workdir)` yielding (the disk reached through
    # the relay, the RTT requested and measured), see backing.delay_relay; None where the relay
    # cannot sit between its client and server (`rtt_unavailable` says why).
    rtt_relay: ClassVar[str | None] = None
    # Why the rtt axis's relay cannot sit between its client and its server (a Ceph client connects
    # to the OSDs the monitor names, past any relay); None where rtt is not refused on it.
    rtt_unavailable: ClassVar[str | None] = None
    # How the durability tier cuts a disk of it (DURABILITY_CUTS), or None where no cut is built.
    durability_cut: ClassVar[str | None] = None
    # The axes a durability verdict on it must match to speak for a configuration (the server's own
    # cache).
    durability_must_match: ClassVar[tuple[str, ...]] = ()
    # Whether QEMU's own client keeps writes in a cache of its own in the host (librbd's); where it
    # does not, a cache mode that keeps a cache has the risk texts of a client that sends every
    # write at once.
    userspace_client_caches: ClassVar[bool] = False
    # Whether a cache mode that keeps the host page cache keeps it for the kernel's client of it (a
    # mount, a SCSI disk); False where the shape findings read none of its cells as the page cache's
    # (Ceph's: its client-side cache is read apart, report/flush_gate.py).
    kernel_client_page_cache: ClassVar[bool] = True
    # The axis switching a volatile write cache of the server's disk on and off (tgt's LUN
    # write-cache), whose cost and gain a shape finding reads; None where the server has none.
    server_write_cache_axis: ClassVar[str | None] = None
    # The kernel's filesystem types of its kernel client (/proc/filesystems, a mount's type), for
    # generic code that tells network filesystems apart (flock emulation, a device chain's end).
    kernel_fs_types: ClassVar[tuple[str, ...]] = ()

    def durability_reason(self, cell: Mapping[str, str], lab_started: bool | None) -> str | None:
        """Why the durability tier cannot cut a disk of it in `cell`, or None where it can."""
        return (
            "the durability tier cuts the power of an iSCSI target, or crashes a Ceph client, on "
            "storage "
            f"it starts itself; a cut of a {self.name} server is not built, so its risk lines stay "
            "documented"
        )

    def userspace_cache_texts(self, axes: Mapping[str, str]) -> tuple[str, str, str, str] | None:
        """What a cache mode that keeps a cache (writeback) risks where QEMU's own client keeps a
        cache of its own in the host (librbd's), in the order of the risk situations (QEMU crash,
        host crash or power loss, live migration, a guest that sends no flushes); None where it
        keeps none (`userspace_client_caches`: the texts of a client that sends every write)."""
        return None

    def server_power_loss(self, axes: Mapping[str, str]) -> str | None:
        """What a power loss of the server loses with a cell's settings of the server's own write
        cache (`server_write_cache_axis`), documented, where no durability trial measured it; None
        where the protocol documents none."""
        return None

    def client_crash_risk(self, axes: Mapping[str, str]) -> tuple[str, str] | None:
        """(the situation, what it loses) where a cell's settings of QEMU's own client's cache hold
        acknowledged writes in the client past a crash of it (librbd's writeback cache), documented;
        asked where QEMU's cache mode keeps a cache (not cache.direct=on) and no durability trial
        crashed such a client. None where its client holds none."""
        return None

    def host_page_cache(self, values: Mapping[str, str]) -> bool:
        """Whether a cell's disk goes through the host page cache where its cache mode keeps it:
        the kernel's client only (QEMU's own clients have none), and only where that client does."""
        return self.kernel_client_page_cache and self.client_is_kernel(values)

    def client_is_kernel(self, values: Mapping[str, str]) -> bool:
        """Whether a cell's values choose the host kernel's client of this protocol."""
        return values.get(self.client_axis) == self.kernel_client

    def handed_over_problem(self, url: str) -> str | None:
        """Why an ``--allow-destroy`` argument of this protocol's scheme (``nbd://…``) is not a
        disk of it, in one line naming the fix; None where it reads as one or where the protocol
        checks it only with its backing (the spec's `availability`). Nothing on the host is that
        disk: only its spelling is checked, before anything runs."""
        return None

    @property
    def measures_rtt(self) -> bool:
        """Whether a run on it goes through the delay relay's round-trip measurement."""
        return self.rtt_relay is not None

    @property
    def named(self) -> str:
        """The protocol's title with its article ("an iSCSI", "a Ceph RBD")."""
        return f"{self.article} {self.title}"

    # ----------------------------------------------------------------- the disk, as tools write it
    @abstractmethod
    def url(self, place: NetworkPlace, fmt: str) -> str:
        """The disk as qemu-img and QEMU's -drive name it (iscsi://…, nfs://…, rbd:…)."""

    @abstractmethod
    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        """(the <disk type=…>, the <source> attributes, its <host> attributes or None): a network
        disk for QEMU's own client, a block device or a file through the kernel's."""

    def libvirt_auth(self, place: NetworkPlace) -> tuple[dict[str, str], dict[str, str]] | None:
        """(<auth> attributes, its <secret> attributes) of a disk that logs in; None for one that
        does not."""
        return None

    def libvirt_identity(self) -> dict[str, str] | None:
        """libvirt's <identity> under <source> where the schema requires one (the user a library
        accesses the server as); None where it has none."""
        return None

    @abstractmethod
    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        """The protocol node's -blockdev options under the format node (``file.`` keys without the
        prefix): QEMU's own driver, or the device/file the kernel's client gives."""

    @abstractmethod
    def kernel_client_steps(self, place: NetworkPlace) -> str:
        """What the host does before the VM starts when the kernel is the client (log in, mount,
        map)."""

    @abstractmethod
    def placeholder_where(self, place: NetworkPlace) -> str:
        """The placeholders a snippet writes for the server and the disk, as a note names them."""

    def userspace_notes(self, place: NetworkPlace) -> list[str]:
        """What a snippet notes where QEMU's own client opens the disk, beyond the library's
        name."""
        return []

    def disk_notes(self, values: Mapping[str, str], more: Mapping[str, str]) -> list[str]:
        """Notes on the disk whichever client opens it (where its own settings are written)."""
        return []

    def qemu_img_target(
        self, values: Mapping[str, str], place: NetworkPlace, fmt: str
    ) -> str | None:
        """Where `qemu-img create` makes an image QEMU's own client opens; None where it makes none
        (a raw disk on a volume is the volume itself)."""
        return None if self.is_volume else self.url(place, fmt)

    def libvirt_pool(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str | None, str]:
        """(a libvirt storage pool's <pool> XML holding the disk, with <auth> placeholders where it
        logs in, or None where libvirt has no pool for the client measured; what it leaves to the
        user)."""
        return None, f"libvirt has no storage pool for {self.named} disk"

    # ------------------------------------------------------------------------------------- Proxmox
    @abstractmethod
    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        """(storage type, storage id, its /etc/pve/storage.cfg entry) of the storage the disk is
        on."""

    def proxmox_volume(self, kind: str, sid: str, place: NetworkPlace, size_gib: int) -> str:
        """The disk's volume on that storage as `qm set` takes it (a new image: STORAGE:SIZE)."""
        return f"{sid}:{size_gib}"

    def proxmox_placeholder(self, place: NetworkPlace) -> str:
        """The placeholder beside the server's address in a Proxmox note (the target, the export,
        …)."""
        return place.iqn

    def proxmox_unavailable(self) -> str | None:
        """Why Proxmox VE cannot hold a disk of it (no storage type of it), or None where it can."""
        return None

    @abstractmethod
    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        """What a Proxmox storage of `kind` does with the disk, and whether it is the client
        measured."""

    def nova_conf(self, place: NetworkPlace) -> list[tuple[str, str]]:
        """The nova.conf [libvirt] lines its Nova snippet (`nova_snippet`) writes itself, beside the
        axes' (Ceph's images_type = rbd and its pool); none where it names no Nova snippet. The axis
        registry reads their keys: an axis writing one of them is refused."""
        return []

    def nova_unavailable(self) -> str:
        """Why Nova's instance-disk settings cannot put a disk on it, where `nova_snippet` names
        none."""
        return (
            f"{self.title} disks are Cinder volumes in Nova (set up by the Cinder volume "
            "driver: its target and transport options), not nova.conf's instance-disk settings"
        )

    def __repr__(self) -> str:
        return f"<network protocol {self.name} ({type(self).__module__})>"
