"""QEMU: the disk's snippet writer (``-blockdev``/``-device`` from the one QEMU disk builder,
    `iomatrix.qemu_block`, the
eatmydata wrapper, ``qemu-img create``) and the ``--current`` reader of QEMU options: a ``-drive``
or ``-blockdev`` string with its ``-device`` (and controller).

Writer and reader round-trip in tests/test_snippet_round_trips.py.
"""

from __future__ import annotations

import itertools
import json
import shlex
from typing import Any

from iomatrix.backing.spec import parse_size
from iomatrix.domain import (
    BackingKind,
    Bus,
    Format,
    Modifier,
    Preallocation,
    axes,
)
from iomatrix.domain.axes import (
    QUEUES_AUTO,
    VIRTIO_PROBED_DEVICE,
    VQ_MAPPING_SINCE,
    IOThread,
)
from iomatrix.errors import UserError
from iomatrix.protocol_registry import network_protocol, protocol
from iomatrix.protocols.place import NetworkPlace
from iomatrix.qemu_block import DiskSpec, blockdev_args, device_args
from iomatrix.vmconfig.config import (
    CONTINUATION,
    DEFAULT_SIZE_GIB,
    EATMYDATA_WRAPPER,
    QEMU_BINARY,
    DiskConfig,
    Snippet,
    measured_defaults,
    measured_note,
    shell_command,
    shell_word,
)
from iomatrix.vmconfig.network import (
    NetworkDiskRead,
    note_client_cache,
    read_qemu_node,
)
from iomatrix.vmconfig.reading import (
    FORMS,
    QEMU_DEFAULT_AIO,
    QEMU_DEFAULT_CACHE,
    CurrentConfig,
    ExistingDisk,
    _bad,
    _onoff,
    _read_back,
    _set_l2_cache,
    _split_opts,
    _value,
    cache_from_switches,
)


def _disk_spec(cfg: DiskConfig, path: str | None) -> DiskSpec:
    return DiskSpec.for_cell(cfg.axis_values(), path or cfg.default_path())


def qemu_argv(cfg: DiskConfig, path: str | None = None, node: str = "disk0") -> list[str]:
    """The -blockdev/-device arguments the guest tier measured, for `path`."""
    spec = _disk_spec(cfg, path)
    blockdev = blockdev_args(spec, node=node)
    if cfg.protocol is not None:
        blockdev = [_network_blockdev(cfg, a) if a.startswith("driver=") else a for a in blockdev]
    if cfg.backing == BackingKind.BLOCK:
        # blockdev_args picks the protocol from the path it sees; a snippet's path need not exist
        # here.
        blockdev = [a.replace("file.driver=file,", "file.driver=host_device,") for a in blockdev]
    # QEMU's default error policy (pause the VM on ENOSPC, e.g. a full thin pool) is kept for the
    # user's VM: iomatrix reports errors only so that a measurement fails with a reason instead of
    # hanging.
    return [*blockdev, *device_args(spec, node=node, serial="disk0", report_errors=False)]


def _network_blockdev(cfg: DiskConfig, arg: str) -> str:
    """A -blockdev value with its protocol node (file.driver=file,file.filename=…) replaced by the
    network disk's: QEMU's own driver, or the device/file the kernel's client gives
    (NetworkProtocol.qemu_node)."""
    assert cfg.protocol is not None
    proto = protocol(cfg.protocol).qemu_node(cfg.values, cfg.format.value, NetworkPlace())
    dropped = ("file.driver=", "file.filename=", *(("file.aio=",) if cfg.userspace_client else ()))
    parts = arg.split(",")
    at = next(i for i, p in enumerate(parts) if p.startswith("file.driver="))
    kept = [p for p in parts if not p.startswith(dropped)]
    return ",".join([*kept[:at], *(f"file.{k}={v}" for k, v in proto), *kept[at:]])


