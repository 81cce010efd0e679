"""The axis registry: every axis of the disk-configuration matrix as one entry of data.

An axis is what a plan lists values of (``cache = ["none", "writeback"]``) and what a cell holds one
value of. Each :class:`Axis` entry holds everything the rest of iomatrix needs to know about it:

* its **values**, the value QEMU/libvirt use when it is not given (its **default**: a cell recorded
  before the axis existed reads that value), and what a plan gets when it does not name the axis
  (**plan_default**);
* the **layers** of the I/O stack it acts on, which decide the tiers it applies to (a tier declares
  the layers it runs; on other tiers the axis collapses to ``-`` instead of multiplying the matrix);
* its **rules**: why a combination cannot run (pruned with the reason);
* its **spellings**: the options it sets on QEMU's disk (image creation, format and protocol nodes,
  guest device, block export) and how libvirt, Proxmox, virt-install and Nova write it;
* its order for the "simpler configuration" tie-break, and its documented risk where it has one.

Plan validation, matrix expansion and pruning, ``plan --explain``, the store, results columns and
CSV, snippets, ``--current`` parsing, the decision tie-break and rank's axis matching all iterate
this registry; nothing else lists axes. Adding an axis is adding one :class:`Axis` to
:data:`BUILT_IN` (docs/design.md, "Adding an axis"), or, for a network protocol's, to its protocol's
`axes` (its own module under :mod:`iomatrix.protocols`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection, Iterator, Mapping

from iomatrix import domain
from iomatrix.domain import NA, SafetyLevel
from iomatrix.domain.axis_model import (
    KERNEL_CLIENT,
    Axis,
    BackingFacts,
    DiskContext,
    Layer,
    Options,
    QemuFacts,
    QemuOptions,
    RuleContext,
    ToolOption,
    WorkloadShape,
)
from iomatrix.domain.local_axes import (
    AIO,
    BACKING,
    BUS,
    CACHE,
    CLUSTER_BYTES,
    DEFAULT_CLUSTER_BYTES,
    DEFAULT_L2_CACHE_MAX_BYTES,
    EXTENDED_L2_MIN_CLUSTER_BYTES,
    FORMAT,
    IMAGE_AXES,
    IOTHREAD,
    L2_CACHE_ANY_IMAGE_BYTES,
    MODIFIER,
    PREALLOCATION,
    QUEUES,
    QUEUES_AUTO,
    TIER,
    VIRTIO_PROBED_DEVICE,
    VQ_MAPPING_SINCE,
    IOThread,
    default_l2_cache_covers_bytes,
    l2_cache_holds,
    l2_cache_read_back,
    size_words,
    whole_image_l2_cache_bytes,
)
from iomatrix.domain.network_axes import CONDITIONS, ordered
from iomatrix.domain.spellings import NOVA_BACKEND_KEYS, SpellingKey, Writer
from iomatrix.errors import UserError
from iomatrix.plugins import PluginError, load_entry_points
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.built_in import protocol_classes
from iomatrix.protocols.place import NetworkPlace

# Names of the axis modules that code and plug-ins import from here (the registry is the public
# face).
__all__ = [
    "CLUSTER_BYTES",
    "DEFAULT_CLUSTER_BYTES",
    "DEFAULT_L2_CACHE_MAX_BYTES",
    "EXTENDED_L2_MIN_CLUSTER_BYTES",
    "KERNEL_CLIENT",
    "L2_CACHE_ANY_IMAGE_BYTES",
    "QUEUES_AUTO",
    "VIRTIO_PROBED_DEVICE",
    "VQ_MAPPING_SINCE",
    "BackingFacts",
    "IOThread",
    "Layer",
    "Options",
    "QemuFacts",
    "SpellingKey",
    "ToolOption",
    "Writer",
    "default_l2_cache_covers_bytes",
    "l2_cache_holds",
    "l2_cache_read_back",
    "size_words",
    "whole_image_l2_cache_bytes",
]

# --------------------------------------------------------------------------- the registry

# Where a QEMU option goes, as QemuOptions' fields, named as an error message says them. A protocol
# node's options are one node whichever field sets them (file_node, or file_protocol for the file
# protocol only).
_PROTOCOL_NODE = "the protocol node (-blockdev file.)"
_FORMAT_NODE = "the format node (-blockdev)"
_DEVICE = "the guest device (-device)"
_EXPORT = "the block export (--export)"
_OPTION_PLACES = {
    "create": "qemu-img create -o",
    "format_node": _FORMAT_NODE,
    "file_node": _PROTOCOL_NODE,
    "file_protocol": _PROTOCOL_NODE,
    "device": _DEVICE,
    "export": _EXPORT,
    "objects": "a QOM object id (-object)",
}
# Cells an axis's cell-dependent options (Axis.qemu_cell) are sampled on to learn the keys it may
# set: a qcow2 image, of unknown and of known size (the L2 cache bound is one key either way).
_SAMPLE_CONTEXTS = (DiskContext(None), DiskContext(1 << 30))
# Where each tool's spelling (Axis.tools, a ToolOption's keys) goes, as an error message names it.
# One key of one of these is one option of the tool's disk statement: written twice, the tool reads
# one of them, or both.
TOOL_PLACES = {
    "libvirt": "libvirt's <disk>",
    "proxmox": "Proxmox's drive (qm set)",
    "virt-install": "virt-install's --disk",
    "nova": "Nova's configuration (nova.conf, image properties)",
}


def _qemu(where: str, *keys: str) -> frozenset[SpellingKey]:
    return frozenset(SpellingKey("qemu", where, k) for k in keys)


def _tool(tool: str, *keys: str) -> frozenset[SpellingKey]:
    return frozenset(SpellingKey(tool, TOOL_PLACES[tool], k) for k in keys)


# What iomatrix's writers put in a disk statement themselves, whatever the cell (qemu_block's
# -blockdev, -device and --export; vmconfig's libvirt <driver name='qemu'> and <target dev=>,
# virt-install's path= and address.*). Each network protocol's writer (its QEMU protocol node, its
# Nova lines) is read from the protocol itself (`network_writers`): a built-in one's here, from its
# class, an installed one's as the protocol registry registers it (`add_protocol_writers`).
# tests/test_axis_collision.py checks the writers write no key they do not declare.
WRITERS: list[Writer] = [
    Writer(
        "iomatrix's QEMU disk builder (qemu_block)",
        _qemu(_FORMAT_NODE, "driver", "node-name", "file", "read-zeroes", "size")
        | _qemu(_PROTOCOL_NODE, "driver", "filename", "server.type", "server.path")
        | _qemu(_DEVICE, "drive", "bus", "unit", "serial", "werror", "rerror", "id")
        | _qemu(_EXPORT, "type", "id", "node-name", "name", "writable"),
    ),
    Writer("iomatrix's libvirt disk writer", _tool("libvirt", "name", "dev")),
    Writer(
        "iomatrix's virt-install disk writer",
        _tool(
            "virt-install",
            "path",
            *(f"address.{k}" for k in ("type", "controller", "bus", "target", "unit")),
        ),
    ),
]


def protocol_writers(
    protocol: str, qemu_node: Collection[str], nova_conf: Collection[str]
) -> list[Writer]:
    """A network protocol's writers, named as a refusal names them: its QEMU protocol node (the keys
    of NetworkProtocol.qemu_node, under the format node's file.) and the nova.conf lines its Nova
    snippet writes itself (NetworkProtocol.nova_conf)."""
    out = [Writer(f"the {protocol} protocol's QEMU node", _qemu(_PROTOCOL_NODE, *qemu_node))]
    if nova_conf:
        out.append(Writer(f"the {protocol} protocol's Nova snippet", _tool("nova", *nova_conf)))
    return out


# The formats a protocol's QEMU node is read at for its keys (a raw volume and an image file on it
# differ).
_PROBE_FORMATS = ("raw", "qcow2")
# A client value other than the kernel's: QEMU's own client (NetworkProtocol's promise), where the
# client axis is not registered.
_USERSPACE_PROBE = "userspace"
# The writers of the protocols the protocol registry registered beyond the built-in ones (an
# installed package's, a test's), by protocol name.
_ADDED_PROTOCOL_WRITERS: dict[str, list[Writer]] = {}


def network_writers(network: NetworkProtocol) -> list[Writer]:
    """The keys `network` writes in the tools' spellings, read from its spellings themselves: its
    QEMU protocol node for every client and format, and its Nova snippet's own nova.conf lines
    (placeholders for its place), but the backend's keys it takes over from the axes."""
    client = REGISTRY.get(network.client_axis)
    others = client.values if client is not None else (_USERSPACE_PROBE,)
    clients = {network.kernel_client, *others}
    place = NetworkPlace()
    node = {
        key
        for value in sorted(clients)
        for fmt in _PROBE_FORMATS
        for key, _ in network.qemu_node({network.client_axis: value}, fmt, place)
    }
    # (the Nova backend's own keys it replaces the axes' of: spellings.NOVA_BACKEND_KEYS)
    nova = [k for k, _ in network.nova_conf(place) if k not in NOVA_BACKEND_KEYS]
    return protocol_writers(network.name, sorted(node), nova)


