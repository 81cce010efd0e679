"""What every reader of a `--current` configuration shares: the result (CurrentConfig, the user's
ExistingDisk), one-line errors, QEMU's option syntax and the read-back of an axis through its
spellings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from iomatrix.domain import CACHE, CacheMode, Format, axes
from iomatrix.errors import UserError

FORMS = (
    "a libvirt domain XML file, a Proxmox 'qm config VMID' output file, a QEMU "
    "-drive/-blockdev string (e.g. "
    "'-drive file=vm.qcow2,cache=none,aio=native,if=virtio') or axes "
    "'cache=none,aio=threads,format=qcow2,"
    "bus=virtio-blk'"
)
# qemu-system-x86_64(1): "The default mode is cache=writeback"
QEMU_DEFAULT_CACHE = str(axes.get("cache").default)
QEMU_DEFAULT_AIO = str(axes.get("aio").default)


@dataclass(frozen=True)
class ExistingDisk:
    """The disk a user's configuration names, as far as it says: what the snippets change in place
    instead of creating a new, empty one. `tool` is the form it was read from (libvirt, qemu,
    proxmox); `path` the image file or block device; `device` libvirt's target dev or Proxmox's
    drive key (scsi0); `volume` Proxmox's volume id (local:100/vm-100-disk-0.qcow2) and `vmid` the
    VM's id where the file's name gives it."""

    tool: str
    path: str | None = None
    device: str | None = None
    volume: str | None = None
    vmid: str | None = None
    # a block device (libvirt type='block', QEMU host_device, a Proxmox volume with no file)
    block: bool = False
    # A disk QEMU reaches over the network (a protocol of iomatrix.protocols; issue 34): `path` is
    # then its URL (iscsi://HOST:PORT/IQN/LUN, nfs://HOST/EXPORT/FILE) where the configuration gives
    # it.
    protocol: str | None = None
    # The disk's own settings as the user's file writes them, which the snippets edit rather than
    # rewrite, so what the sweep did not measure (device address, serial, boot order, IOThread, …)
    # stays as it is (issue 49): Proxmox's drive property string
    # ('local-lvm:vm-101-disk-0,iothread=1,size=32G'), libvirt's <disk> element.
    settings: str | None = None
    # Proxmox: the VM's 'boot:' value and its drive keys (space-separated), for a slot that must
    # change.
    boot: str | None = None
    slots: str | None = None

    @property
    def network(self) -> bool:
        return self.protocol is not None

    def as_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items() if v not in (None, False)}

    @classmethod
    def from_dict(cls, raw: dict[str, str]) -> ExistingDisk:
        return cls(
            tool=raw["tool"],
            path=raw.get("path"),
            device=raw.get("device"),
            volume=raw.get("volume"),
            vmid=raw.get("vmid"),
            block=raw.get("block") == "True",
            protocol=raw.get("protocol"),
            settings=raw.get("settings"),
            boot=raw.get("boot"),
            slots=raw.get("slots"),
        )


@dataclass
class CurrentConfig:
    """Axes of today's configuration (only those known), where they came from, and what was
    defaulted."""

    axes: dict[str, str]
    source: str
    defaulted: list[str] = field(default_factory=list)
    # The qcow2 L2 cache bound the configuration sets (bytes), when it sets one: the image it is for
    # is not in the configuration, so `recommend` checks it against the image each workload ran on
    # (axes.l2_cache_holds).
    l2_cache_bytes: int | None = None
    # how a value was read (an L2 cache size as l2_cache=…)
    notes: list[str] = field(default_factory=list)
    # The user's existing disk (None for plain axes): snippets then change it rather than create a
    # new one.
    disk: ExistingDisk | None = None

    @property
    def protocol(self) -> str | None:
        """The network protocol of the user's disk (iomatrix.protocols), None for a local one or
        unknown."""
        return self.disk.protocol if self.disk is not None else None

    def label(self) -> str:
        return " ".join(f"{a.name}={self.axes[a.name]}" for a in axes.axes() if a.name in self.axes)


def _bad(field_name: str, value: str, accepted: str) -> UserError:
    # a short excerpt of the field only: the file is the user's, and an error never shows more of it
    shown = value if len(value) <= 40 else value[:39] + "…"
    return UserError(f"--current: cannot read {field_name} '{shown}'", hint=f"accepted: {accepted}")


def _value(axis: str, field_name: str, value: str) -> str:
    """`value` if it is one of the axis's values, else a one-line error listing them."""
    if axes.get(axis).invalid(value):
        raise _bad(field_name, value, axes.get(axis).choices())
    return value


def _choices(values: list[str]) -> str:
    """'a, b or c'."""
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else "".join(values)


def _split_opts(text: str) -> list[tuple[str, str]]:
    """QEMU key=value,key=value (',,' is a literal comma)."""
    parts, cur, i = [], "", 0
    while i < len(text):
        if text[i] == "," and text[i + 1 : i + 2] == ",":
            cur += ","
            i += 2
            continue
        if text[i] == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += text[i]
        i += 1
    parts.append(cur)
    out = []
    for p in parts:
        if not p:
            continue
        k, sep, v = p.partition("=")
        if not sep:
            raise _bad("option", p, "key=value pairs separated by commas; " + FORMS)
        out.append((k.strip(), v.strip()))
    return out


def _onoff(key: str, value: str) -> bool:
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise _bad(key, value, "on or off")


def cache_from_switches(direct: bool, write_cache: bool, no_flush: bool) -> CacheMode:
    for mode, sem in CACHE.items():
        if (sem.direct, sem.write_cache, sem.no_flush) == (direct, write_cache, no_flush):
            return mode
    raise UserError(
        "--current: no QEMU cache mode has cache.direct/write-cache/cache.no-flush = "
        f"{direct}/{write_cache}/{no_flush}",
        hint="see the cache table in 'iomatrix' docs/design.md",
    )


def _read_back(
    spelled: dict[str, axes.Options],
    given: Callable[[str], str | None],
    field_name: Callable[[str], str],
) -> str | None:
    """The value whose options (`spelled`: value → KEY=VALUE pairs) all match what is `given`, the
    most specific one where several do; None when none of the keys is given; a one-line error when
    some are given but no value matches."""
    keys = list(dict.fromkeys(k for options in spelled.values() for k, _ in options))
    present = [k for k in keys if given(k)]
    if not present:
        return None
    matching = [
        v
        for v, options in spelled.items()
        if options and all(given(k) == val for k, val in options)
    ]
    if not matching:
        key = present[0]
        accepted = list(
            dict.fromkeys(val for options in spelled.values() for k, val in options if k == key)
        )
        raise _bad(field_name(key), given(key) or "", _choices(accepted))
    return max(matching, key=lambda v: len(spelled[v]))


def _set_l2_cache(cfg: CurrentConfig, cache_bytes: int, option: str) -> None:
    """Record an L2 cache bound the configuration sets, and the l2_cache value it reads as (only for
    qcow2, the only format with an L2 cache; a format the configuration does not name may be
    qcow2)."""
    if cfg.axes.get("format", Format.QCOW2.value) != Format.QCOW2.value:
        return
    value, note = axes.l2_cache_read_back(cache_bytes, option)
    cfg.l2_cache_bytes = cache_bytes
    if value != axes.get("l2_cache").default:
        cfg.axes["l2_cache"] = value
    cfg.notes.append(note)
