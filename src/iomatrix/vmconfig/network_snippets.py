"""The snippets of a disk served over the network (issues 34, 35): an iSCSI LUN, an image on NFS or
a Ceph RBD image, for every tool, with the notes a network disk needs (placeholders, the host's
login, mount or map for the kernel's client, the target's own settings), the iSCSI target's tgt
targets.conf, and for RBD the [client] lines of ceph.conf (librbd's cache) and the image's `rbd
create` (its object size). Where the disk lives, as each tool names it, is in
`iomatrix.vmconfig.network`; the tools' shared structure (drivers, buses, controllers) in
`iomatrix.vmconfig.config` and each tool's module."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from iomatrix.domain import Format, axes
from iomatrix.plugins import load_object
from iomatrix.protocols import protocol, rbd
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.place import NetworkPlace
from iomatrix.vmconfig.ceph_conf import (
    RBD_IMAGE_CONFIG_NOTE,
    ceph_client_conf,
    ceph_client_notes,
    ceph_client_recommended,
    ceph_client_summary,
    rbd_create,
    rbd_create_note,
    rbd_image_config,
)
from iomatrix.vmconfig.config import (
    DEFAULT_SIZE_GIB,
    DiskConfig,
    Pairs,
    Snippet,
    SnippetSet,
    _not_available,
    measured_defaults,
    shell_command,
)
from iomatrix.vmconfig.iscsi_target import tgt_note, tgt_targets_conf
from iomatrix.vmconfig.libvirt import libvirt_snippet, virt_install_snippet
from iomatrix.vmconfig.network import NETWORK_SKIPPED_KEYS
from iomatrix.vmconfig.nova import (
    NOVA_CACHE_KEY,
    NOVA_IMAGE_FILE_KEYS,
    NOVA_IMAGE_PROPERTY_PREFIX,
    nova_snippet,
)
from iomatrix.vmconfig.proxmox import (
    PROXMOX_DISK_KEY,
    PROXMOX_IMAGE_FILE_KEYS,
    PROXMOX_SCSIHW,
    PROXMOX_STORAGE_KEYS,
    _proxmox_device_unavailable,
    _proxmox_drive_options,
    _proxmox_options,
)
from iomatrix.vmconfig.qemu import qemu_img_snippet, qemu_snippet


def network_notes(cfg: DiskConfig) -> list[str]:
    """What a network disk's VM snippet leaves to the user: the server's address (placeholders), the
    host's login or mount where the kernel is the client, and where the disk's own settings go."""
    if cfg.protocol is None:
        return []
    network = protocol(cfg.protocol)
    place = NetworkPlace()
    notes = [f"replace the placeholder {network.placeholder_where(place)} with your storage's"]
    if network.client_is_kernel(cfg.values):
        notes.append(network.kernel_client_steps(place))
    else:
        notes.append(
            f"QEMU opens the disk with its own {network.userspace_library} client (Debian package "
            "qemu-block-extra); aio= is an option of QEMU's file protocol and is not set"
        )
        notes += network.userspace_notes(place)
    return notes + network.disk_notes(cfg.values, cfg.more)


def libvirt_auth_note(cfg: DiskConfig) -> list[str]:
    """What libvirt's <auth> of an RBD disk needs: the secret holding the cephx key."""
    if cfg.protocol is None or not cfg.userspace_client:
        return []
    place = NetworkPlace()
    if protocol(cfg.protocol).libvirt_auth(place) is None:
        return []
    return [
        f"<auth>'s secret holds client.{place.ceph_user}'s cephx key: virsh "
        "secret-define a secret of "
        f"usage type ceph with uuid {place.secret_uuid}, then virsh secret-set-value it "
        "to `ceph auth "
        f"get-key client.{place.ceph_user}`"
    ]


