"""A NoCloud seed: the `cidata` ISO a real guest reads its first-boot set-up from (meta-data, user-data).

cloud-init reads it in images that carry cloud-init; the Debian image built here reads it with its own small unit
(`debian/iomatrix-seed`: the hostname from meta-data, a user-data script run once). The ISO is made with xorriso
(Debian's package of that name) and attached read-only as a virtio disk (`seed_args`).
"""

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


def meta_data(instance_id: str, hostname: str) -> str:
    return f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n"


def write_seed(path: Path, instance_id: str, hostname: str, user_data: str) -> Path:
    """Write the seed ISO at `path` (its files staged beside it, removed after)."""
    xorriso = require("xorriso")
    stage = Path(tempfile.mkdtemp(prefix=".seed-", dir=path.parent))
    try:
        (stage / "meta-data").write_text(meta_data(instance_id, hostname))
        (stage / "user-data").write_text(user_data)
        res = subprocess.run([xorriso, "-as", "mkisofs", "-quiet", "-V", SEED_LABEL, "-J", "-r", "-o", str(path),
                              str(stage)], capture_output=True, text=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"xorriso could not write the NoCloud seed {path}: {last}",
                        hint="is there room in the workdir?")
    return path


def seed_args(path: Path, node: str = "seed") -> list[str]:
    """The seed as a read-only virtio-blk disk (the guest finds it by its label, not by its place)."""
    return ["-blockdev", f"driver=raw,node-name={node},read-only=on,file.driver=file,"
                         f"file.filename={qemu_opt(path)},file.read-only=on",
            "-device", f"virtio-blk-pci,drive={node},serial={SEED_SERIAL}"]
