"""A plan's `[guest] image` checked at `plan` and again at `run`, before anything is built or booted
(issue 69): a URL, a missing file, a device, a FIFO, /proc/self/mem, an empty or text file, a qcow2
that reads another file, and images the firmware cannot boot (no partition table, no boot loader:
iomatrix's own Debian image without its image.json) each get one line and exit 2, naming the file,
never showing what it holds. Before, 20 such `plan` cases exited 0 with a 15-minute estimate, and
`run` sat silent until it was killed.

Real parts: the CLI, qemu-img (info, dd, create, convert), sgdisk and mkfs.ext4 for the disks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.guest.real_image import (
    boot_problem,
    check_image_setting,
    looks_like_text,
    resolve_image,
)
from tests.conftest import run_cli

# A line no output may show: it stands for a secret the file holds.
SECRET = "root:$6$not-a-real-hash:20228:0:99999:7:::"
SECTOR = 512


def _text(tmp: Path) -> Path:
    (tmp / "notes.img").write_text(SECRET + "\nsecond line\n")
    return tmp / "notes.img"


def _zero(tmp: Path) -> Path:
    (tmp / "zero.img").write_bytes(b"")
    return tmp / "zero.img"


def _raw_no_partitions(tmp: Path) -> Path:
    path = tmp / "blank.raw"
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    return path


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe.img")
    return tmp / "pipe.img"


def _symlink_to_secret(tmp: Path) -> Path:
    secret = tmp / "secret"
    secret.write_text(SECRET + "\n")
    (tmp / "link.img").symlink_to(secret)
    return tmp / "link.img"


def _backed_by_secret(tmp: Path) -> Path:
    secret = tmp / "secret"
    secret.write_text(SECRET + "\n")
    path = tmp / "backed.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(secret), "-F", "raw", str(path)],
        check=True,
    )
    return path


def _gpt_without_boot_code(tmp: Path) -> Path:
    """A GPT disk as made for UEFI: sgdisk's protective MBR holds no boot code."""
    path = tmp / "uefi-only.raw"
    with open(path, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["sgdisk", "-n", "1:2048:0", str(path)], check=True, capture_output=True)
    return path


def _bare_ext4(tmp: Path) -> Path:
    """As iomatrix's own Debian image is: an ext4 filesystem as the whole disk, in a qcow2."""
    raw = tmp / "root.raw"
    with open(raw, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(raw)], check=True)
    path = tmp / "image.qcow2"
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(path)], check=True)
    raw.unlink()
    return path


def _mbr_with_boot_code(tmp: Path) -> Path:
    """A disk a BIOS boots into: an MBR with code and one partition (what the checks ask for; what
    the boot loader then does is the boot's to tell)."""
    path = tmp / "bootable.raw"
    with open(path, "wb") as f:
        f.truncate(4 << 20)
        entry = bytes([0x80, 0, 0, 0, 0x83, 0, 0, 0]) + (2048).to_bytes(4, "little")
        entry += (4096).to_bytes(4, "little")
        f.write(b"\xfa\x31\xc0\x8e\xd8" + bytes(435) + bytes(6) + entry + bytes(48) + b"\x55\xaa")
    return path


CASES: list[tuple[str, Callable[[Path], Path | str], str]] = [
    ("missing", lambda t: t / "nope.qcow2", "does not exist"),
    ("url", lambda _t: "http://user:pw@example.com/debian.qcow2", "is a URL"),
    ("dev-null", lambda _t: "/dev/null", "is a character device, not a disk image file"),
    ("proc-self-mem", lambda _t: "/proc/self/mem", "is under /proc"),
    ("directory", lambda t: t, "is a directory"),
    ("fifo", _fifo, "is a named pipe (FIFO)"),
    ("zero-bytes", _zero, "is empty (0 bytes)"),
    ("text", _text, "is a text file, not a disk image"),
    ("symlink-to-text", _symlink_to_secret, "is a text file, not a disk image"),
    ("raw-without-partitions", _raw_no_partitions, "has no partition table"),
    ("backed-by-another-file", _backed_by_secret, "has a backing file"),
    ("gpt-without-boot-code", _gpt_without_boot_code, "has a partition table but no boot loader"),
    ("own-image-without-its-json", _bare_ext4, "is a bare ext2/3/4 filesystem"),
]


