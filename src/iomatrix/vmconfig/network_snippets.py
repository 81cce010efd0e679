"""The snippets of a disk served over the network (issues 34, 35, 48), whatever its protocol, for
every tool, with the notes a network disk needs (placeholders, the host's login, mount or map for
the kernel's client, the target's own settings), and the protocol's own snippets beside them, named
by its house (`extra_snippets`, `nova_snippet`, `answer_snippet`: the iSCSI target's tgt
targets.conf in vmconfig/read_iscsi.py, Ceph's [client] lines, `rbd config` and `rbd create` in
vmconfig/read_rbd.py). Where the disk lives, as each tool names it, is in
`iomatrix.vmconfig.network`; the tools' shared structure (drivers, buses, controllers) in
`iomatrix.vmconfig.config` and each tool's module."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from iomatrix.domain import Format
from iomatrix.plugins import load_object
from iomatrix.protocol_registry import network_protocol, protocol
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.place import NetworkPlace
from iomatrix.vmconfig.config import (
    DEFAULT_SIZE_GIB,
    DiskConfig,
    Pairs,
    Snippet,
    SnippetSet,
    _not_available,
    shell_command,
)
from iomatrix.vmconfig.libvirt import libvirt_snippet, virt_install_snippet
from iomatrix.vmconfig.network import NETWORK_SKIPPED_KEYS
from iomatrix.vmconfig.nova import (
    nova_snippet,
)
from iomatrix.vmconfig.proxmox import (
    PROXMOX_IMAGE_FILE_KEYS,
    PROXMOX_SCSIHW,
    _proxmox_device_unavailable,
    _proxmox_options,
    new_drive,
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
    varied: Collection[str] | None = None,
) -> Snippet:
    """The storage.cfg entry of the network storage (iscsidirect, iscsi, nfs, rbd) and the VM's disk
    line on it (`varied`: only those axes set on the drive, proxmox.new_drive)."""
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
    new = new_drive(cfg, opts, varied)
    drive = [
        kv
        for kv in new.options
        if kv[0] not in NETWORK_SKIPPED_KEYS["proxmox"] or not cfg.userspace_client
    ]
    if network.is_volume:
        # the LUN or image is the disk
        drive = [kv for kv in drive if kv[0] not in PROXMOX_IMAGE_FILE_KEYS]
    # a property of the storage (preallocation of new images), written in its entry
    if not network.is_volume:
        entry += "".join(f"\n\t{k} {v}" for k, v in new.storage)
    volume = network.proxmox_volume(kind, sid, place, size_gib)
    cmd = f"qm set {vmid}"
    if cfg.bus in PROXMOX_SCSIHW and new.scsihw:
        cmd += f" --scsihw {PROXMOX_SCSIHW[cfg.bus]}"
    line = shell_command(
        [
            *cmd.split(),
            f"--{new.prefix}0",
            ",".join([volume, *(f"{k}={v}" for k, v in drive)]),
        ]
    )
    text = f"# /etc/pve/storage.cfg (or the same with pvesm add {kind} {sid})\n{entry}\n\n{line}"
    notes = [
        f"replace the placeholder addresses ({place.host}, "
        f"{network.proxmox_placeholder(place)}) with "
        "your storage's"
    ]
    notes += network.proxmox_notes(cfg.values, kind, place)
    notes += [n for n in network_notes(cfg) if "tgt" in n]
    notes += axis_notes
    notes += [new.left_note()] if new.left else []
    return Snippet("proxmox", title, text, "; ".join(notes))


def answer_storage_snippet(s: Snippet, cfg: DiskConfig, varied: Collection[str]) -> Snippet:
    """The storage snippet an answer's first screen shows beside the VM tool's (issue 49: it sets
    what the answer recommends): as the disk's protocol's `answer_snippet` writes it (ceph.conf's
    [client] section with only the options the answer sets), or as it is."""
    network = network_protocol(cfg.protocol)
    if network is None or network.answer_snippet is None:
        return s
    return load_object(network.answer_snippet)(s, cfg, varied)


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


def _proxmox(cfg: DiskConfig, varied: Collection[str] | None = None) -> Snippet:
    opts, axis_notes, unavailable = _proxmox_options(cfg)
    unavailable += _proxmox_device_unavailable(cfg)
    if unavailable:
        return Snippet(
            "proxmox",
            "Proxmox VE (/etc/pve/storage.cfg and qm set)",
            None,
            _not_available(unavailable),
        )
    return proxmox_network_snippet(cfg, opts, axis_notes, varied=varied)


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
                    "above: virt-install --import without this disk, then virsh edit VM to "
                    "put that <disk> in"
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


def network_snippets(
    cfg: DiskConfig, path: str | None = None, varied: Collection[str] | None = None
) -> SnippetSet:
    """Every tool's snippet for a new disk of `cfg` on its network storage (cfg.protocol), tgt's for
    an iSCSI LUN, and ceph.conf's [client] lines and `rbd create` for an RBD image (`varied`: the
    axes the sweep measured, the only ones Proxmox's new drive sets, proxmox.new_drive)."""
    notes = network_notes(cfg)
    return SnippetSet(
        cfg,
        [
            _with_notes(libvirt_snippet(cfg, path), [*notes, *libvirt_auth_note(cfg)]),
            libvirt_pool_snippet(cfg),
            _with_notes(qemu_snippet(cfg, path), notes),
            _proxmox(cfg, varied),
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