def proxmox_network_snippet(
    cfg: DiskConfig,
    opts: Pairs,
    axis_notes: list[str],
    vmid: str = "VMID",
    size_gib: int = DEFAULT_SIZE_GIB,
) -> Snippet:
    """The storage.cfg entry of the network storage (iscsidirect, iscsi, nfs, rbd) and the VM's disk
    line on it."""
    assert cfg.protocol is not None
    network = protocol(cfg.protocol)
    title = "Proxmox VE (/etc/pve/storage.cfg and qm set)"
    place = NetworkPlace()
    if (why := network.proxmox_unavailable()) is not None:
        return Snippet("proxmox", title, None, _not_available([why]))
    kind, sid, entry = network.proxmox_storage(cfg.values, place)
    if network.proxmox_raw_only is not None and cfg.format != Format.RAW:
        return Snippet(
            "proxmox", title, None, _not_available([network.proxmox_raw_only.format(kind=kind)])
        )
    drive = [
        kv
        for kv in _proxmox_drive_options(opts)
        if kv[0] not in NETWORK_SKIPPED_KEYS["proxmox"] or not cfg.userspace_client
    ]
    if network.is_volume:
        # the LUN or image is the disk
        drive = [kv for kv in drive if kv[0] not in PROXMOX_IMAGE_FILE_KEYS]
    drive += measured_defaults("proxmox", dict(drive))
    # a property of the storage (preallocation of new images), written in its entry
    if not network.is_volume:
        entry += "".join(f"\n\t{k} {v}" for k, v in opts if k in PROXMOX_STORAGE_KEYS)
    volume = network.proxmox_volume(kind, sid, place, size_gib)
    cmd = f"qm set {vmid}"
    if cfg.bus in PROXMOX_SCSIHW:
        cmd += f" --scsihw {PROXMOX_SCSIHW[cfg.bus]}"
    line = shell_command(
        [
            *cmd.split(),
            f"--{dict(opts)[PROXMOX_DISK_KEY]}0",
            ",".join([volume, *(f"{k}={v}" for k, v in drive)]),
        ]
    )
    text = f"# /etc/pve/storage.cfg (or pvesm add {kind} {sid} …)\n{entry}\n\n{line}"
    notes = [
        f"replace the placeholder addresses ({place.host}, "
        f"{network.proxmox_placeholder(place)}) with "
        "your storage's"
    ]
    notes += network.proxmox_notes(cfg.values, kind, place)
    notes += [n for n in network_notes(cfg) if "tgt" in n]
    notes += axis_notes
    return Snippet("proxmox", title, text, "; ".join(notes))


def ceph_conf_snippet(cfg: DiskConfig) -> Snippet:
    """ceph.conf's [client] lines for librbd's cache as measured (rbd_cache, its policy,
    writethrough until flush); none for an image the kernel maps (krbd has no librbd cache: the rbd
    axes' rule keeps them at Ceph's defaults)."""
    title = "ceph.conf [client] (librbd's cache, on each client host)"
    if not cfg.userspace_client:
        return Snippet(
            "ceph",
            title,
            None,
            "none needed: krbd (the kernel's client) has no librbd cache; the host's "
            "page cache serves the mapped image as QEMU's cache mode says",
            "ini",
        )
    return Snippet(
        "ceph",
        title,
        ceph_client_conf(cfg.values),
        "; ".join(ceph_client_notes(cfg.values)),
        "ini",
        summary=f"ceph.conf [client]: {ceph_client_summary(cfg.values)}",
    )


def answer_storage_snippet(s: Snippet, cfg: DiskConfig, varied: Collection[str]) -> Snippet:
    """The storage snippet an answer's first screen shows beside the VM tool's (issue 49: it sets
    what the answer recommends): ceph.conf's [client] section with only the options the answer sets
    (ceph_client_recommended; the whole section in --detail), no text when it sets none; any other
    storage snippet as it is."""
    if s.tool != "ceph" or not cfg.userspace_client:
        return s
    text = ceph_client_recommended(cfg.values, varied)
    if text is None:
        return replace(
            s,
            text=None,
            summary="ceph.conf [client]: nothing to set, the answer is Ceph's defaults",
        )
    return replace(
        s,
        title="ceph.conf [client] (what the answer sets, on each client host)",
        text=text,
        summary="ceph.conf [client]: " + ", ".join(text.splitlines()[1:]),
    )


