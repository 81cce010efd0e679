"""The image a plan's `[guest] image` names, resolved once per sweep: what to boot, and what every
run records.

- `image = "debian"`: the Debian image `iomatrix guest build debian` makes (built now if it is not
  cached).
- `image = "PATH"`: a qcow2 or raw file. The file is only read (its sha256, `qemu-img info
  --force-share`) and booted through an overlay (`guest.realboot`), never written. An image built
  here (an `image.json` with the same sha256 beside it) boots its kernel directly; any other boots
  through the firmware and its own boot loader, and must run qemu-guest-agent.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.guest.debian_image import DebianImage, ensure_debian_image, load_image, sha256_of
from iomatrix.guest.realboot import BootImage
from iomatrix.hostcmd import require

BUILT_IMAGE = "debian"


@dataclass(frozen=True)
class RealImage:
    boot: BootImage
    sha256: str
    source: str  # where it comes from
    distribution: str = ""  # empty until read from the guest (a user's image)
    kernel_version: str = ""

    def as_metadata(self) -> dict:
        return {
            "image": str(self.boot.path),
            "image_format": self.boot.format,
            "image_sha256": self.sha256,
            "image_source": self.source,
            "distribution": self.distribution,
            "kernel_version": self.kernel_version,
            "boot": "direct kernel"
            if self.boot.kernel is not None
            else "firmware and the image's boot loader",
        }

    def with_guest_facts(self, distribution: str, kernel_version: str) -> RealImage:
        return replace(
            self,
            distribution=self.distribution or distribution,
            kernel_version=self.kernel_version or kernel_version,
        )


def _from_built(img: DebianImage, source: str) -> RealImage:
    return RealImage(img.boot_image(), img.sha256, source, img.distribution, img.kernel_version)


def image_format(path: Path) -> str:
    """qcow2 or raw, from `qemu-img info` (shared lock: a VM using the file is not disturbed)."""
    res = subprocess.run(
        [require("qemu-img"), "info", "--force-share", "--output=json", str(path)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest image {path} cannot be read: {last}", hint="give a readable qcow2 or raw image"
        )
    info = json.loads(res.stdout)
    fmt = info.get("format")
    if fmt not in ("qcow2", "raw"):
        raise UserError(
            f"guest image {path} is {fmt}, not qcow2 or raw",
            hint="convert it with qemu-img convert",
        )
    if info.get("backing-filename"):
        raise UserError(
            f"guest image {path} has a backing file ({info['backing-filename']})",
            hint="give a standalone image (qemu-img convert -O qcow2 flattens it)",
        )
    return str(fmt)


def resolve_image(setting: str, log: Callable[[str], None] | None = None) -> RealImage:
    if setting == BUILT_IMAGE:
        return _from_built(ensure_debian_image(log=log), "built here (iomatrix guest build debian)")
    path = Path(setting).expanduser()
    if not path.is_file():
        raise UserError(
            f"guest image {path} does not exist",
            hint='give the path of a qcow2 or raw image, or image = "debian" for the one '
            "iomatrix builds",
        )
    fmt = image_format(path)
    sha = sha256_of(path)
    built = load_image(path.parent) if path.name == "image.qcow2" else None
    if built is not None and built.sha256 == sha and path.resolve() == built.qcow2.resolve():
        return _from_built(built, f"built here, given by path ({path})")
    return RealImage(BootImage(path.resolve(), fmt), sha, f"the user's image {path}")
