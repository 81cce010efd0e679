"""Disk images under test (a guest's disk, the block layer's image, a file on an NFS export):
created with qemu-img, removed after the run. Not in guest/: the block layer and the network
backings make images too, and a snippet or --current must not load the guest package."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

from iomatrix import domain
from iomatrix.domain import Format, Preallocation
from iomatrix.errors import UserError
from iomatrix.hostcmd import require
from iomatrix.qemu_block import is_block_device, qemu_opt


def create_image_argv(
    path: Path,
    fmt: str,
    preallocation: str,
    size_bytes: int,
    options: Sequence[tuple[str, str]] = (),
) -> list[str] | None:
    """The qemu-img command that creates the image, or None when nothing must be created. `options`
    are the further ``-o`` options the cell's axes set at creation (iomatrix.domain.axes:
    QemuOptions.create)."""
    if fmt not in {f.value for f in Format}:
        raise UserError(f"unknown image format '{fmt}'", hint=f"use {domain.choices(Format)}")
    on_device = is_block_device(path)
    reason = domain.preallocation_rule(fmt, preallocation, on_block_device=on_device)
    if reason:
        raise UserError(
            f"{reason} ({path})", hint="pick another preallocation; see 'iomatrix plan --explain'"
        )
    if size_bytes <= 0 or size_bytes % 512:
        raise UserError(f"image size {size_bytes} is not a positive multiple of 512 bytes")
    if on_device and fmt == Format.RAW:
        return None  # the device is used directly (driver host_device)
    argv = [require("qemu-img"), "create", "-q", "-f", fmt]
    # qed has no preallocation option at all.
    opts = [] if fmt == Format.QED else [f"preallocation={preallocation}"]
    opts += [f"{k}={qemu_opt(v)}" for k, v in options]
    if opts:
        argv += ["-o", ",".join(opts)]
    argv += [str(path), str(size_bytes)]
    return argv


def create_image(
    path: Path,
    fmt: Format | str,
    preallocation: Preallocation | str,
    size_bytes: int,
    options: Sequence[tuple[str, str]] = (),
) -> None:
    """Create an image file (or format a block device as qcow2/qed) for one guest cell.

    raw on a block device creates nothing: the device itself is the disk (host_device driver).
    """
    path = Path(path)
    argv = create_image_argv(path, fmt, preallocation, size_bytes, options)
    if argv is None:
        return
    if not is_block_device(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"qemu-img create {fmt} {path} failed: {msg}",
            hint="check free space and that the directory is writable",
        )


def remove_image(path: Path) -> None:
    """Delete an image file; a block device is left alone (its qcow2 header is overwritten next
    time)."""
    path = Path(path)
    if is_block_device(path):
        return
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