def qemu_snippet(cfg: DiskConfig, path: str | None = None) -> Snippet:
    argv = qemu_argv(cfg, path)
    pairs = [shell_word(f"{argv[i]} ", argv[i + 1]) for i in range(0, len(argv), 2)]
    note = "append to your qemu-system-x86_64 command line"
    if cfg.more.get("queues", QUEUES_AUTO) != QUEUES_AUTO:
        note += f" (with -smp {cfg.more['queues']} or more: the guest uses a queue per vCPU)"
    if cfg.more.get("iothread") == IOThread.VQ_MAPPING:
        device = VIRTIO_PROBED_DEVICE.get(cfg.bus, "")
        note += (
            f"; iothread-vq-mapping needs QEMU ≥ {VQ_MAPPING_SINCE.get(device, '9.0')} "
            "and QEMU's JSON -device "
            "syntax (its value is a list)"
        )
    if cfg.modifier == Modifier.EATMYDATA:
        note += (
            " and start QEMU as 'eatmydata qemu-system-x86_64 …' (an LD_PRELOAD wrapper of "
            "the whole process)"
        )
    # An axis that sets discard or detect-zeroes on the graph takes that default's place.
    qopts = _disk_spec(cfg, path).qemu_options()
    spelled = {
        k.replace("-", "_"): v
        for k, v in (*qopts.format_node, *qopts.file_node, *qopts.file_protocol)
    }
    return Snippet(
        "qemu",
        "QEMU command line (-blockdev/-device, the graph iomatrix measured)",
        CONTINUATION.join(pairs),
        "; ".join(filter(None, (note, measured_note(measured_defaults("qemu", spelled))))),
    )


def eatmydata_wrapper_snippet() -> Snippet:
    """The script libvirt's <emulator> (or any tool that takes an emulator path) runs instead of
    QEMU."""
    script = (
        f"cat > {EATMYDATA_WRAPPER} <<'EOF'\n#!/bin/sh\n"
        "# QEMU under eatmydata: its fsync/fdatasync return at once, so nothing is "
        "durable until the host\n"
        "# writes it back on its own (power loss or a host crash loses acknowledged guest writes)\n"
        f'exec eatmydata {QEMU_BINARY} "$@"\nEOF\nchmod 755 {EATMYDATA_WRAPPER}'
    )
    return Snippet(
        "qemu-wrapper",
        "QEMU wrapper for eatmydata (what libvirt's <emulator> points at)",
        script,
        "needs the eatmydata package; under AppArmor or SELinux the VM's confinement "
        "must allow libvirt "
        "to execute the wrapper",
    )


def qemu_img_snippet(
    cfg: DiskConfig, path: str | None = None, size_gib: int = DEFAULT_SIZE_GIB
) -> Snippet:
    title = "qemu-img create (the image, with its preallocation)"
    target = path or cfg.default_path()
    network = network_protocol(cfg.protocol)
    raw_note = (
        "none needed: a raw disk on a block device is the device itself"
        if cfg.backing == BackingKind.BLOCK
        else None
        if network is None
        else network.qemu_img_raw_note
    )
    if raw_note is not None and cfg.format == Format.RAW:
        return Snippet("qemu-img", title, None, raw_note)
    if network is not None and network.client_is_kernel(cfg.values):
        # The kernel's client gives a device (by-path) or a file under the mount: qemu-img writes it
        # as any other.
        target = path or network.qemu_node(cfg.values, cfg.format.value, NetworkPlace())[1][1]
    # QEMU's own client: an RBD image with the cell's object size, an NFS file
    elif network is not None:
        target = path or network.qemu_img_target(cfg.values, NetworkPlace(), cfg.format.value)
    argv = ["qemu-img", "create", "-f", cfg.format.value]
    opts = [f"preallocation={cfg.preallocation}"] if cfg.preallocation != Preallocation.OFF else []
    opts += [f"{k}={v}" for k, v in axes.qemu_options(cfg.axis_values()).create]
    if opts:
        argv += ["-o", ",".join(opts)]
    argv += [target, f"{size_gib}G"]
    return Snippet("qemu-img", title, shell_command(argv))


