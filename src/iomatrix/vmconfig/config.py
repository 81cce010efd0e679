"""A VM disk configuration as the snippets write it, and what every tool's writer shares.

`DiskConfig` is one configuration (a view over one axis → value mapping), `Snippet`/`SnippetSet`
what the writers return; the measured defaults, the registry's refusal of what QEMU would not run,
the split of options between a disk and its virtio-scsi controller, and the shell wrapping every
command-line snippet uses. Each tool's writer sits beside that tool's reader in this package
(`libvirt`, `qemu`, `proxmox`; `nova` is written only; network disks in `network` and
`network_snippets`), so a tool's parse and write are read and changed together.

Everything is generated from the axis registry (`iomatrix.domain.axes`): a configuration holds a
value of every axis, each tool's options are the axes' spellings for that tool
(`axes.tool_options`), and the rules between them are the registry's; an axis added to the registry
reaches every snippet with no change here. The QEMU arguments are the very `-blockdev`/`-device`
graph the tiers measure (`iomatrix.qemu_block`, the one QEMU disk builder), so what is pasted is
what was measured. Where a tool cannot express a configuration (Proxmox has no NVMe disk bus, Nova
cannot use qed images) the snippet says so in one line instead of printing something that would not
work."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from iomatrix.domain import (
    BLOCK_BACKINGS,
    MEASURED_DETECT_ZEROES,
    MEASURED_DISCARD,
    NA,
    SCSI_CONTROLLER_BUSES,
    Aio,
    BackingKind,
    Bus,
    CacheMode,
    Format,
    Modifier,
    Preallocation,
    axes,
)
from iomatrix.domain.axes import (
    BackingFacts,
    RuleContext,
)
from iomatrix.domain.network_axes import CONDITIONS
from iomatrix.errors import UserError
from iomatrix.protocol_registry import is_network, network_protocol
from iomatrix.protocol_registry import protocol as protocol_named
from iomatrix.protocols.place import NetworkPlace

DEFAULT_SIZE_GIB = 32
# eatmydata is an LD_PRELOAD library around the whole QEMU process: no tool has a per-disk setting
# for it, so the snippets run QEMU through this wrapper script (libvirt: <emulator>).
EATMYDATA_WRAPPER = "/usr/local/bin/qemu-system-x86_64-eatmydata"
QEMU_BINARY = "/usr/bin/qemu-system-x86_64"
EATMYDATA_NOTE = (
    "eatmydata applies to the whole VM (every disk): libvirt cannot preload a library into QEMU, "
    f"so <emulator> runs QEMU through the wrapper script {EATMYDATA_WRAPPER} (see the wrapper "
    "snippet)"
)
DISCARD_NOTE = (
    "discard and detect-zeroes as measured (QEMU's defaults: discard ignored, zero detection off); "
    "on thin storage discard=unmap lets the guest's TRIM free space: an option, not measured here"
)
# What a snippet says of the measured defaults it writes, when an axis spells the other one itself.
MEASURED_NOTES = {
    "discard": "discard as measured (QEMU's default: discard ignored); on thin storage "
    "discard=unmap "
    "lets the guest's TRIM free space: an option, not measured here",
    "detect_zeroes": "detect-zeroes as measured (QEMU's default: zero detection off)",
}


def measured_defaults(tool: str, spelled: Mapping[str, str]) -> list[tuple[str, str]]:
    """discard and detect-zeroes are not axes: every tier measures QEMU's defaults, written out per
    tool (a tool's own default may differ) unless an axis spells the option itself."""
    return [
        (k, table[tool])
        for k, table in (("discard", MEASURED_DISCARD), ("detect_zeroes", MEASURED_DETECT_ZEROES))
        if k not in spelled
    ]


def measured_note(written: list[tuple[str, str]]) -> str:
    keys = [k for k, _ in written]
    return (
        DISCARD_NOTE
        if len(keys) == len(MEASURED_NOTES)
        else "; ".join(MEASURED_NOTES[k] for k in keys)
    )


# The axes a DiskConfig's positional form names (the first release's, in this order); the view holds
# every axis in one mapping all the same.
_POSITIONAL_AXES = ("format", "preallocation", "cache", "aio", "bus")


class DiskConfig:
    """One VM disk configuration: a view over one axis → value mapping (`values`: a value of every
    axis of the registry but tier and backing), and what the image lives on (`backing`: a file or a
    block device).

    Its typed attributes (``format``, ``cache``, …) read the mapping; `more` is the later axes' part
    of it. The positional form ``DiskConfig(format, preallocation, cache, aio, bus, backing,
    assumed, modifier, more)`` fills the same mapping. Immutable and hashable."""

    __slots__ = ("_values", "assumed", "backing")

    def __init__(
        self,
        format: str | None = None,
        preallocation: str | None = None,
        cache: str | None = None,
        aio: str | None = None,
        bus: str | None = None,
        backing: str = BackingKind.FILE,
        assumed: tuple[str, ...] = (),
        modifier: str = Modifier.NONE,
        more: Mapping[str, str] | None = None,
        *,
        values: Mapping[str, str] | None = None,
    ) -> None:
        if values is None:
            positional = dict(
                zip(_POSITIONAL_AXES, (format, preallocation, cache, aio, bus), strict=True)
            )
            if None in positional.values():
                raise TypeError(f"DiskConfig needs {', '.join(_POSITIONAL_AXES)} (or values=)")
            for name in more or {}:
                if name not in axes.REGISTRY or axes.get(name).always_named:
                    raise UserError(
                        f"no axis {name!r} beyond {', '.join(_TYPED_AXES)}",
                        hint=f"axes: {', '.join(a.name for a in axes.plan_axes())}",
                    )
            values = {
                **{k: str(v) for k, v in positional.items()},
                "modifier": str(modifier),
                **(more or {}),
            }
        for name, value in values.items():
            if name not in axes.REGISTRY or axes.get(name).free_values:
                raise UserError(
                    f"no axis {name!r} in a disk configuration",
                    hint=f"axes: {', '.join(a.name for a in axes.plan_axes())}",
                )
            if axes.get(name).invalid(value):
                raise UserError(
                    f"{name}={value} is not a value of {name}",
                    hint=f"use {axes.get(name).choices()}",
                )
        object.__setattr__(
            self, "_values", {a.name: values[a.name] for a in axes.plan_axes() if a.name in values}
        )
        object.__setattr__(self, "backing", backing_kind(backing))
        # axes the source did not give: the axis's default
        object.__setattr__(self, "assumed", tuple(assumed))
        reason = refusal(self.axis_values(), self.backing)
        if reason:
            raise UserError(
                reason, hint="pick a combination QEMU accepts (see 'iomatrix plan --explain')"
            )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a DiskConfig is immutable")

    def _key(self) -> tuple[object, ...]:
        return tuple(sorted(self._values.items())), self.backing, self.assumed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DiskConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"DiskConfig(values={self._values!r}, backing={self.backing!s})"

    @property
    def values(self) -> dict[str, str]:
        return dict(self._values)

    @property
    def format(self) -> Format:
        return Format(self._values["format"])

    @property
    def preallocation(self) -> Preallocation:
        return Preallocation(self._values["preallocation"])

    @property
    def cache(self) -> CacheMode:
        return CacheMode(self._values["cache"])

    @property
    def aio(self) -> Aio:
        return Aio(self._values["aio"])

    @property
    def bus(self) -> Bus:
        return Bus(self._values["bus"])

    @property
    def modifier(self) -> Modifier:
        return Modifier(self._values.get("modifier", Modifier.NONE))

    @property
    def more(self) -> dict[str, str]:
        """The registry's later axes set away from their default (what reaches the snippets beyond
        the first release's axes)."""
        return {
            a: v
            for a, v in self._values.items()
            if not axes.get(a).always_named and v != axes.get(a).default
        }

    @classmethod
    def from_axes(cls, cell: Mapping[str, str], backing_type: str | None = None) -> DiskConfig:
        """From a cell's axes (as stored): every axis of the registry; one shown as "-" (it does not
        apply to the cell's tier) or absent takes the axis's default, and is listed in `assumed`
        where a tool spells it (the first release's axes: a later axis a cell does not name is at
        QEMU's default, as measured)."""
        vals: dict[str, str] = {}
        assumed: list[str] = []
        for axis in axes.plan_axes():
            v = cell.get(axis.name, NA)
            if v in (NA, None, ""):
                if axis.name == "cache":  # the one axis every snippet is about: never assumed
                    raise UserError(
                        "a configuration needs a cache mode", hint=f"use {axis.choices()}"
                    )
                v = str(axis.default)
                # A later axis left out is at QEMU's default, which is what was measured: nothing to
                # assume.
                if axis.tools and axis.always_named:
                    assumed.append(axis.name)
            vals[axis.name] = v
        kind: str = BackingKind.BLOCK if backing_type in BLOCK_BACKINGS else BackingKind.FILE
        if is_network(backing_type):
            kind = backing_type
        return cls(values=vals, backing=kind, assumed=tuple(assumed))

    @property
    def protocol(self) -> str | None:
        """The network protocol's name the disk is reached by; None for a local file or device."""
        return str(self.backing) if is_network(str(self.backing)) else None

    @property
    def userspace_client(self) -> bool:
        """A network disk QEMU reaches with its own client (libiscsi, libnfs, librbd): no host file,
        so no aio=."""
        return self.protocol is not None and not protocol_named(self.protocol).client_is_kernel(
            self._values
        )

    def axis_values(self) -> dict[str, str]:
        """The configuration's value of every axis of the registry (tier and backing aside), later
        axes only where they are set away from their default (as in a cell's key: the snippet is the
        one it was before them)."""
        return {a: v for a, v in self._values.items() if axes.get(a).always_named or a in self.more}

    def label(self) -> str:
        """The axes every tool spells are always named; the others (a host wrapper, later axes) only
        away from their default."""
        values = self.axis_values()
        return " ".join(
            f"{a.name}={values[a.name]}"
            for a in axes.plan_axes()
            if a.name in values and ((a.always_named and a.tools) or values[a.name] != a.default)
        )

    def settings_label(self) -> str:
        """label() without the conditions the cell was measured under (network_axes.CONDITIONS:
        the emulated round-trip time, the number of clients sharing the backend): what a snippet
        sets, which a condition is not. A snippet's note says the condition in words (issue 70:
        "bus=virtio-blk clients=4" read as a setting to copy)."""
        return " ".join(
            pair for pair in self.label().split(" ") if pair.split("=")[0] not in CONDITIONS
        )

    def default_path(self) -> str:
        if self.protocol is not None:  # a network disk's own name: network.NetworkPlace
            return protocol_named(self.protocol).url(NetworkPlace(), self.format.value)
        if self.backing == BackingKind.BLOCK:
            return "/dev/vg0/vm-disk"
        return f"/var/lib/libvirt/images/vm-disk.{self.format}"


def snippet_backing(meta: Mapping[str, Any]) -> str | None:
    """What a stored backing's metadata says the snippets' disk is on (DiskConfig.from_axes): its
    backing type where it is served over the network (iscsi, nfs), else its kind."""
    kind = meta.get("backing_type")
    return kind if is_network(kind) else meta.get("kind")


# The axes every configuration names (the first release's); later axes are named only away from
# their default.
_TYPED_AXES = tuple(a.name for a in axes.plan_axes() if a.always_named)


def backing_kind(backing: str) -> str:
    """A disk's backing kind: a BackingKind for a local file or device, the protocol's name for a
    network disk (any registered protocol, built in or installed)."""
    return str(backing) if is_network(str(backing)) else BackingKind(backing)


def refusal(values: Mapping[str, str], backing: str) -> str | None:
    """Why QEMU would not run a configuration: the registry's rules, for a backing that takes
    O_DIRECT (the user's storage is not probed). The bus's rule is left out: it is about the guest
    kernel iomatrix boots (no ahci driver), not the user's VM."""
    network = network_protocol(str(backing))
    # An RBD image is a fixed-size volume, as a LUN is: a raw disk on it is the volume itself.
    ctx = RuleContext(
        BackingFacts(
            unavailable=None,
            o_direct=True,
            protocol=None if network is None else network.name,
            is_device=backing == BackingKind.BLOCK or (network is not None and network.is_volume),
        ),
        "your storage",
    )
    for axis in axes.axes():
        if axis.name == "bus":
            continue
        for rule in axis.rules:
            if reason := rule.reason(values, ctx):
                return reason
    return None


def _not_available(unavailable: list[str]) -> str:
    return "not available: " + "; ".join(unavailable)


Pairs = list[tuple[str, str]]


def _partition(opts: Pairs, keys: Callable[[str], bool]) -> tuple[Pairs, Pairs]:
    """(the options whose key `keys` accepts, the others), each in order."""
    return [kv for kv in opts if keys(kv[0])], [kv for kv in opts if not keys(kv[0])]


@dataclass(frozen=True)
class Snippet:
    tool: str  # "libvirt", "qemu", "proxmox", "virt-install", "nova", "qemu-img"
    title: str
    text: str | None  # None when the tool cannot express the configuration
    note: str = ""  # what the snippet leaves to the user, or why it is not available
    language: str = "sh"
    # A storage-side snippet's settings in one line, for the answer's first screen ("" for a VM
    # tool's)
    summary: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "title": self.title,
            "text": self.text,
            "note": self.note,
            "language": self.language,
        }


