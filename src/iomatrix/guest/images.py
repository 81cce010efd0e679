"""Disk images for guest cells: created with qemu-img, removed after the cell."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path
from typing import Literal

from iomatrix.errors import UserError
from iomatrix.hostcmd import require

ImageFormat = Literal["raw", "qcow2", "qed"]
Preallocation = Literal["off", "metadata", "falloc", "full"]

# Which preallocation values each format accepts (qemu-img create -o help, QEMU 7.2).
PREALLOCATIONS: dict[str, tuple[str, ...]] = {
    "raw": ("off", "falloc", "full"),
    "qcow2": ("off", "metadata", "falloc", "full"),
    "qed": ("off",),  # qed has no preallocation option; "off" means: do not pass one
}


def is_block_device(path: Path) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def create_image_argv(path: Path, fmt: str, preallocation: str, size_bytes: int) -> list[str] | None:
    """The qemu-img command that creates the image, or None when nothing must be created."""
    if fmt not in PREALLOCATIONS:
        raise UserError(f"unknown image format '{fmt}'", hint="use raw, qcow2 or qed")
    if preallocation not in PREALLOCATIONS[fmt]:
        raise UserError(f"{fmt} images do not support preallocation={preallocation}",
                        hint=f"use one of: {', '.join(PREALLOCATIONS[fmt])}")
    if size_bytes <= 0 or size_bytes % 512:
        raise UserError(f"image size {size_bytes} is not a positive multiple of 512 bytes")
    if is_block_device(path):
        if fmt == "raw":
            return None  # the device is used directly (driver host_device)
        if preallocation not in ("off", "metadata"):
            raise UserError(f"preallocation={preallocation} makes no sense on block device {path}",
                            hint="use off or metadata")
    argv = [require("qemu-img"), "create", "-q", "-f", fmt]
    if fmt != "qed":
        argv += ["-o", f"preallocation={preallocation}"]
    argv += [str(path), str(size_bytes)]
    return argv


def create_image(path: Path, fmt: ImageFormat, preallocation: Preallocation, size_bytes: int) -> None:
    """Create an image file (or format a block device as qcow2/qed) for one guest cell.

    raw on a block device creates nothing: the device itself is the disk (host_device driver).
    """
    path = Path(path)
    argv = create_image_argv(path, fmt, preallocation, size_bytes)
    if argv is None:
        return
    if not is_block_device(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"qemu-img create {fmt} {path} failed: {msg}",
                        hint="check free space and that the directory is writable")


def remove_image(path: Path) -> None:
    """Delete an image file; a block device is left alone (its qcow2 header is overwritten next time)."""
    path = Path(path)
    if is_block_device(path):
        return
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