# -drive if= → bus (if=scsi attaches an LSI controller, not virtio-scsi: iomatrix has no such bus).
DRIVE_IF = {"virtio": Bus.VIRTIO_BLK, "ide": Bus.IDE}
QEMU_DEVICE = {
    "virtio-blk-pci": Bus.VIRTIO_BLK,
    "virtio-blk": Bus.VIRTIO_BLK,
    "scsi-hd": Bus.VIRTIO_SCSI,
    "ide-hd": Bus.IDE,
    "nvme": Bus.NVME,
}


# one -device's properties, "driver" its name (a JSON -device's lists kept as lists)
Device = dict[str, Any]


def _bus_of(device: Device, devices: list[Device]) -> Bus:
    """The bus of the disk's -device: an ide-hd on an AHCI controller's port (bus=ahci0.0, the
    -device ahci with that id) is SATA, as the SATA snippet writes it; on the machine's own IDE bus,
    IDE."""
    if device["driver"] == "ide-hd":
        controller_id = str(device.get("bus", "")).partition(".")[0]
        if any(
            d.get("id") == controller_id and d["driver"] == "ahci" for d in devices if controller_id
        ):
            return Bus.SATA
    return QEMU_DEVICE[device["driver"]]


def _device_props(arg: str) -> Device:
    """-device DRIVER,key=value,… or QEMU's JSON syntax {"driver": …} (which iothread-vq-mapping
    needs)."""
    if arg.lstrip().startswith("{"):
        try:
            props = json.loads(arg)
        except json.JSONDecodeError as e:
            raise _bad("-device", arg, f"QEMU's JSON -device syntax ({e})") from e
        if not isinstance(props, dict) or "driver" not in props:
            raise _bad("-device", arg, 'a JSON object with a "driver"')
        return {k: v if isinstance(v, list | dict) else str(v) for k, v in props.items()}
    name, _, rest = arg.partition(",")
    return {"driver": name, **dict(_split_opts(rest))}


def _qemu_options(
    tokens: list[str],
) -> tuple[dict[str, str] | None, dict[str, str] | None, list[Device]]:
    """(the -drive, the first -blockdev (the format node), every -device) of a command line."""
    drive: dict[str, str] | None = None
    blockdev: dict[str, str] | None = None
    devices: list[Device] = []
    for tok, arg in itertools.pairwise(tokens):
        if tok == "-drive":
            drive = dict(_split_opts(arg))
        elif tok == "-blockdev" and blockdev is None:
            blockdev = dict(_split_opts(arg))
        elif tok == "-device":
            devices.append(_device_props(arg))
    return drive, blockdev, devices


def _existing_disk(
    node: dict[str, str],
    protocol_node: dict[str, str] | None,
    values: dict[str, str],
    defaulted: list[str],
) -> tuple[ExistingDisk, NetworkDiskRead | None]:
    """The user's disk as the snippets change it, and what it is on the network (None: a local file
    or device). A disk QEMU reaches with its own client (libiscsi, libnfs) has no aio: it reads as
    QEMU's default, said once."""
    image = node.get("file.filename", node.get("file"))
    block = node.get("file.driver") == "host_device" or str(image).startswith("/dev/")
    network = read_qemu_node(protocol_node or node)
    if network is None:
        return ExistingDisk("qemu", image, block=block), None
    if not network.kernel_client:  # QEMU's own client
        values["aio"] = QEMU_DEFAULT_AIO
        defaulted[:] = [d for d in defaulted if not d.startswith("aio")]
        note_client_cache(network, values.get("cache"))
    return ExistingDisk("qemu", network.url, block=block, protocol=network.protocol), network