def add_protocol_writers(network: NetworkProtocol) -> None:
    """Check every axis registered from now on against the writers of `network`, a protocol the
    protocol registry registers beyond the built-in ones (it has checked them against the axes)."""
    _ADDED_PROTOCOL_WRITERS[network.name] = network_writers(network)


def drop_protocol_writers(name: str) -> None:
    """Forget the writers of the protocol named `name` (a test's, leaving the registry)."""
    _ADDED_PROTOCOL_WRITERS.pop(name, None)


def writers() -> list[Writer]:
    """Every writer an axis's keys are checked against: iomatrix's own (WRITERS), each built-in
    network protocol's (read from its class), and those of protocols registered since."""
    built_in = [w for cls in protocol_classes() for w in network_writers(cls())]
    return [*WRITERS, *built_in, *(w for ws in _ADDED_PROTOCOL_WRITERS.values() for w in ws)]


def qemu_keys(axis: Axis) -> set[tuple[str, str]]:
    """Every (place, key) an axis's QEMU options may set, over all its values (`_OPTION_PLACES`'
    places)."""
    found: list[QemuOptions] = []
    for value in axis.values:
        if axis.qemu is not None:
            found.append(axis.qemu(value))
        if axis.qemu_cell is not None:
            cell = {"format": domain.Format.QCOW2.value, axis.name: value}
            found += [axis.qemu_cell(cell, ctx) for ctx in _SAMPLE_CONTEXTS]
    return {
        (_OPTION_PLACES[place], key)
        for opts in found
        for place in _OPTION_PLACES
        for key, _ in getattr(opts, place)
    }