def _plan(tmp: Path, image: Path | str) -> Path:
    plan = tmp / "plan.toml"
    plan.write_text(
        'tier = ["guest"]\nworkloads = ["rand-write-4k"]\nruntime = 1\n'
        f"[guest]\nimage = {json.dumps(str(image))}\n"
    )
    return plan


@pytest.mark.parametrize(
    "make,says", [(m, s) for _n, m, s in CASES], ids=[n for n, _m, _s in CASES]
)
def test_an_unusable_guest_image_is_one_line_at_plan_and_nothing_of_it_is_shown(
    tmp_path: Path, make: Callable[[Path], Path | str], says: str
) -> None:
    if "sgdisk" in make.__name__ and shutil.which("sgdisk") is None:
        pytest.skip("sgdisk (gdisk) not installed")
    image = make(tmp_path)
    res = run_cli("plan", str(_plan(tmp_path, image)), timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: guest image "), out
    assert says in lines[0], lines[0]
    assert "estimated duration" not in out and "Traceback" not in out
    assert SECRET not in out and "$6$" not in out and "second line" not in out
    assert "pw@" not in out  # a URL's password
    with pytest.raises(UserError):  # and so at `run`, as the tier resolves it
        resolve_image(str(image))


def test_run_refuses_an_image_that_cannot_boot_before_any_build_or_wait(tmp_path: Path) -> None:
    """`run` checks again, before the database, the workdir, the guest's build and the boot: it
    used to print the accelerator line and sit silent until killed at 150 s."""
    t0 = time.monotonic()
    res = run_cli(
        "run",
        str(_plan(tmp_path, _raw_no_partitions(tmp_path))),
        "--db",
        str(tmp_path / "r.db"),
        "--workdir",
        str(tmp_path / "work"),
        timeout=60,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "has no partition table" in out and "accelerator" not in out
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "work").exists()


def test_a_disk_a_bios_boots_and_the_built_image_beside_its_json_pass(tmp_path: Path) -> None:
    bootable = _mbr_with_boot_code(tmp_path)
    check_image_setting(str(bootable))
    res = run_cli("plan", str(_plan(tmp_path, bootable)), timeout=60)
    assert res.returncode == 0 and "estimated duration" in res.stdout, res.stdout + res.stderr
    # iomatrix's own image in its cache directory boots with its kernel: no boot loader needed
    built = tmp_path / "built"
    built.mkdir()
    image = _bare_ext4(built)
    for name in ("vmlinuz", "initrd.img"):
        (built / name).write_bytes(b"k")
    meta = {"kernel_version": "6.1", "sha256": "0" * 64, "distribution": "Debian 12"}
    (built / "image.json").write_text(json.dumps(meta | {"cache_key": "k"}))
    check_image_setting(str(image))
    check_image_setting("debian")  # built (or taken from the cache) at run, not checked here
    check_image_setting(None)


def test_boot_problem_reads_the_first_sectors() -> None:
    mbr = bytearray(2 * SECTOR)
    assert boot_problem(bytes(mbr)) is not None and "no partition table" in str(boot_problem(mbr))
    mbr[510:512] = b"\x55\xaa"
    assert "no boot loader" in str(boot_problem(bytes(mbr)))
    mbr[0:3] = b"\xeb\x63\x90"  # GRUB's boot.img starts with a jump
    assert boot_problem(bytes(mbr)) is None
    assert boot_problem(b"\x55\xaa") == "is smaller than one disk sector (512 bytes)"
    ext = bytearray(4096)
    ext[1080:1082] = b"\x53\xef"
    assert "bare ext2/3/4" in str(boot_problem(bytes(ext)))
    assert "bare XFS" in str(boot_problem(b"XFSB" + bytes(4092)))


def test_text_is_told_from_a_disk_by_its_bytes() -> None:
    assert looks_like_text(b"hello\nworld\n" + bytes(500))  # qemu-img pads the last sector
    assert looks_like_text("grüße ".encode() * 100)
    assert not looks_like_text(b"\xfa\x31\xc0" + bytes(509))
    assert not looks_like_text(bytes(512))
    assert not looks_like_text(b"\xff\xfe\xfd" * 100)
