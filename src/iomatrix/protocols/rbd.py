"""Ceph RBD: an image of a Ceph cluster (one node iomatrix starts, or an existing cluster), opened
by QEMU's librbd or mapped by the host kernel's krbd (the ``rbd_client`` axis). The lab half (the
one-node cluster, the fence, leftovers) is in :mod:`iomatrix.backing.rbd` and
:mod:`iomatrix.backing.leftover_rbd`; the spec in :mod:`iomatrix.backing.spec`; librbd's cache axes
in :mod:`iomatrix.protocols.ceph`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from iomatrix.domain import NA
from iomatrix.domain.axis_model import Axis
from iomatrix.protocols import ceph
from iomatrix.protocols.base import CUT_CLIENT_CRASH, LibvirtSource, NetworkProtocol
from iomatrix.protocols.place import CEPH_MON_PORT, NetworkPlace

NAME = ceph.RBD
PROXMOX_STORAGE_ID = "ceph-vm"
# RBDPlugin: an rbd storage without 'pool' uses the pool named rbd.
PROXMOX_DEFAULT_POOL = "rbd"
# The rbd(8) tool, whose `rbd create` snippet makes the image with its object size.
RBD_TOOL = "rbd"


def ceph_value(values: Mapping[str, str], axis: str) -> str:
    """A cell's value of an rbd axis; Ceph's own default where the cell leaves it out (or shows
    '-')."""
    default = ceph.DEFAULTS[axis]
    value = values.get(axis, default)
    return default if value in ("-", "") else value


def rbd_order(object_size: str) -> int:
    """An object size as rbd(8) writes it (4M, 512K, 4194304) as the image's order, log2 of its
    bytes (Ceph's rbd_default_order: 22 is 4 MiB); a one-line ValueError for one that is not a power
    of two from 4K to 32M."""
    m = re.fullmatch(r"(\d+)([KM]?)B?", object_size.upper())
    size = int(m.group(1)) << {"": 0, "K": 10, "M": 20}[m.group(2)] if m else 0
    if size < 4096 or size > 32 << 20 or size & (size - 1):
        raise ValueError(f"object size '{object_size}' is not a power of two from 4K to 32M")
    return size.bit_length() - 1


class Rbd(NetworkProtocol):
    name = NAME
    title = "Ceph RBD"
    article = "a"
    client_axis = "rbd_client"
    kernel_client = ceph.KRBD
    userspace_library = "librbd"
    server_noun = "Ceph cluster"
    is_volume = True
    spec = "iomatrix.backing.rbd:RbdBacking"
    extra_snippets: ClassVar[tuple[str, ...]] = (
        "iomatrix.vmconfig.ceph_conf:ceph_conf_snippet",
        "iomatrix.vmconfig.ceph_conf:rbd_create_snippet",
        "iomatrix.vmconfig.ceph_conf:rbd_config_snippet",
    )
    snippet_targets: ClassVar[tuple[str, ...]] = ("ceph", RBD_TOOL)
    nova_snippet = "iomatrix.vmconfig.ceph_conf:nova_rbd_snippet"
    answer_snippet = "iomatrix.vmconfig.ceph_conf:answer_ceph_snippet"
    findings: ClassVar[tuple[str, ...]] = ("iomatrix.report.rbd_flush:rbd_findings",)
    proxmox_types: ClassVar[tuple[str, ...]] = (NAME,)
    qemu_img_raw_note = (
        "none needed: a raw disk on Ceph is the RBD image itself, which the rbd create "
        "snippet makes with its object size"
    )
    proxmox_raw_only = (
        "a Proxmox rbd storage holds raw images only (RBD has its own thin provisioning and "
        "snapshots)"
    )
    # A trial on Ceph RBD also makes two RBD images, fences the crashed client and reads both images
    # back through librbd: 7.5-11.4 s measured, about 9 s (docs/benchmarks.md, issue 35).
    durability_trial_s = 9.0
    # the lab cluster's monitor and OSD, the ceph/rbd tools, QEMU's rbd driver (block-rbd.so)
    packages: ClassVar[tuple[str, ...]] = (
        "ceph-mon",
        "ceph-osd",
        "ceph-common",
        "qemu-block-extra",
    )
    lab_server = "iomatrix.backing.rbd:provision_rbd"
    leftover_kinds = ("iomatrix.backing.rbd:RbdImageLeftover",)
    # librbd's cache, the client, the object size (protocols/ceph.py), after every other axis
    axes: ClassVar[tuple[Axis, ...]] = ceph.AXES
    existing_check = "iomatrix.backing.rbd:existing_pool_problem"
    reader = "iomatrix.vmconfig.read_rbd:READER"
    kernel_probe = "iomatrix.backing.rbd:probe_kernel_client"
    # Its cells are read apart for the cache findings (report/rbd_flush.py): librbd keeps its own.
    kernel_client_page_cache = False
    # BlueStore keeps an image's objects in its own block file: there is no file of the disk to run
    # fio on.
    server_baseline_unavailable = (
        "an RBD image has no file of its own on the server (BlueStore keeps objects in its block "
        "file); the "
        "server-side baseline for RBD would be fio's ioengine=rbd, which iomatrix does not run yet"
    )
    durability_cut = CUT_CLIENT_CRASH
    rtt_unavailable = (
        "rtt is emulated by a relay between client and server; a Ceph client learns the OSDs' "
        "addresses from the monitor's map and connects to them directly, past any relay: iSCSI only"
    )
    durability_must_match: ClassVar[tuple[str, ...]] = (
        "rbd_cache_policy",
        "rbd_cache_writethrough_until_flush",
    )
    userspace_client_caches = True

    def durability_reason(self, cell: Mapping[str, str], lab_started: bool | None) -> str | None:
        """On RBD the trial's cut is a Ceph client crash (QEMU SIGKILLed with librbd's cache in it);
        the cluster is then told to forget the dead client (`ceph osd blocklist`), which takes a
        cluster iomatrix started."""
        if not lab_started:
            return (
                "the durability tier crashes a Ceph client and then fences it (ceph osd blocklist) "
                "on a "
                "cluster it starts itself; it never fences clients of an existing cluster: use a "
                "lab-started rbd backing (no conf/pool)"
            )
        if cell.get("rbd_client", NA) == ceph.KRBD:
            return (
                "rbd_client=krbd keeps no librbd cache: a QEMU crash leaves its writes in the host "
                "kernel; "
                "the durability tier crashes librbd clients"
            )
        return None

    def userspace_cache_texts(self, axes: Mapping[str, str]) -> tuple[str, str, str, str]:
        """librbd's cache, which QEMU's cache modes that keep one turn on (block/rbd.c)."""
        crash, power, migration, no_flush = ceph.LIBRBD_CACHE_TEXTS
        if axes.get("rbd_cache_writethrough_until_flush") == "off":
            no_flush = ceph.LIBRBD_NO_FLUSH_UNTIL_OFF
        return crash, power, migration, no_flush

    def client_crash_risk(self, axes: Mapping[str, str]) -> tuple[str, str] | None:
        """librbd's writeback cache holds acknowledged writes in the QEMU process until a flush
        (policy writeback; writearound's are in flight, the QEMU crash line says so)."""
        if axes.get("rbd_cache_policy") == "writeback":
            return ceph.CLIENT_CRASH, ceph.RBD_CACHE_RISK
        return None

    def url(self, place: NetworkPlace, fmt: str) -> str:
        # QEMU's rbd: pseudo-URL (block/rbd.c qemu_rbd_parse_filename): Ceph options after ':'
        return f"rbd:{place.rbd_name}:id={place.ceph_user}:conf={place.ceph_conf}"

    def libvirt_source(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> LibvirtSource:
        if self.client_is_kernel(values):
            return "block", {"dev": place.rbd_device()}, None
        return (
            "network",
            {"protocol": self.name, "name": place.rbd_name},
            {"name": place.host, "port": str(CEPH_MON_PORT)},
        )

    def libvirt_auth(self, place: NetworkPlace) -> tuple[dict[str, str], dict[str, str]]:
        """The cephx user and the libvirt secret holding its key."""
        return {"username": place.ceph_user}, {"type": "ceph", "uuid": place.secret_uuid}

    def qemu_node(
        self, values: Mapping[str, str], fmt: str, place: NetworkPlace
    ) -> list[tuple[str, str]]:
        # QEMU 7.2's BlockdevOptionsRbd (qapi/block-core.json): the monitors come from conf
        if self.client_is_kernel(values):
            return [("driver", "host_device"), ("filename", place.rbd_device())]
        return [
            ("driver", self.name),
            ("pool", place.pool),
            ("image", place.image),
            ("conf", place.ceph_conf),
            ("user", place.ceph_user),
        ]

    def nova_conf(self, place: NetworkPlace) -> list[tuple[str, str]]:
        # nova.conf [libvirt]: the rbd image backend, its pool, conf, user and libvirt secret
        return [
            ("images_type", "rbd"),  # Nova's name for its rbd image backend
            ("images_rbd_pool", place.pool),
            ("images_rbd_ceph_conf", place.ceph_conf),
            ("rbd_user", place.ceph_user),
            ("rbd_secret_uuid", place.secret_uuid),
        ]

    def kernel_client_steps(self, place: NetworkPlace) -> str:
        return (
            f"map the image on the host first (ceph-common, the kernel's rbd module): rbd map "
            f"{place.rbd_name} --id {place.ceph_user} (udev links {place.rbd_device()}; list it in "
            "/etc/ceph/rbdmap to map it at boot); librbd's [client] cache settings do not apply to "
            "a mapped "
            "image: the host's page cache and QEMU's cache mode do"
        )

    def placeholder_where(self, place: NetworkPlace) -> str:
        return (
            f"monitor {place.host}, image {place.rbd_name}, user {place.ceph_user}, secret "
            f"{place.secret_uuid}"
        )

    def userspace_notes(self, place: NetworkPlace) -> list[str]:
        return [
            f"QEMU reads the monitors from {place.ceph_conf} and client.{place.ceph_user}'s key "
            "from "
            "the keyring it names (libvirt passes the key from its secret instead)"
        ]

    def disk_notes(self, values: Mapping[str, str], more: Mapping[str, str]) -> list[str]:
        return [
            "librbd's cache (rbd cache, its policy, writethrough until flush) is set in "
            "ceph.conf's "
            "[client] section, not on the disk: see the ceph.conf snippet"
        ]

    def qemu_img_target(self, values: Mapping[str, str], place: NetworkPlace, fmt: str) -> str:
        """A qcow2 image on RBD as qemu-img creates it: QEMU's rbd driver creates the RBD image
        itself, with the object size its connection's rbd_default_order gives (a Ceph option in the
        rbd: filename)."""
        order = rbd_order(ceph_value(values, "rbd_object_size"))
        return f"{self.url(place, fmt)}:rbd_default_order={order}"

    def libvirt_pool(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str | None, str]:
        """An rbd pool: its volumes are librbd network disks; an image the kernel maps needs
        none."""
        if self.client_is_kernel(values):
            return None, (
                "none needed: libvirt's rbd pool opens images with librbd; the image "
                "krbd maps is a "
                "block device (the <disk> above)"
            )
        usage = f"client.{place.ceph_user} secret"
        xml = (
            f'<pool type="rbd">\n  <name>{PROXMOX_STORAGE_ID}</name>\n  <source>\n'
            f"    <name>{place.pool}</name>\n"
            f'    <host name="{place.host}" port="{CEPH_MON_PORT}" />\n'
            f'    <auth type="ceph" username="{place.ceph_user}">\n'
            f'      <secret usage="{usage}" />\n    </auth>\n  </source>\n</pool>'
        )
        return xml, (
            f"virsh pool-define FILE; virsh pool-start {PROXMOX_STORAGE_ID}: pool "
            f"{place.pool}'s images "
            "as volumes, opened by QEMU's librbd as measured; <auth> names the libvirt "
            "secret holding "
            f"client.{place.ceph_user}'s cephx key by its usage name ('{usage}': the "
            "<usage type='ceph'> "
            "name in virsh secret-define's XML); librbd's cache is the ceph.conf snippet's"
        )

    def proxmox_storage(
        self, values: Mapping[str, str], place: NetworkPlace
    ) -> tuple[str, str, str]:
        """PVE/Storage/RBDPlugin.pm: krbd 1 maps the image with the kernel's client."""
        sid = PROXMOX_STORAGE_ID
        krbd = int(self.client_is_kernel(values))
        return (
            self.name,
            sid,
            (
                f"rbd: {sid}\n\tpool {place.pool}\n\tmonhost {place.host}\n\tusername "
                f"{place.ceph_user}\n\tcontent images\n\tkrbd {krbd}"
            ),
        )

    def proxmox_placeholder(self, place: NetworkPlace) -> str:
        return f"pool {place.pool}, user {place.ceph_user}"

    def proxmox_notes(self, values: Mapping[str, str], kind: str, place: NetworkPlace) -> list[str]:
        krbd = self.client_is_kernel(values)
        return [
            f"krbd {int(krbd)}: "
            + (
                "the host kernel's rbd client maps each image (/dev/rbdN), as "
                "measured; librbd's [client] cache settings do not apply"
                if krbd
                else "QEMU's own librbd client, as measured; its cache is set in the "
                "[client] section of ceph.conf (see the ceph.conf snippet)"
            ),
            "for a cluster Proxmox does not manage, its key goes in /etc/pve/priv/ceph/"
            f"{PROXMOX_STORAGE_ID}.keyring; STORAGE:SIZE creates a new image vm-VMID-disk-N of "
            "SIZE GiB "
            "(its object size: the rbd create snippet)",
        ]
