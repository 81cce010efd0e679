"""The image a plan's `[guest] image` names, resolved once per sweep: what to boot, and what every
run records.

- `image = "debian"`: the Debian image `iomatrix guest build debian` makes (built now if it is not
  cached).
- `image = "PATH"`: a qcow2 or raw file. The file is only read (its sha256, `qemu-img info
  --force-share`) and booted through an overlay (`guest.realboot`), never written. An image built
  here (an `image.json` with the same sha256 beside it) boots its kernel directly; any other boots
  through the firmware and its own boot loader, and must run qemu-guest-agent.

Checked before any build or boot, at `plan` and again at `run` (`check_image_setting`), each
failure one line: a local regular file (not a URL, a device, a FIFO, a directory, nor anything
under /proc, /sys or /dev), not empty, readable, a qcow2 or raw image `qemu-img info` reads that
makes QEMU open no other file (a backing file, an external data file). Nothing of its content is
shown.

An image that boots through the firmware (QEMU's pc machine: SeaBIOS) must be able to: a text file,
a disk without a partition table (a bare filesystem: iomatrix's own Debian image given without its
image.json), or one whose first sector holds no boot code (`boot_problem`) would only sit at the
firmware until the boot's time limit. So would a user's image for another architecture (an arm64
cloud image handed to this x86-64 QEMU): where its GPT says so, it is refused at once
(`image_architecture`: the root partition's type GUID of the Discoverable Partitions Specification,
which Debian's cloud images use; an image whose partitions do not say is booted).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
import struct
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from iomatrix.errors import UserError
from iomatrix.guest.debian_image import DebianImage, ensure_debian_image, load_image, sha256_of
from iomatrix.guest.realboot import BootImage
from iomatrix.hostcmd import require

BUILT_IMAGE = "debian"
# qemu-img on a local file answers in well under a second; a file that blocks it (a file on a
# hung network mount) is refused in one line, not waited for.
QEMU_IMG_TIMEOUT_S = 30.0


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


def image_format(path: Path, shown: Path | None = None) -> str:
    """qcow2 or raw, from `qemu-img info` (shared lock: a VM using the file is not disturbed).

    The path is given absolute, so QEMU never reads a `name:` prefix of it as a protocol (`nbd:`,
    `json:`). An image that makes QEMU open another file, a backing file or a qcow2's external data
    file (a qcow2 backed by /etc/shadow), is refused: only the file the user named is read.
    `shown`: the path as the user wrote it, for the error lines."""
    shown = shown or path
    try:
        res = subprocess.run(
            [require("qemu-img"), "info", "--force-share", "--output=json", str(path.absolute())],
            capture_output=True,
            text=True,
            timeout=QEMU_IMG_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"guest image {shown}: qemu-img info did not answer within {QEMU_IMG_TIMEOUT_S:g} s",
            hint="give a local qcow2 or raw image file",
        ) from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"guest image {shown} cannot be read as a disk image: {_printable(last)}",
            hint="give a readable qcow2 or raw image",
        )
    info = json.loads(res.stdout)
    fmt = info.get("format")
    if fmt not in ("qcow2", "raw"):
        raise UserError(
            f"guest image {shown} is {_printable(str(fmt))}, not qcow2 or raw",
            hint="convert it with qemu-img convert",
        )
    backing = info.get("backing-filename") or info.get("full-backing-filename")
    if backing:
        raise UserError(
            f"guest image {shown} has a backing file ({_printable(str(backing))}): iomatrix reads "
            "only the file it is given",
            hint="give a standalone image (qemu-img convert -O qcow2 flattens it)",
        )
    data_file = ((info.get("format-specific") or {}).get("data") or {}).get("data-file")
    if data_file:
        raise UserError(
            f"guest image {shown} keeps its data in another file ({_printable(str(data_file))})",
            hint="give a standalone image (qemu-img convert -O qcow2 makes one)",
        )
    return str(fmt)


def _printable(text: str, limit: int = 120) -> str:
    """`text` (a path or a message QEMU gave) as one short line of printable characters: it comes
    from the user's file, and a terminal must not act on what it holds."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


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


def image_head(path: Path, fmt: str) -> bytes:
    """The disk's first GPT_SECTORS sectors as the guest sees them (a qcow2's guest sectors, not its
    file's), read through `qemu-img dd` with a shared lock: the file is only read. Shorter for a
    smaller disk; empty when it cannot be read (the boot then tells)."""
    with tempfile.TemporaryDirectory(prefix="iomatrix-gpt-") as tmp:
        out = Path(tmp) / "head.raw"
        try:
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
                    f"if={path.absolute()}",
                    f"of={out}",
                ],
                capture_output=True,
                text=True,
                timeout=QEMU_IMG_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return b""
        return out.read_bytes() if res.returncode == 0 and out.is_file() else b""