@dataclass
class SnippetSet:
    config: DiskConfig
    snippets: list[Snippet] = field(default_factory=list)
    # With --current: what of the user's configuration the snippets keep, and why, in one line (''
    # when nothing).
    kept: str = ""

    def by_tool(self, tool: str) -> Snippet:
        return next(s for s in self.snippets if s.tool == tool)

    def data_step(self) -> Snippet | None:
        """The step that copies the user's data (qemu-img convert of their image), where the answer
        needs one: it comes before the configuration that points at the copy."""
        return next(
            (
                s
                for s in self.snippets
                if s.tool == DATA_STEP_TOOL
                and s.text is not None
                and s.text.startswith(DATA_STEP_COMMAND)
            ),
            None,
        )

    def as_dict(self) -> dict[str, Any]:
        kept = {"kept": self.kept} if self.kept else {}
        return {
            # what the snippets set: the conditions measured under are the answer's name's
            "config": self.config.settings_label(),
            "assumed": list(self.config.assumed),
            **kept,
            "snippets": [s.as_dict() for s in self.snippets],
        }


DATA_STEP_TOOL = "qemu-img"
DATA_STEP_COMMAND = "qemu-img convert "


def controller_options(cfg: DiskConfig, tool: str) -> tuple[Pairs, Pairs]:
    """(the tool's options for the disk, those for its virtio-scsi controller): on a scsi bus the
    device axes' options (the registry's Axis.on_controller) are the controller's; on any other bus
    everything is the disk's."""
    opts = axes.tool_options(cfg.axis_values(), tool)[0]
    if cfg.bus not in SCSI_CONTROLLER_BUSES:
        return opts, []
    values = cfg.axis_values()
    controller_keys = {
        k
        for a in axes.controller_axes()
        if a in values
        for k, _ in axes.tool_options({a: values[a]}, tool)[0]
    }
    on_controller, on_disk = _partition(opts, controller_keys.__contains__)
    return on_disk, on_controller