def _format_and_protocol(
    tokens: list[str], first: dict[str, str] | None
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """(the format node, the protocol node it names by reference, or None where its protocol is
    inline): with separate nodes (-blockdev driver=iscsi,node-name=proto … -blockdev
    driver=raw,file=proto), in either order."""
    if first is None:
        return None, None
    nodes = [
        dict(_split_opts(arg)) for tok, arg in itertools.pairwise(tokens) if tok == "-blockdev"
    ]
    if first.get("driver") not in {f.value for f in Format}:  # the protocol node came first
        above = next(
            (
                n
                for n in nodes
                if n.get("file") == first.get("node-name") and first.get("node-name")
            ),
            None,
        )
        return (above, first) if above is not None else (first, None)
    if "file" not in first or "file.driver" in first:
        return first, None
    return first, next((n for n in nodes if n.get("node-name") == first["file"]), None)


def _qemu_device_axes(device: Device, devices: list[Device]) -> dict[str, str]:
    """The bus's controller and the device axes of the disk's -device: IOThread and queues on a
    virtio-blk device, on its virtio-scsi-pci controller (the -device whose id the disk's bus=
    names) for scsi-hd. A scsi disk alone on its controller among several scsi disks has a
    controller of its own (virtio-scsi-single); a lone scsi disk reads as virtio-scsi: its command
    line is the same either way. QEMU's defaults are left out."""
    values: dict[str, str] = {}
    props = device
    if device["driver"] == "scsi-hd":
        controller_id = str(device.get("bus", "")).partition(".")[0]
        scsi = [d for d in devices if d["driver"] == "scsi-hd"]
        alone = [d for d in scsi if str(d.get("bus", "")).partition(".")[0] == controller_id] == [
            device
        ]
        values["bus"] = (
            Bus.VIRTIO_SCSI_SINGLE if alone and len(scsi) > 1 else Bus.VIRTIO_SCSI
        ).value
        props = next((d for d in devices if d.get("id") == controller_id and controller_id), {})
    if "iothread-vq-mapping" in props:
        values["iothread"] = IOThread.VQ_MAPPING.value
    elif "iothread" in props:
        values["iothread"] = IOThread.ON.value
    queues = props.get("num-queues", props.get("num_queues"))
    if queues is not None:
        values["queues"] = _value("queues", "num-queues", str(queues))
    return values


def from_qemu(text: str) -> CurrentConfig:
    # (a command pasted over several lines: a backslash at a line's end continues it, as in a shell)
    try:
        tokens = shlex.split(text.replace("\\\n", ""))
    except ValueError as e:  # shlex: "No closing quotation", "No escaped character"
        raise UserError(
            f"--current: cannot split the QEMU options as a shell would ({str(e).lower()})",
            hint="close the quote, or quote the whole value once: --current '-drive "
            "file=…,cache=none'",
        ) from None
    drive, blockdev, devices = _qemu_options(tokens)
    blockdev, protocol_node = _format_and_protocol(tokens, blockdev)
    # The disk's -device (a controller has no drive=).
    device = next((d for d in devices if "drive" in d), {})
    if drive is not None:
        values, defaulted = _from_drive(drive)
    elif blockdev is not None:
        values, defaulted = _from_blockdev(blockdev, device)
    else:
        raise _bad("QEMU option", text, FORMS)
    if device:
        drv = device["driver"]
        if drv not in QEMU_DEVICE:
            raise _bad("-device", drv, ", ".join(QEMU_DEVICE))
        values["bus"] = _bus_of(device, devices).value
        values.update(_qemu_device_axes(device, devices))
    node = drive if drive is not None else blockdev or {}
    later, later_defaulted = _later_axes_from_qemu(node, device)
    existing, network = _existing_disk(node, protocol_node, values, defaulted)
    cfg = CurrentConfig(
        {**values, **later, **(network.axes if network else {})},
        "QEMU command line",
        defaulted + later_defaulted,
        disk=existing,
    )
    cfg.notes += [network.note] if network else []
    # The qcow2 L2 cache bound: l2-cache-size, else the combined cache-size (QEMU gives the L2 cache
    # up to it).
    option = next((k for k in QEMU_L2_CACHE_OPTIONS if k in node), None)
    if option is not None:
        try:
            cache_bytes = parse_size(node[option])
        except ValueError:
            raise _bad(
                option, node[option], "a size in bytes or with a K/M/G/T suffix, e.g. 64M"
            ) from None
        _set_l2_cache(cfg, cache_bytes, option)
    return cfg


def _from_drive(kv: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    defaulted: list[str] = []
    if "format" in kv:
        values["format"] = _value("format", "format", kv["format"])
    if "cache" in kv:
        values["cache"] = _value("cache", "cache", kv["cache"])
    elif any(k in kv for k in ("cache.direct", "cache.no-flush")):
        values["cache"] = cache_from_switches(
            _onoff("cache.direct", kv.get("cache.direct", "off")),
            True,
            _onoff("cache.no-flush", kv.get("cache.no-flush", "off")),
        ).value
    else:
        values["cache"] = QEMU_DEFAULT_CACHE
        defaulted.append(f"cache (QEMU -drive default: {QEMU_DEFAULT_CACHE})")
    if "aio" in kv:
        values["aio"] = _value("aio", "aio", kv["aio"])
    else:
        values["aio"] = QEMU_DEFAULT_AIO
        defaulted.append(f"aio (QEMU default: {QEMU_DEFAULT_AIO})")
    if kv.get("if", "none") != "none":
        if kv["if"] not in DRIVE_IF:
            raise _bad("if", kv["if"], ", ".join(DRIVE_IF) + " or none with a -device")
        values["bus"] = DRIVE_IF[kv["if"]].value
    return values, defaulted


def _from_blockdev(kv: dict[str, str], device: Device) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    defaulted: list[str] = []
    # QEMU refuses a -blockdev without one ("Parameter 'driver' is missing")
    if not kv.get("driver"):
        raise _bad(
            "-blockdev driver",
            kv.get("driver", ""),
            "a format (raw, qcow2, qed) or a protocol (file, ...)",
        )
    if kv.get("driver", "") in {f.value for f in Format}:
        values["format"] = kv["driver"]
    direct = _onoff("cache.direct", kv.get("cache.direct", kv.get("file.cache.direct", "off")))
    no_flush = _onoff(
        "cache.no-flush", kv.get("cache.no-flush", kv.get("file.cache.no-flush", "off"))
    )
    wc = _onoff("write-cache", device.get("write-cache", "on"))
    values["cache"] = cache_from_switches(direct, wc, no_flush).value
    aio = kv.get("file.aio", kv.get("aio"))
    if aio is None:
        values["aio"] = QEMU_DEFAULT_AIO
        defaulted.append(f"aio (QEMU default: {QEMU_DEFAULT_AIO})")
    else:
        values["aio"] = _value("aio", "aio", aio)
    return values, defaulted


# A qcow2 node's L2 cache bound (block/qcow2.c read_cache_sizes): l2-cache-size, else the combined
# cache-size.
QEMU_L2_CACHE_OPTIONS = ("l2-cache-size", "cache-size")
# how _later_axes_from_qemu names a -device property among the node's options
DEVICE_PREFIX = "-device "


def _later_axes_from_qemu(node: dict[str, str], device: Device) -> tuple[dict[str, str], list[str]]:
    """The registry's later axes, read back through their QEMU options: format-node options on the
    -drive or the first -blockdev, protocol-node ones as file.KEY there (or KEY on a -drive), device
    ones on the -device. An axis none of whose options is given is left out: it is at QEMU's
    default."""

    def given(key: str) -> str | None:
        if key.startswith(DEVICE_PREFIX):
            return device.get(key.removeprefix(DEVICE_PREFIX))
        return node.get(key, node.get(key.removeprefix("file.")))

    values: dict[str, str] = {}
    defaulted: list[str] = []
    for axis in axes.axes():
        # (read by _qemu_device_axes)
        if axis.always_named or axis.qemu is None or axis.on_controller:
            continue
        spelled = {
            v: (
                *q.format_node,
                *((f"file.{k}", val) for k, val in (*q.file_node, *q.file_protocol)),
                *((DEVICE_PREFIX + k, val) for k, val in q.device),
            )
            for v in axis.values
            if (q := axis.qemu(v))
        }
        value = _read_back(spelled, given, lambda key: key)
        if value is not None:  # (one left out is at its default implicitly, as in a cell's key)
            values[axis.name] = value
    return values, defaulted
