"""The image a plan's `[guest] image` names, resolved once per sweep: what to boot, and what every
run records.

- `image = "debian"`: the Debian image `iomatrix guest build debian` makes (built now if it is not
  cached).
- `image = "PATH"`: a qcow2 or raw file. The file is only read (its sha256, `qemu-img info
  --force-share`) and booted through an overlay (`guest.realboot`), never written. An image built
  here (an `image.json` with the same sha256 beside it) boots its kernel directly; any other boots
  through the firmware and its own boot loader, and must run qemu-guest-agent.

A user's image for another architecture (an arm64 cloud image handed to this x86-64 QEMU) would
only sit at the firmware until the boot's time limit: where its GPT says so, it is refused at once
with one line (`image_architecture`: the root partition's type GUID of the Discoverable Partitions
Specification, which Debian's cloud images use; an image whose partitions do not say is booted).
"""

from __future__ import annotations

import json
import struct
import subprocess
import tempfile
import uuid
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


# The architecture the guest's QEMU emulates (realboot: qemu-system-x86_64), and what it boots
# (a 32-bit x86 image runs there too).
GUEST_ARCH = "x86-64"
BOOTS_ON_GUEST_ARCH = frozenset({"x86-64", "x86"})
# Root partition type GUIDs (and x86-64's /usr) of the UAPI Discoverable Partitions Specification
# (uapi-group.org/specifications/specs/discoverable_partitions_specification), by architecture.
ROOT_PARTITION_ARCH = {
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "x86-64",
    "8484680c-9521-48c6-9c11-b0720656f69e": "x86-64",  # /usr
    "44479540-f297-41b2-9af7-d131d5f0458a": "x86",
    "b921b045-1df0-41c3-af44-4c6f280d3fae": "arm64",
    "69dad710-2ce4-4e3c-b16c-21a1d49abed3": "arm",
}
SECTOR = 512
# The protective MBR, the GPT header and 128 entries of 128 bytes: what `qemu-img dd` reads.
GPT_SECTORS = 2 + 128 * 128 // SECTOR


def gpt_architectures(head: bytes) -> set[str]:
    """The architectures the root partition types of a GPT name (`head`: the disk's first
    GPT_SECTORS sectors); empty when there is no GPT or none of its types names one."""
    if head[SECTOR : SECTOR + 8] != b"EFI PART":
        return set()
    entries_lba, count, entry_size = struct.unpack_from("<QII", head, SECTOR + 72)
    found = set()
    for i in range(min(count, 128)):
        at = entries_lba * SECTOR + i * entry_size
        if entry_size < 16 or at + 16 > len(head):
            break
        arch = ROOT_PARTITION_ARCH.get(str(uuid.UUID(bytes_le=head[at : at + 16])))
        if arch is not None:
            found.add(arch)
    return found


def image_architecture(path: Path, fmt: str) -> set[str]:
    """What the image's GPT says of its architecture (`gpt_architectures`), read through `qemu-img
    dd` with a shared lock (a qcow2's guest sectors, not its file's): the file is only read."""
    with tempfile.TemporaryDirectory(prefix="iomatrix-gpt-") as tmp:
        out = Path(tmp) / "head.raw"
        res = subprocess.run(
            [
                require("qemu-img"),
                "dd",
                "-U",
                "-f",
                fmt,
                "-O",
                "raw",
                f"bs={SECTOR}",
                f"count={GPT_SECTORS}",
                f"if={path}",
                f"of={out}",
            ],
            capture_output=True,
            text=True,
        )
        # too small to hold a GPT, or unreadable: nothing said (the boot then tells)
        return gpt_architectures(out.read_bytes()) if res.returncode == 0 else set()


def check_architecture(path: Path, fmt: str) -> None:
    """One line when the image's partitions say it is for another architecture than the guest's."""
    archs = image_architecture(path, fmt)
    if archs and not archs & BOOTS_ON_GUEST_ARCH:
        raise UserError(
            f"guest image {path} is an {'/'.join(sorted(archs))} image (its root partition's "
            f"GPT type), and the guest runs {GUEST_ARCH} (qemu-system-x86_64)",
            hint="give the image's amd64 (x86-64) build",
        )


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
    check_architecture(path, fmt)
    sha = sha256_of(path)
    built = load_image(path.parent) if path.name == "image.qcow2" else None
    if built is not None and built.sha256 == sha and path.resolve() == built.qcow2.resolve():
        return _from_built(built, f"built here, given by path ({path})")
    return RealImage(BootImage(path.resolve(), fmt), sha, f"the user's image {path}")
