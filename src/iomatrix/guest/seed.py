"""A NoCloud seed: the `cidata` ISO a real guest reads its first-boot set-up from (meta-data,
user-data); and the tools ISO that brings iomatrix's static fio to an image without one.

cloud-init reads it in images that carry cloud-init; the Debian image built here reads it with its
own small unit (`debian/iomatrix-seed`: the hostname from meta-data, a user-data script run once).
The ISO is made with xorriso (Debian's package of that name) and attached read-only as a virtio disk
(`seed_args`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.hostcmd import require
from iomatrix.qemu_block import qemu_opt

SEED_LABEL = "cidata"  # the volume label NoCloud looks for
SEED_SERIAL = "iomx-seed"
TOOLS_LABEL = "IOMX_TOOLS"
TOOLS_SERIAL = "iomx-tools"


def meta_data(instance_id: str, hostname: str) -> str:
    return f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n"


def write_seed(path: Path, instance_id: str, hostname: str, user_data: str) -> Path:
    """Write the seed ISO at `path` (its files staged beside it, removed after)."""
    return _write_iso(
        path,
        SEED_LABEL,
        {"meta-data": meta_data(instance_id, hostname).encode(), "user-data": user_data.encode()},
        "the NoCloud seed",
    )


def write_tools(path: Path, fio: Path) -> Path:
    """Write the tools ISO at `path`: iomatrix's static fio, for an image that has no fio of its own
    (no network is needed: the guest mounts the disk read-only, found by its serial)."""
    return _write_iso(
        path, TOOLS_LABEL, {"fio": fio.read_bytes()}, "the tools disk", executable={"fio"}
    )


def _write_iso(
    path: Path,
    label: str,
    files: dict[str, bytes],
    what: str,
    executable: frozenset[str] | set[str] = frozenset(),
) -> Path:
    xorriso = require("xorriso")
    stage = Path(tempfile.mkdtemp(prefix=".iso-", dir=path.parent))
    try:
        for name, data in files.items():
            (stage / name).write_bytes(data)
            (stage / name).chmod(0o755 if name in executable else 0o644)
        res = subprocess.run(
            [
                xorriso,
                "-as",
                "mkisofs",
                "-quiet",
                "-V",
                label,
                "-J",
                "-r",
                "-o",
                str(path),
                str(stage),
            ],
            capture_output=True,
            text=True,
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"xorriso could not write {what} {path}: {last}", hint="is there room in the workdir?"
        )
    return path


def read_only_disk_args(path: Path, node: str, serial: str) -> list[str]:
    """`path` as a read-only raw virtio-blk disk with `serial` (what the guest finds it by)."""
    return [
        "-blockdev",
        f"driver=raw,node-name={node},read-only=on,file.driver=file,"
        f"file.filename={qemu_opt(path)},file.read-only=on",
        "-device",
        f"virtio-blk-pci,drive={node},serial={serial}",
    ]


def seed_args(path: Path, node: str = "seed") -> list[str]:
    """The seed as a read-only virtio-blk disk (the guest finds it by its label, not by its
    place)."""
    return read_only_disk_args(path, node, SEED_SERIAL)


def tools_args(path: Path, node: str = "tools") -> list[str]:
    """The tools ISO as a read-only virtio-blk disk; the guest finds it as
    /dev/disk/by-id/virtio-iomx-tools."""
    return read_only_disk_args(path, node, TOOLS_SERIAL)