def rbd_config_snippet(cfg: DiskConfig) -> Snippet:
    """The same librbd cache settings for the one image (`rbd config image set`); none for an image
    the kernel maps."""
    title = "rbd config image set (librbd's cache settings for this image only)"
    if not cfg.userspace_client:
        return Snippet(
            rbd.RBD_TOOL, title, None, "none needed: krbd (the kernel's client) has no librbd cache"
        )
    place = NetworkPlace()
    return Snippet(
        rbd.RBD_TOOL,
        title,
        rbd_image_config(cfg.values, place),
        RBD_IMAGE_CONFIG_NOTE.format(user=place.ceph_user),
    )


def rbd_create_snippet(cfg: DiskConfig, size_gib: int = DEFAULT_SIZE_GIB) -> Snippet:
    """The RBD image with the object size it was measured on (rbd_object_size): set when it is
    created. A qcow2 image on RBD that QEMU opens with librbd is created by qemu-img instead (its
    snippet gives the object size); one the kernel maps is an RBD image first, whatever is written
    on it."""
    title = "rbd create (the image, with its object size)"
    if cfg.format != Format.RAW and cfg.userspace_client:
        return Snippet(
            rbd.RBD_TOOL,
            title,
            None,
            "none needed: qemu-img create makes the RBD image of a qcow2 disk itself, its object "
            "size set by rbd_default_order in the rbd: filename; " + rbd_create_note(cfg.values),
        )
    return Snippet(
        rbd.RBD_TOOL,
        title,
        rbd_create(cfg.values, NetworkPlace(), size_gib),
        rbd_create_note(cfg.values),
    )


def tgt_snippet(cfg: DiskConfig) -> Snippet:
    """tgt's targets.conf for the LUN the configuration was measured on (lun_type,
    lun_write_cache)."""
    return Snippet(
        "tgt",
        "tgt targets.conf (the iSCSI target's LUN: type and write cache)",
        tgt_targets_conf(cfg.values, NetworkPlace()),
        tgt_note(cfg.values),
        "conf",
        summary=load_object("iomatrix.vmconfig.iscsi_target:lun_summary")(cfg.values),
    )


def libvirt_pool_snippet(cfg: DiskConfig) -> Snippet:
    """The libvirt storage pool the disk's storage is (iscsi-direct or iscsi, netfs, rbd), from its
    protocol."""
    assert cfg.protocol is not None
    xml, note = protocol(cfg.protocol).libvirt_pool(cfg.values, NetworkPlace())
    return Snippet("libvirt", "libvirt storage pool (the storage the disk is on)", xml, note, "xml")


def _with_notes(snippet: Snippet, notes: list[str]) -> Snippet:
    if snippet.text is None:
        return snippet
    return replace(snippet, note="; ".join(filter(None, (snippet.note, *notes))))


def _proxmox(cfg: DiskConfig) -> Snippet:
    opts, axis_notes, unavailable = _proxmox_options(cfg)
    unavailable += _proxmox_device_unavailable(cfg)
    if unavailable:
        return Snippet(
            "proxmox",
            "Proxmox VE (/etc/pve/storage.cfg and qm set)",
            None,
            _not_available(unavailable),
        )
    return proxmox_network_snippet(cfg, opts, axis_notes)


def _virt_install(cfg: DiskConfig, path: str | None) -> Snippet:
    if cfg.userspace_client:
        assert cfg.protocol is not None
        return Snippet(
            "virt-install",
            "virt-install --disk",
            None,
            _not_available(
                [
                    f"{protocol(cfg.protocol).named} network disk (QEMU's own client) is "
                    "written as the libvirt XML "
                    "above: virt-install … --import, then virsh edit VM to put that <disk> in"
                ]
            ),
        )
    return _with_notes(virt_install_snippet(cfg, path), network_notes(cfg))