def spelling_keys(axis: Axis) -> set[SpellingKey]:
    """Every key an axis writes in every tool's spelling, over all its values: its QEMU options
    (`qemu_keys`) and the keys of its ToolOptions for libvirt, Proxmox, virt-install and Nova. Read
    from the spellings themselves, so what is checked is what the snippets and the command lines
    write."""
    keys = {SpellingKey("qemu", where, key) for where, key in qemu_keys(axis)}
    for tool, spell in axis.tools.items():
        where = TOOL_PLACES.get(tool, f"{tool}'s spelling")
        keys |= {
            SpellingKey(tool, where, key)
            for value in axis.values
            for key, _ in spell(value).options
        }
    return keys


class AxisRefused(UserError, ValueError):
    """An axis the registry cannot take (its name is taken, or it writes a key another axis or a
    writer writes): one line naming both, which the CLI prints as any mistake the user can fix (an
    installed package's axis)."""


def _refusal(axis: Axis, key: SpellingKey, owner: str, own_values: str | None) -> str:
    option = "QEMU option" if key.tool == "qemu" else f"{key.tool} option"
    fix = (
        f"extend {own_values!r}'s values instead, or set another option"
        if own_values
        else "set another option"
    )
    return (
        f"axis {axis.name!r} sets {key.key} on {key.where}, which {owner} already sets: "
        f"one {option} belongs to "
        f"one axis ({fix})"
    )