def image_architecture(path: Path, fmt: str) -> set[str]:
    """What the image's GPT says of its architecture (`gpt_architectures` of `image_head`)."""
    return gpt_architectures(image_head(path, fmt))


def check_architecture(path: Path, fmt: str, head: bytes | None = None) -> None:
    """One line when the image's partitions say it is for another architecture than the guest's."""
    archs = gpt_architectures(image_head(path, fmt) if head is None else head)
    if archs and not archs & BOOTS_ON_GUEST_ARCH:
        raise UserError(
            f"guest image {path} is an {'/'.join(sorted(archs))} image (its root partition's "
            f"GPT type), and the guest runs {GUEST_ARCH} (qemu-system-x86_64)",
            hint="give the image's amd64 (x86-64) build",
        )


# Where a bare filesystem (no partition table) shows its magic number: ext2/3/4's superblock at byte
# 1024 holds 0xEF53 at its offset 56; XFS's superblock starts the disk with 'XFSB'.
EXT_MAGIC_AT, EXT_MAGIC = 1024 + 56, b"\x53\xef"
XFS_MAGIC = b"XFSB"
# The MBR's boot code: the bytes before the disk signature and the partition entries (a boot loader
# for BIOS, GRUB's boot.img or syslinux's mbr.bin, puts its first stage here).
MBR_BOOT_CODE = 440
BOOT_HINT = (
    "give an image that boots by itself on a BIOS (QEMU's pc machine: SeaBIOS), e.g. a Debian "
    'genericcloud amd64 image, or image = "debian" for the one iomatrix builds and boots with '
    "its own kernel"
)


def boot_problem(head: bytes) -> str | None:
    """Why the guest's firmware cannot boot a disk that starts with `head` (its first sectors,
    `image_head`), or None when it may: the firmware (SeaBIOS, QEMU's pc machine) runs the boot code
    of the first sector's MBR, so a disk needs an MBR (a GPT disk has its protective one) with
    code in it. A bare filesystem has neither; iomatrix's own Debian image is one, booted with its
    kernel and initramfs (`image.json` beside it), never through the firmware.

    >>> boot_problem(bytes(4096))
    'has no partition table (no MBR or GPT in its first sectors) and so no boot loader'
    >>> boot_problem(bytes([0xFA, 0x31, 0xC0]) + bytes(507) + bytes([0x55, 0xAA]))
    """
    if len(head) < SECTOR:
        return "is smaller than one disk sector (512 bytes)"
    has_mbr = head[510:512] == b"\x55\xaa"
    has_gpt = head[SECTOR : SECTOR + 8] == b"EFI PART"
    if not has_mbr and not has_gpt:
        if head[EXT_MAGIC_AT : EXT_MAGIC_AT + 2] == EXT_MAGIC:
            return (
                "is a bare ext2/3/4 filesystem: no partition table, no boot loader (an image "
                "iomatrix built boots with its own kernel, from its cache directory beside its "
                "image.json)"
            )
        if head[:4] == XFS_MAGIC:
            return "is a bare XFS filesystem (no partition table and no boot loader)"
        return "has no partition table (no MBR or GPT in its first sectors) and so no boot loader"
    if not any(head[:MBR_BOOT_CODE]):
        return (
            "has a partition table but no boot loader (its first sector's boot code is empty: "
            "a disk made for UEFI only, or never made bootable)"
        )
    return None