def _nova(cfg: DiskConfig) -> Snippet:
    assert cfg.protocol is not None
    base = nova_snippet(cfg)
    network = protocol(cfg.protocol)
    if network.nova_snippet is not None:
        return load_object(network.nova_snippet)(cfg, base.title)
    return Snippet(
        "nova", base.title, None, _not_available([network.nova_unavailable()]), base.language
    )


def nova_rbd_snippet(cfg: DiskConfig, title: str) -> Snippet:
    """Nova's rbd image backend: every instance disk of the compute node an RBD image, opened by
    librbd as a libvirt network disk (nova.conf [libvirt] images_type = rbd and its pool, conf, user
    and secret; the cache mode of network disks in disk_cachemodes)."""
    unavailable = []
    if not cfg.userspace_client:
        unavailable.append(
            "Nova opens instance disks on Ceph with librbd (libvirt network disks); it "
            "has no krbd mode"
        )
    if cfg.format != Format.RAW:
        unavailable.append(
            "Nova's rbd image backend keeps raw images (a qcow2 Glance image is converted to raw)"
        )
    opts, notes, refused = axes.tool_options(
        cfg.axis_values(), "nova", skip_keys=NOVA_IMAGE_FILE_KEYS
    )
    if unavailable or refused:
        return Snippet("nova", title, None, _not_available([*unavailable, *refused]), "ini")
    place = NetworkPlace()
    props = [kv for kv in opts if kv[0].startswith(NOVA_IMAGE_PROPERTY_PREFIX)]
    conf = sorted((kv for kv in opts if kv not in props), key=lambda kv: kv[0] != NOVA_CACHE_KEY)
    own = protocol(cfg.protocol).nova_conf(place) if cfg.protocol is not None else []
    lines = [
        "[libvirt]",
        *(f"{k} = network={v}" if k == NOVA_CACHE_KEY else f"{k} = {v}" for k, v in conf),
        *(f"{k} = {v}" for k, v in own),
    ]
    if props:
        lines.append(
            "# image property: openstack image set "
            + "".join(f"--property {k}={v} " for k, v in props)
            + "IMAGE"
        )
    notes += [
        "images_type = rbd puts every instance disk of the compute node in pool "
        f"{place.pool} (volumes are "
        "Cinder's RBD driver's); rbd_secret_uuid names the libvirt secret holding the "
        "cephx key, defined on "
        "each compute node as for the libvirt snippet; librbd's cache is the ceph.conf "
        "snippet's; images Nova "
        "creates take [client] rbd default order for their object size"
    ]
    return Snippet("nova", title, "\n".join(lines), "; ".join(notes), "ini")


def network_snippets(cfg: DiskConfig, path: str | None = None) -> SnippetSet:
    """Every tool's snippet for a new disk of `cfg` on its network storage (cfg.protocol), tgt's for
    an iSCSI LUN, and ceph.conf's [client] lines and `rbd create` for an RBD image."""
    notes = network_notes(cfg)
    return SnippetSet(
        cfg,
        [
            _with_notes(libvirt_snippet(cfg, path), [*notes, *libvirt_auth_note(cfg)]),
            libvirt_pool_snippet(cfg),
            _with_notes(qemu_snippet(cfg, path), notes),
            _proxmox(cfg),
            _virt_install(cfg, path),
            _nova(cfg),
            qemu_img_snippet(cfg, path),
            *_extra_snippets(protocol(cfg.protocol), cfg),
        ],
    )


def _extra_snippets(network: NetworkProtocol, cfg: DiskConfig) -> list[Snippet]:
    """The protocol's own snippets beside every tool's (tgt's targets.conf, ceph.conf's [client]
    lines)."""
    return [load_object(reference)(cfg) for reference in network.extra_snippets]