def collision(axis: Axis, others: Collection[Axis], writers: Collection[Writer] = ()) -> str | None:
    """Why `axis` cannot join `others`: an axis of them, or one of `writers`, already writes one of
    the keys it writes in some tool's spelling (the same key of the same QEMU node, device or
    export, or of libvirt's, Proxmox's, virt-install's or Nova's disk statement), which would be
    written twice (``write-cache=on,write-cache=off``, ``cache=none,cache=writeback``) or silently
    overwritten, and read back as both; None where it can."""
    mine = spelling_keys(axis)
    for other in others:
        if other.name == axis.name:
            continue
        if both := sorted(mine & spelling_keys(other)):
            return _refusal(axis, both[0], f"axis {other.name!r}", other.name)
    for writer in writers:
        if both := sorted(mine & writer.keys):
            return _refusal(axis, both[0], writer.name, None)
    return None


def _checked_registry(entries: Collection[Axis]) -> dict[str, Axis]:
    registry: dict[str, Axis] = {}
    for axis in entries:
        if axis.name in registry:
            raise AxisRefused(f"axis {axis.name!r} is already registered")
        # (iomatrix's own writers only: the protocols' are checked against these axes when the
        # protocol registry registers them, and a source may import this module, still half-imported
        # here)
        if why := collision(axis, registry.values(), WRITERS):
            raise AxisRefused(why)
        registry[axis.name] = axis
    return registry


BUILT_IN: tuple[Axis, ...] = (
    TIER,
    FORMAT,
    PREALLOCATION,
    CACHE,
    AIO,
    BUS,
    BACKING,
    MODIFIER,
    *IMAGE_AXES,
    IOTHREAD,
    QUEUES,
    # the network axes: rtt and clients, and each built-in protocol's own (NetworkProtocol.axes)
    *ordered((p.axes_before, p.axes) for p in protocol_classes()),
)
REGISTRY: dict[str, Axis] = _checked_registry(BUILT_IN)
# The entry-point group through which an installed package adds axes (iomatrix.plugins).
ENTRY_POINT_GROUP = "iomatrix.axes"
# Why an installed package's axis was refused (a name taken, a key another axis or a writer writes),
# one line each: shown by `iomatrix plan`; the axis is not registered.
REFUSED: list[str] = []


def _installed_axes(loaded: list[object]) -> list[Axis]:
    out: list[Axis] = []
    for obj in loaded:
        for axis in (obj,) if isinstance(obj, Axis) else tuple(obj):  # type: ignore[call-overload]
            if not isinstance(axis, Axis):
                raise TypeError(
                    f"{ENTRY_POINT_GROUP}: {axis!r} is not an iomatrix.domain.axes.Axis"
                )
            out.append(axis)
    return out


def register_installed() -> list[str]:
    """Register the axes installed packages offer (entry-point group ``iomatrix.axes``), each
    checked as `register` checks one; returns (and keeps in REFUSED) why any was refused, one line
    each."""
    refused: list[str] = []
    try:
        found = _installed_axes([obj for _, obj in load_entry_points(ENTRY_POINT_GROUP)])
    except (PluginError, TypeError) as e:
        refused.append(str(e))
        found = []
    for axis in found:
        if REGISTRY.get(axis.name) is axis:
            continue
        try:
            register(axis)
        # (a protocol package the check reads may be refused too)
        except (ValueError, UserError) as e:
            refused.append(f"{ENTRY_POINT_GROUP}: {e}")
    REFUSED.extend(refused)
    # (at import: no command has its console yet; one line each, never a traceback)
    for line in refused:
        print(f"iomatrix: an installed axis was refused: {line}", file=sys.stderr)
    return refused


