"""What a `--current` answer changes on the user's disk: only what the sweep measured (issue 49).

A sweep answers the axes it varied. An axis it ran at one value only (the quick plan's bus and aio,
every plan's IOThread unless it names one) says nothing about the user's own value of it: the
answer's value there is the plan's choice, not a finding. So the snippets that change the user's
disk start from the user's configuration and change only the axes the sweep varied for the answer
(`varied`); the others stay as the user has them, and one line says which and why:

    kept as you have it: bus=virtio-scsi-single, iothread=on, aio=io_uring — not measured by this sweep

Worked example: the quick plan varies format and cache (aio=threads and bus=virtio-blk only). A
Proxmox VM on scsi0 (virtio-scsi-single, iothread=1, Proxmox's default aio=io_uring, cache=none)
answered with "format=raw cache=none aio=threads bus=virtio-blk" keeps bus, IOThread, aio and
Proxmox's zero detection: the configuration the snippets set is "format=raw cache=none aio=io_uring
bus=virtio-scsi-single detect_zeroes=on iothread=on", i.e. `qm disk move` to raw and no change to
the drive's options.

Where QEMU would refuse the user's value beside a measured one (aio=native needs O_DIRECT, so not
with a measured cache=writeback), that one axis takes the answer's value and the reason is said."""  # noqa: E501

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from iomatrix.domain import axes
from iomatrix.errors import UserError
from iomatrix.vmconfig.config import DiskConfig

KEPT_REASON = "not measured by this sweep"


@dataclass(frozen=True)
class Kept:
    """The answer as the user's disk takes it: `config` (the answer, with the axes the sweep did not
    vary at the user's values), `kept` ((axis, the user's value) where the answer's value was
    another), `forced` (an axis the sweep did not vary that changes all the same, and why)."""

    config: DiskConfig
    kept: tuple[tuple[str, str], ...] = ()
    forced: tuple[str, ...] = ()

    def line(self) -> str:
        """One line: what was kept and why ('' when nothing was)."""
        out = ""
        if self.kept:
            out = (
                f"kept as you have it: {', '.join(f'{a}={v}' for a, v in self.kept)} — "
                f"{KEPT_REASON}"
            )
        if self.forced:
            out += ("; " if out else "") + "; ".join(self.forced)
        return out


def user_value(current: Mapping[str, str], name: str) -> str | None:
    """The user's value of axis `name`: as read, else (a later axis their configuration leaves out)
    its default, which is what QEMU runs; None for a first-release axis the configuration does not
    say (libvirt without <driver type=> names no format)."""
    if name in current:
        return current[name]
    axis = axes.get(name)
    return None if axis.always_named else str(axis.default)


def _keepable() -> list[str]:
    """The axes a VM's configuration spells (the host-side modifier and the network's axes are no
    drive option)."""
    return [a.name for a in axes.plan_axes() if a.tools and not a.free_values]


def changed_axes(cfg: DiskConfig, current: Mapping[str, str]) -> dict[str, str]:
    """The axes whose value in `cfg` is not the user's (an axis the user's configuration does not
    say included): axis → the new value, in registry order."""
    values = cfg.values
    return {
        name: values[name]
        for name in _keepable()
        if name in values and user_value(current, name) != values[name]
    }


def keep_unmeasured(cfg: DiskConfig, current: Mapping[str, str], varied: Collection[str]) -> Kept:
    """`cfg` with every axis the sweep did not vary (`varied`: the axes measured at more than one
    value for the answer) at the user's value (`current`: the axes their configuration reads as)."""
    values = cfg.values
    keep = {
        name: mine
        for name in _keepable()
        if name not in varied
        and name in values
        and (mine := user_value(current, name)) is not None
        and mine != values[name]
    }
    if not keep:
        return Kept(cfg)
    try:
        return Kept(_with(cfg, keep), tuple(keep.items()))
    except UserError as refused:
        # QEMU refuses one of the user's values beside the answer's: that axis takes the answer's
        # value.
        for name in keep:
            rest = {k: v for k, v in keep.items() if k != name}
            try:
                merged = _with(cfg, rest)
            except UserError:
                continue
            return Kept(
                merged,
                tuple(rest.items()),
                (f"{name} changes to {values[name]} all the same: {refused.message}",),
            )
        return Kept(cfg, (), (f"nothing kept: {refused.message}",))


def _with(cfg: DiskConfig, values: Mapping[str, str]) -> DiskConfig:
    """`cfg` with `values` (the user's): an axis kept is theirs, no longer an assumed default."""
    return DiskConfig(
        values={**cfg.values, **values},
        backing=cfg.backing,
        assumed=tuple(a for a in cfg.assumed if a not in values),
    )