def controller_options_of(cfg: DiskConfig, opts: Pairs, tool: str) -> tuple[Pairs, Pairs]:
    """`opts` (the tool's options, in the caller's order) split as `controller_options` splits
    them."""
    on_controller = controller_options(cfg, tool)[1]
    return [kv for kv in opts if kv not in on_controller], on_controller


def _uses_iothread(cfg: DiskConfig) -> bool:
    return cfg.more.get("iothread", axes.get("iothread").default) != axes.get("iothread").default


# The widest line of a shell snippet (a terminal of 100 columns, a page's code block).
SNIPPET_WIDTH = 100
# The widest line of a snippet the first screen shows indented by 4 columns (recommend's headline),
# so it still fits.
INDENTED_SNIPPET_WIDTH = SNIPPET_WIDTH - 4
CONTINUATION = " \\\n"  # ' \' and a newline: the command goes on on the next line


def shell_word(lead: str, value: str, width: int = SNIPPET_WIDTH) -> str:
    """`lead` then `value` as one shell word, continued at its commas over lines of at most `width`
    columns (a backslash at each line's end; the word resumes at the next line's start, so it stays
    one word in sh and bash,
    each part quoted where it needs quoting). Room is kept for a trailing ' \\' on the last line."""
    one = lead + shlex.quote(value)
    if len(one) <= width - 2:
        return one
    pieces = re.findall(r"[^,]*,|[^,]+$", value)
    chunks: list[str] = []
    cur, room = "", width - 2 - len(lead)
    for piece in pieces:
        if cur and len(shlex.quote(cur + piece)) > room:
            chunks.append(cur)
            cur, room = piece, width - 2
        else:
            cur += piece
    chunks.append(cur)
    return lead + "\\\n".join(shlex.quote(c) for c in chunks)


def shell_command(words: list[str], width: int = SNIPPET_WIDTH) -> str:
    """`words` as one shell command (each quoted where it needs it): on one line where it fits in
    `width`, else continued before the word that would not fit (a long word itself continued at its
    commas, `shell_word`)."""
    one = shlex.join(words)
    if len(one) <= width:
        return one
    done, line = "", ""
    for word in words:
        if line and len(line) + 1 + len(shlex.quote(word)) > width - 2:
            done += line + CONTINUATION
            line = ""
        text = shell_word(line + " " if line else "", word, width)
        # a word continued over lines goes on on its last one
        head, sep, line = text.rpartition("\n")
        done += head + sep
    return done + line