def axes() -> tuple[Axis, ...]:
    """Every registered axis, in the order cells are keyed and tables show them."""
    return tuple(REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Axis:
    return REGISTRY[name]


def plan_axes() -> tuple[Axis, ...]:
    """The axes a plan lists values of from this registry (tier and backing have their own
    validation)."""
    return tuple(a for a in REGISTRY.values() if not a.free_values)


def register(axis: Axis) -> None:
    """Add `axis` to the registry (an axis of an installed package, see `iomatrix.plugins`); an
    AxisRefused (a UserError and a ValueError) where its name is taken or a key it writes in some
    tool's spelling is another axis's or a writer's (`collision`)."""
    if axis.name in REGISTRY:
        raise AxisRefused(f"axis {axis.name!r} is already registered")
    if why := collision(axis, REGISTRY.values(), writers()):
        raise AxisRefused(why)
    REGISTRY[axis.name] = axis


def writer_collision(writer: Writer) -> str | None:
    """Why `writer` cannot write its keys (a registered axis already writes one of them), one line
    naming both; None where it can. The protocol registry asks it of each protocol it registers."""
    for axis in REGISTRY.values():
        if both := sorted(spelling_keys(axis) & writer.keys):
            key = both[0]
            return (
                f"{writer.name} sets {key.key} on {key.where}, which axis {axis.name!r} "
                "already sets: "
                f"one {'QEMU' if key.tool == 'qemu' else key.tool} option belongs to one owner"
            )
    return None


def register_writer(writer: Writer) -> None:
    """Add a writer of tool keys that is not an axis (iomatrix's own): an AxisRefused where a
    registered axis already writes one of its keys, naming both (`writer_collision`)."""
    if why := writer_collision(writer):
        raise AxisRefused(why)
    WRITERS.append(writer)


@contextlib.contextmanager
def registered(axis: Axis) -> Iterator[Axis]:
    """Add `axis` for the duration of a block (a test's demonstration axis); removed afterwards."""
    register(axis)
    try:
        yield axis
    finally:
        del REGISTRY[axis.name]


def controller_axes() -> tuple[str, ...]:
    """The axes whose device options a virtio-scsi disk's controller takes (Axis.on_controller)."""
    return tuple(a.name for a in REGISTRY.values() if a.on_controller)


def controller_keys() -> dict[str, str]:
    """-device key → the controller's name for it, of every axis (Axis.on_controller)."""
    return {k: v for a in REGISTRY.values() for k, v in a.on_controller.items()}


def simplicity_order() -> dict[str, tuple[str, ...]]:
    """Axis → its values, simplest first (the "simplicity" tie-break; stats/decision.py)."""
    return {a.name: a.simpler for a in REGISTRY.values() if a.simpler}


def prune_reason(values: Mapping[str, str], ctx: RuleContext) -> str | None:
    """The first rule of any axis the cell breaks, in registry order, or None."""
    for axis in REGISTRY.values():
        for rule in axis.rules:
            reason = rule.reason(values, ctx)
            if reason:
                return reason
    return None


def unshown_reason(
    values: Mapping[str, str], shape: WorkloadShape, kept: Mapping[str, str], image_bytes: int
) -> str | None:
    """Why a workload does not run on a cell: the cell sets an axis the workload cannot show
    (Axis.shown_by) away from `kept`, the one value the workload runs that axis at; None where it
    runs."""
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if axis.shown_by is None or v in (NA, kept.get(axis.name, axis.default)):
            continue
        # The difference from the kept value shows where either value lets it (an L2 cache covering
        # the image at 1 MiB clusters but not at 64 KiB).
        why = axis.shown_by(values, shape, image_bytes)
        if why and axis.shown_by(
            {**values, axis.name: kept.get(axis.name, axis.default)}, shape, image_bytes
        ):
            return (
                f"{shape.name} {why}, so {axis.name} cannot change its result: it runs at "
                f"{axis.name}={kept.get(axis.name, axis.default)} only"
            )
    return None


def risk_level(values: Mapping[str, str]) -> SafetyLevel | None:
    """The worst documented power-loss risk of the cell's values over every axis (Axis.risk: the
    cache mode's, eatmydata's, a null LUN's, the LUN's write cache's); None where no value has one
    (bare metal)."""
    levels = [
        level
        for a in REGISTRY.values()
        if (v := values.get(a.name, NA)) != NA and (level := a.risk(v))
    ]
    return max(levels, key=domain.SAFETY_ORDER.index) if levels else None


def baseline_values(values: Mapping[str, str], baseline: domain.Baseline) -> dict[str, str]:
    """The values of `values`' twin at a tool's defaults (domain.BASELINES): its cache and aio, and
    every later axis that applies (not "-") at its default, as the tool runs it when nothing is set
    (QEMU without detect-zeroes= runs zero detection off); the first release's other axes (format,
    bus, backing, …) are the user's storage, not a default, and stay, and so do the conditions the
    cell ran in (network_axes.CONDITIONS: its round-trip time, its number of clients)."""
    twin = {**values, "cache": baseline.cache.value, "aio": baseline.aio.value}
    for axis in REGISTRY.values():
        if (
            not axis.always_named
            and not axis.free_values
            and axis.name not in CONDITIONS
            and values.get(axis.name, NA) != NA
        ):
            twin[axis.name] = axis.default
    # A platform that chooses the bus and later axes (Proxmox's virtio-scsi-single with an
    # IOThread): those, where the cell's tier has the axis.
    chosen = (
        (("bus", baseline.bus.value),) if baseline.bus is not None else ()
    ) + baseline.settings
    twin.update({k: v for k, v in chosen if values.get(k, NA) != NA})
    return twin


def later_at_default(values: Mapping[str, str]) -> dict[str, str]:
    """The later axes `values` sets away from their defaults, at their defaults: the comparison for
    a question asked on one cache × aio cell (zero detection at cache=none, io_uring: its twin with
    zero detection off), where the twin at QEMU's default cache and aio (baseline_values) was not
    measured."""
    return {
        a.name: a.default
        for a in REGISTRY.values()
        if not a.always_named
        and not a.free_values
        and a.name not in CONDITIONS
        and values.get(a.name, NA) not in (NA, a.default)
    }


def notes(cells: list[Mapping[str, str]]) -> list[str]:
    """The sweep notes the cells' values call for, each once."""
    out: list[str] = []
    for axis in REGISTRY.values():
        if axis.cell_note is None:
            continue
        for values in cells:
            note = axis.cell_note(values)
            if note and note not in out:
                out.append(note)
    return out


def named(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """(axis, value) pairs a key or label names: the always-named axes, and later axes set away from
    their default and applying to the cell's tier ("-" means not applying)."""
    out = []
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if axis.always_named or (v != NA and v != axis.default):
            out.append((axis.name, v))
    return out


def qemu_options(values: Mapping[str, str], ctx: DiskContext | None = None) -> QemuOptions:
    """Every axis's QEMU options for a cell's values, merged in registry order (axes that do not
    apply, "-", contribute nothing). `ctx` is what options depending on the image need
    (:attr:`Axis.qemu_cell`)."""
    ctx = ctx or DiskContext()
    merged: dict[str, list[tuple[str, str]]] = {
        k: []
        for k in (
            "create",
            "format_node",
            "file_node",
            "file_protocol",
            "device",
            "export",
            "objects",
        )
    }
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        if v == NA:
            continue
        for opts in (
            axis.qemu(v) if axis.qemu else None,
            axis.qemu_cell(values, ctx) if axis.qemu_cell else None,
        ):
            if opts is not None:
                for k, pairs in merged.items():
                    pairs.extend(getattr(opts, k))
    return QemuOptions(**{k: tuple(v) for k, v in merged.items()})


def tool_options(
    values: Mapping[str, str], tool: str, skip_keys: Collection[str] = ()
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(options, notes, unavailable reasons) of every axis of a cell's values, for one tool, in
    registry order.

    A spelling whose options all have keys in `skip_keys` is left out with its note (options the
    tool has no use for here: Proxmox's image format on a block storage); a value the tool cannot
    express still counts."""
    options: list[tuple[str, str]] = []
    notes_: list[str] = []
    unavailable: list[str] = []
    for axis in REGISTRY.values():
        v = values.get(axis.name, NA)
        spell = axis.tools.get(tool)
        if spell is None or v == NA:
            continue
        t = spell(v)
        if t.options and all(k in skip_keys for k, _ in t.options):
            continue
        options.extend(t.options)
        if t.note:
            notes_.append(t.note)
        if t.unavailable:
            unavailable.append(t.unavailable)
    return options, notes_, unavailable


register_installed()
