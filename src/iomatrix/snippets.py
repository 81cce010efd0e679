"""Paste-ready configuration for one disk configuration, in every tool's own spelling.

Everything is generated from the axis registry (`iomatrix.domain.axes`): a configuration holds a
value of every axis, each tool's options are the axes' spellings for that tool
(`axes.tool_options`), and the rules between them are the registry's; an axis added to the registry
reaches every snippet with no change here. Each tool's own structure (where an option goes, the
virtio-scsi controller, the eatmydata wrapper, the measured discard/detect-zeroes defaults) is in
that tool's module of `iomatrix.vmconfig`, beside its reader; this module puts a configuration's
snippets together (`snippets_for`) and, with --current, writes the ones that change the disk the
user already has. The QEMU arguments are the very `-blockdev`/`-device` graph the tiers measure
(`iomatrix.qemu_block`), so what is pasted is what was measured."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from iomatrix.domain import (
    BackingKind,
    Format,
    Modifier,
    Preallocation,
    axes,
)
from iomatrix.errors import UserError
from iomatrix.vmconfig.config import (
    CONTINUATION,
    DEFAULT_SIZE_GIB,
    DISCARD_NOTE,
    EATMYDATA_NOTE,
    INDENTED_SNIPPET_WIDTH,
    MEASURED_NOTES,
    SNIPPET_WIDTH,
    DiskConfig,
    Pairs,
    Snippet,
    SnippetSet,
    _not_available,
    _partition,
    controller_options,
    controller_options_of,
    measured_defaults,
    measured_note,
    refusal,
    shell_command,
    shell_word,
    snippet_backing,
)
from iomatrix.vmconfig.keeping import Kept, changed_axes, keep_unmeasured
from iomatrix.vmconfig.libvirt import (
    LIBVIRT_DEVICES_LEVEL,
    LIBVIRT_DOMAIN_LEVEL,
    LIBVIRT_IOTHREAD_ID,
    LIBVIRT_SHARED_SCSI_CONTROLLER,
    LIBVIRT_TARGET_KEYS,
    SINGLE_CONTROLLER_INDEX,
    VIRT_INSTALL_LEADING_KEYS,
    edited_domain,
    libvirt_controller_xml,
    libvirt_disk_element,
    libvirt_disk_xml,
    libvirt_edited_disk,
    libvirt_kept_children,
    libvirt_snippet,
    minimal_domain_xml,
    virt_install_snippet,
    virt_xml_command,
    write_domain,
)
from iomatrix.vmconfig.network_snippets import answer_storage_snippet, network_snippets
from iomatrix.vmconfig.nova import (
    NOVA_CACHE_KEY,
    NOVA_IMAGE_FILE_KEYS,
    NOVA_IMAGE_PROPERTY_PREFIX,
    nova_snippet,
)
from iomatrix.vmconfig.proxmox import (
    PROXMOX_DISK_KEY,
    PROXMOX_FORMAT_NAMES,
    PROXMOX_IMAGE_FILE_KEYS,
    PROXMOX_SCSIHW,
    PROXMOX_STORAGE_KEYS,
    _proxmox_device_unavailable,
    _proxmox_options,
    proxmox_boot_after,
    proxmox_drive_value,
    proxmox_edited_drive,
    proxmox_free_slot,
    proxmox_snippet,
)
from iomatrix.vmconfig.qemu import (
    EATMYDATA_WRAPPER,
    QEMU_BINARY,
    eatmydata_wrapper_snippet,
    qemu_argv,
    qemu_img_snippet,
    qemu_snippet,
)
from iomatrix.vmconfig.reading import CurrentConfig, ExistingDisk

# Re-exported: callers import every snippet writer from here.
__all__ = [
    "CONTINUATION",
    "DEFAULT_SIZE_GIB",
    "DISCARD_NOTE",
    "EATMYDATA_NOTE",
    "EATMYDATA_WRAPPER",
    "EXISTING_TOOLS",
    "LIBVIRT_DEVICES_LEVEL",
    "LIBVIRT_DOMAIN_LEVEL",
    "LIBVIRT_IOTHREAD_ID",
    "LIBVIRT_SHARED_SCSI_CONTROLLER",
    "LIBVIRT_TARGET_KEYS",
    "MEASURED_NOTES",
    "NOVA_CACHE_KEY",
    "NOVA_IMAGE_FILE_KEYS",
    "NOVA_IMAGE_PROPERTY_PREFIX",
    "PROXMOX_DISK_KEY",
    "PROXMOX_FORMAT_NAMES",
    "PROXMOX_IMAGE_FILE_KEYS",
    "PROXMOX_SCSIHW",
    "PROXMOX_STORAGE_KEYS",
    "QEMU_BINARY",
    "SINGLE_CONTROLLER_INDEX",
    "SNIPPET_WIDTH",
    "VIRT_INSTALL_LEADING_KEYS",
    "DiskConfig",
    "Pairs",
    "Snippet",
    "SnippetSet",
    "answer_storage_snippet",
    "controller_options",
    "controller_options_of",
    "eatmydata_wrapper_snippet",
    "edited_domain",
    "libvirt_controller_xml",
    "libvirt_disk_element",
    "libvirt_disk_xml",
    "libvirt_snippet",
    "measured_defaults",
    "measured_note",
    "minimal_domain_xml",
    "nova_snippet",
    "proxmox_drive_value",
    "proxmox_snippet",
    "qemu_argv",
    "qemu_img_snippet",
    "qemu_snippet",
    "refusal",
    "shell_command",
    "shell_word",
    "snippet_backing",
    "snippets_for",
    "virt_install_snippet",
    "write_domain",
]

# --------------------------------------------------------------------------- a disk the user
# already has With --current naming the user's disk (libvirt XML, a QEMU command line, Proxmox's qm
# config), the answers change that disk instead of creating a new, empty one: its image is converted
# into a new file beside it where the image itself changes (format, preallocation, creation
# options), the old one kept until the user deletes it; Proxmox sets the options on the existing
# volume and moves it (qm disk move) where the format changes.

EXISTING_TOOLS = ("libvirt", "qemu", "proxmox")
SHUT_DOWN = "shut the VM down first"


def _with_current_discard(cfg: DiskConfig, current: CurrentConfig) -> DiskConfig:
    """`cfg` with the current disk's discard policy where the recommendation leaves discard at
    QEMU's default (it was not measured otherwise): a guest that trims its thin image keeps doing
    so."""
    axis = axes.get("discard")
    mine, theirs = (
        cfg.values.get(axis.name, axis.default),
        current.axes.get(axis.name, axis.default),
    )
    if mine != axis.default or theirs == axis.default:
        return cfg
    try:
        return DiskConfig(
            values={**cfg.values, axis.name: theirs}, backing=cfg.backing, assumed=cfg.assumed
        )
    except UserError:  # a combination the registry refuses: the recommendation as measured
        return cfg


def _image_options(cfg: DiskConfig, preallocation: bool = True) -> list[str]:
    """qemu-img -o options of the recommended image (what only creating an image sets);
    `preallocation`: False where the sweep did not vary it (the user's own is not known from a VM's
    configuration: it is left alone)."""
    opts = (
        [f"preallocation={cfg.preallocation}"]
        if preallocation and cfg.preallocation != Preallocation.OFF
        else []
    )
    return opts + [f"{k}={v}" for k, v in axes.qemu_options(cfg.axis_values()).create]


def _new_image_path(old: str, fmt: str, block: bool) -> str:
    """Where the converted image goes: beside the old one, named by its format (vm.qcow2 → vm.raw),
    or with '-new' where that is the old name; a block device's copy goes to a new volume of that
    name."""
    if block:
        return f"{old}-new"
    p = Path(old)
    known = {f".{f.value}" for f in Format} | {".img"}
    stem = p.stem if p.suffix in known else p.name
    new = p.with_name(f"{stem}.{fmt}")
    return str(new if str(new) != old else p.with_name(f"{stem}-new.{fmt}"))


def _convert_snippet(
    cfg: DiskConfig, current: CurrentConfig, old: str, block: bool, preallocation: bool = True
) -> tuple[Snippet, str]:
    """(the qemu-img snippet for the user's image `old`, the path the VM runs from afterwards)."""
    title = "qemu-img convert (your image, copied into the recommended format; the old one kept)"
    cur_format = current.axes.get("format")
    opts = _image_options(cfg, preallocation)
    if cur_format == cfg.format and not opts:
        return Snippet(
            "qemu-img",
            "qemu-img (nothing to convert)",
            None,
            f"none needed: your image {old} stays as it is (same format, no creation "
            "option to change); "
            "only the options below change, the data is untouched",
        ), old
    new = _new_image_path(old, cfg.format.value, block)
    argv = [
        "qemu-img",
        "convert",
        "-p",
        *(["-f", cur_format] if cur_format else []),
        "-O",
        cfg.format.value,
    ]
    if block:
        argv.append("-n")  # into the existing new volume (created first), not a file
    if opts:
        argv += ["-o", ",".join(opts)]
    argv += [old, new]
    changes = ", ".join(
        filter(
            None,
            (
                f"format {cur_format or '(as detected)'} → {cfg.format}"
                if cur_format != cfg.format
                else "",
                *opts,
            ),
        )
    )
    note = (
        f"{SHUT_DOWN}: copies the data of {old} into a new image {new} ({changes}) and "
        f"leaves {old} as it is; "
        f"the VM runs from {new} once the configuration below points at it; delete {old} "
        "yourself when the VM "
        "runs well from the new one (it needs room for a second copy)"
    )
    if block:
        note += (
            f"; create the volume {new} first, as large as the old one (e.g. lvcreate), -n "
            "writes into it"
        )
    return Snippet("qemu-img", title, shell_command(argv, INDENTED_SNIPPET_WIDTH), note), new


def _existing_note(what: str, image: str, converted: bool) -> str:
    if converted:
        return (
            f"{what}: points the VM at the converted image {image} (the qemu-img convert "
            "line); the old image "
            "is kept"
        )
    return (
        f"{what}: keeps your image {image} as it is; only its options change, the data is untouched"
    )


def _proxmox_existing_snippet(
    cfg: DiskConfig, current: CurrentConfig, changed: dict[str, str]
) -> Snippet:
    """qm set on the drive the VM already has, changing only the options of the `changed` axes (its
    own drive line otherwise, so what was not measured stays); in the same slot unless the bus
    changes, then the boot order follows; qm disk move where the format changes."""
    disk = current.disk
    assert disk is not None
    title = "Proxmox VE (qm set on your existing volume)"
    opts, _, unavailable = _proxmox_options(cfg)
    unavailable += _proxmox_device_unavailable(cfg)
    if unavailable:
        return Snippet("proxmox", title, None, _not_available(unavailable))
    vmid, volume, old_key = disk.vmid or "VMID", disk.volume or "VOLUME", disk.device or "virtio0"
    prefix = dict(opts)[PROXMOX_DISK_KEY]
    m = re.match(r"^([a-z]+)(\d+)$", old_key)
    key = old_key if m and m.group(1) == prefix else proxmox_free_slot(prefix, disk.slots)
    notes = [
        f"sets the options on your existing volume {volume}; the data is untouched (the "
        "options take effect at "
        "the VM's next start)"
    ]
    # stored before the drive line was kept: its other options are not known here
    if disk.settings is None:
        notes.append(
            "qm set replaces the whole drive line: add your drive's other options (size, serial, …)"
        )
    cmd = f"qm set {vmid}"
    if cfg.bus in PROXMOX_SCSIHW and "bus" in changed:
        cmd += f" --scsihw {PROXMOX_SCSIHW[cfg.bus]}"
    drive = proxmox_edited_drive(disk.settings or volume, changed)
    if key != old_key:
        lines, moved = _proxmox_slot_moved(disk, vmid, key, [*cmd.split(), f"--{key}", drive])
        notes += moved
    elif drive != disk.settings:
        lines = [shell_command([*cmd.split(), f"--{key}", drive], INDENTED_SNIPPET_WIDTH)]
    else:
        lines = []
        notes.append(f"{old_key}'s own options stay as they are")
    if current.axes.get("format") != cfg.format and not disk.block:
        lines.append(_proxmox_disk_move(cfg, vmid, key, volume, notes))
    notes += _proxmox_existing_notes(cfg, changed, opts)
    # Nothing to run (every axis that differs was kept): the note says so instead of an empty
    # command.
    return Snippet("proxmox", title, "\n".join(lines) or None, "; ".join(notes))


def _proxmox_disk_move(cfg: DiskConfig, vmid: str, key: str, volume: str, notes: list[str]) -> str:
    """The qm disk move line that converts the volume to the answer's format (its note added to
    `notes`)."""
    storage = volume.split(":", 1)[0] if ":" in volume else "STORAGE"
    notes.append(
        f"{SHUT_DOWN}: qm disk move copies the data into a new {cfg.format} volume on "
        f"{storage} and "
        f"points {key} at it, with the options set above; the old volume stays as "
        "unused0 until you "
        "remove it (or add --delete 1)"
    )
    return f"qm disk move {vmid} {key} {storage} --format {PROXMOX_FORMAT_NAMES[cfg.format]}"


def _proxmox_existing_notes(
    cfg: DiskConfig, changed: dict[str, str], opts: list[tuple[str, str]]
) -> list[str]:
    """What is said of the values written on an existing drive (not of those kept)."""
    notes = []
    if changed.get("detect_zeroes") == "off":
        notes.append(
            "detect_zeroes=0 because Proxmox turns QEMU's zero detection on by default "
            "and iomatrix "
            "measured it off"
        )
    notes += axes.tool_options(changed, "proxmox")[1]
    if on_storage := _partition(opts, PROXMOX_STORAGE_KEYS.__contains__)[0]:
        notes.append(
            f"{', '.join(f'{k}={v}' for k, v in on_storage)} is a property of the "
            "storage (pvesm set "
            "STORAGE), for volumes created or moved after it; it does not change an "
            "existing volume"
        )
    return notes


def _proxmox_slot_moved(
    disk: ExistingDisk, vmid: str, key: str, attach: list[str]
) -> tuple[list[str], list[str]]:
    """(the qm commands that move the user's drive to slot `key` of another bus (`attach`: the qm
    set that attaches it there), with the boot order following; notes)."""
    old_key = disk.device or "virtio0"
    lines = [f"qm set {vmid} --delete {old_key}", shell_command(attach, INDENTED_SNIPPET_WIDTH)]
    notes = [
        f"the bus changes (measured): {old_key} is detached (its volume becomes unused, "
        "not deleted) and "
        f"attached as {key}; check the guest's fstab uses UUIDs (device names change)"
    ]
    boot = proxmox_boot_after(disk.boot, old_key, key)
    if boot is not None:
        lines.append(shell_command(["qm", "set", vmid, "--boot", boot], INDENTED_SNIPPET_WIDTH))
    else:
        notes.append(
            f"your boot order does not name {old_key}: set it if the VM boots from it "
            f"(qm set {vmid} --boot order={key})"
        )
    return lines, notes


def _existing_disk_snippets(
    cfg: DiskConfig, current: CurrentConfig, varied: Collection[str] | None
) -> SnippetSet:
    """The snippets that change the user's disk to `cfg`: with `varied` (the axes the sweep varied
    for the answer), only those change and the rest stay as the user has them (keeping.py); None:
    every axis of `cfg`."""
    disk = current.disk
    assert disk is not None
    backing = BackingKind.BLOCK if disk.block else BackingKind.FILE
    if backing != cfg.backing:
        cfg = DiskConfig(values=cfg.values, backing=backing, assumed=cfg.assumed)
    kept = (
        Kept(_with_current_discard(cfg, current))
        if varied is None
        else keep_unmeasured(cfg, current.axes, varied)
    )
    cfg = kept.config
    changed = changed_axes(cfg, current.axes)
    out: list[Snippet] = []
    img, path = None, None
    if disk.path is not None:
        img, path = _convert_snippet(
            cfg,
            current,
            disk.path,
            disk.block,
            preallocation=varied is None or "preallocation" in varied,
        )
        out += _libvirt_and_qemu_existing(cfg, disk, changed, path)
    out.append(
        _proxmox_existing_snippet(cfg, current, changed)
        if disk.tool == "proxmox"
        else proxmox_snippet(cfg, varied=varied)
    )
    out += [virt_install_snippet(cfg, path), nova_snippet(cfg)]
    # The data step first: every configuration after it points at the copy it makes.
    return SnippetSet(cfg, out if img is None else [img, *out], kept=kept.line())


def _libvirt_and_qemu_existing(
    cfg: DiskConfig, disk: ExistingDisk, changed: dict[str, str], path: str
) -> list[Snippet]:
    """The libvirt snippets (the user's own <disk> edited, and the virt-xml line making the same
    edit, where the bus stays; else a <disk> for the new bus keeping its boot order) and the QEMU
    options, for the image at `path`."""
    converted = path != disk.path
    if disk.tool == "libvirt" and disk.settings and "bus" not in changed:
        edited, notes = libvirt_edited_disk(
            disk.settings, changed, cfg.bus, path if converted else None, disk.block
        )
        lv = Snippet(
            "libvirt",
            f"libvirt domain XML (virsh edit {disk.vmid or 'VM'}: replace your <disk> "
            f"{disk.device})",
            edited,
            "; ".join(
                [
                    _existing_note("your own <disk>, edited", path, converted)
                    + "; its target, address, boot order and the rest stay as they are",
                    *notes,
                ]
            ),
            "xml",
        )
        command, vx_notes = virt_xml_command(
            disk.vmid or "VM", disk.device or "vda", changed, cfg.bus, path if converted else None
        )
        vx = [
            Snippet(
                "virt-xml",
                f"virt-xml (edits your <disk> {disk.device} in place; the edited XML: --detail)",
                command,
                "; ".join([f"{SHUT_DOWN}: the change applies at its next start", *vx_notes]),
            )
        ]
    else:
        same_bus = "bus" not in changed
        lv = libvirt_snippet(
            cfg,
            path,
            disk.device if same_bus and disk.tool == "libvirt" else None,
            keep_children=libvirt_kept_children(disk.settings) if disk.tool == "libvirt" else (),
        )
        lv = replace(lv, note=f"{_existing_note('virsh edit VM', path, converted)}; {lv.note}")
        vx = []
    qemu = qemu_snippet(cfg, path)
    return [
        lv,
        *vx,
        *([eatmydata_wrapper_snippet()] if cfg.modifier == Modifier.EATMYDATA else []),
        replace(
            qemu,
            note=f"{_existing_note('replaces your disk options', path, converted)}; {qemu.note}",
        ),
    ]


def snippets_for(
    cfg: DiskConfig,
    path: str | None = None,
    current: CurrentConfig | None = None,
    varied: Collection[str] | None = None,
) -> SnippetSet:
    """Every tool's snippet for `cfg`: for a new disk at `path` (a default path when None), or,
    where `current` names the user's existing disk (--current), changing that disk with its data
    kept: with `varied` (the axes the sweep varied for this answer) only those, the others as the
    user has them. A new disk's Proxmox drive (qm set VMID --scsi0 STORAGE:SIZE) sets only `varied`
    too, the rest left at Proxmox's defaults (proxmox.new_drive, issue 70); None: every axis."""
    # a disk served over the network: its storage is configured with it
    if cfg.protocol is not None:
        return network_snippets(cfg, path, varied)
    if (
        current is not None
        and current.disk is not None
        and current.disk.tool in EXISTING_TOOLS
        and not current.disk.network
    ):
        return _existing_disk_snippets(cfg, current, varied)
    return SnippetSet(
        cfg,
        [
            libvirt_snippet(cfg, path),
            *([eatmydata_wrapper_snippet()] if cfg.modifier == Modifier.EATMYDATA else []),
            qemu_snippet(cfg, path),
            proxmox_snippet(cfg, varied=varied),
            virt_install_snippet(cfg, path),
            nova_snippet(cfg),
            qemu_img_snippet(cfg, path),
        ],
    )