def looks_like_text(head: bytes) -> bool:
    """Whether a raw file's first sectors are text (no NUL byte, printable UTF-8): a disk image's
    first sector always holds NUL bytes (an MBR's zero fields, a filesystem's padding)."""
    # qemu-img pads a raw file's last sector with zeros
    head = head.rstrip(b"\0")
    if not head or b"\0" in head:
        return False
    try:
        # not final: a character cut at the end of what was read is still text
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\n\r\f\v" for c in text)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Where no disk image lives: the kernel's views (/proc/self/mem is a "regular file" of 0 bytes) and
# device nodes (/dev/null, a disk: a guest image is a file, not a device).
NOT_IMAGE_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def checked_image_file(setting: str) -> tuple[Path, str]:
    """(the path, its format) of the user's image `setting` once it is a local, regular, non-empty,
    readable qcow2 or raw file that reads no other file; else one line saying which it is not.
    Nothing of the file's content is ever shown: only its path, size and what kind of file it is.
    Nothing is opened before its kind is known (a FIFO would block the open)."""
    if _URL.match(setting):
        parts = urlsplit(setting)
        where = f"{parts.scheme}://{_printable(parts.hostname or '')}/…"
        raise UserError(
            f"guest image {where} is a URL: iomatrix boots a local image file",
            hint="download it first (e.g. curl -o image.qcow2 URL) and give the file's path",
        )
    path = Path(setting).expanduser()
    try:
        st = os.stat(path)  # the symlink's target, as QEMU would open it
    except FileNotFoundError:
        raise UserError(
            f"guest image {path} does not exist",
            hint='give the path of a qcow2 or raw image, or image = "debian" for the one '
            "iomatrix builds",
        ) from None
    except OSError as err:
        raise UserError(
            f"guest image {path} cannot be reached: {err.strerror}",
            hint="give the path of a readable qcow2 or raw image file",
        ) from None
    kind = next((name for test, name in _KINDS if test(st.st_mode)), None)
    if kind is not None or not stat.S_ISREG(st.st_mode):
        raise UserError(
            f"guest image {path} is {kind or 'not a regular file'}, not a disk image file",
            hint="give the path of a qcow2 or raw image file",
        )
    real = path.resolve()
    for root in NOT_IMAGE_ROOTS:
        if real.is_relative_to(root):
            raise UserError(
                f"guest image {path} is under {root} ({real}), where no disk image lives",
                hint="give the path of a qcow2 or raw image file",
            )
    if st.st_size == 0:
        raise UserError(
            f"guest image {path} is empty (0 bytes)", hint="give a qcow2 or raw disk image"
        )
    if not os.access(real, os.R_OK):
        raise UserError(
            f"guest image {path} cannot be read (permission denied)",
            hint="make it readable to this user, or run as its owner",
        )
    fmt = image_format(real, path)
    return path, fmt


def check_boots(path: Path, fmt: str) -> None:
    """One line when the image cannot boot through the guest's firmware: for another architecture,
    a text file, no partition table, no boot loader (`boot_problem`)."""
    head = image_head(path, fmt)
    if fmt == "raw" and looks_like_text(head):
        raise UserError(f"guest image {path} is a text file, not a disk image", hint=BOOT_HINT)
    check_architecture(path, fmt, head)
    problem = boot_problem(head)
    if problem is not None:
        raise UserError(f"guest image {path} {problem}", hint=BOOT_HINT)


def built_beside(path: Path) -> DebianImage | None:
    """The image iomatrix built that `path` names (its image.qcow2, with image.json beside it), or
    None; its sha256 is still to be compared with the file's."""
    if path.name != "image.qcow2":
        return None
    built = load_image(path.parent)
    if built is None or path.resolve() != built.qcow2.resolve():
        return None
    return built


def check_plan_image(tiers: Sequence[str], setting: str | None) -> None:
    """`check_image_setting` for a plan that runs the guest tier (`tiers`: the plan's); a plan
    without it boots no image."""
    if "guest" in tiers:
        check_image_setting(setting)


def check_image_setting(setting: str | None) -> None:
    """The checks a plan's `[guest] image` gets at `plan` and again at `run`, before any build or
    boot: a local, regular, readable qcow2 or raw file reading no other file, that the guest's
    firmware can boot (unless iomatrix built it and boots it with its own kernel). One line
    (UserError) for the first that fails."""
    if setting is None or setting == BUILT_IMAGE:
        return
    path, fmt = checked_image_file(setting)
    if built_beside(path) is None:
        check_boots(path, fmt)


def resolve_image(setting: str, log: Callable[[str], None] | None = None) -> RealImage:
    if setting == BUILT_IMAGE:
        return _from_built(ensure_debian_image(log=log), "built here (iomatrix guest build debian)")
    path, fmt = checked_image_file(setting)
    built = built_beside(path)
    if built is None:
        check_boots(path, fmt)  # before the sha256, a read of the whole file
    sha = sha256_of(path)
    if built is not None and built.sha256 == sha:
        return _from_built(built, f"built here, given by path ({path})")
    if built is not None:
        check_boots(path, fmt)  # changed since it was built: it boots through the firmware
    return RealImage(BootImage(path.resolve(), fmt), sha, f"the user's image {path}")
