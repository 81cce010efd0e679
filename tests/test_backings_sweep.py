"""Issue 6 end to end: ext4/xfs/btrfs on loop devices, a loop block device, a plain directory and
tmpfs, two cache modes, both tiers; LVM/ZFS pruned with the reason; nothing left mounted or
attached."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from iomatrix.backing.spec import tmpfs_accepts_o_direct
from tests.conftest import needs, requires_root, run_cli

pytestmark = [
    pytest.mark.slow,
    requires_root,
    needs("qemu-system-x86_64"),
    needs("mkfs.xfs"),
    needs("mkfs.btrfs"),
]

PLAN = """
tier = ["baremetal", "guest"]
format = ["raw"]
cache = ["none", "writeback"]
workloads = ["rand-write-4k"]
size = "32M"
image_size = "96M"
runtime = 0.2  # every backing runs and is recorded: the figures themselves are not checked
# No sync + drop of the host's caches before each of the 24 runs: no figure is checked, and the
# sweeps of test_verdict, test_guest_sweep and most others still drop them
keep_caches_warm = true
null_ceiling = false
run_timeout = 120
retry_disturbed = false  # a retry of a run the loaded host disturbed is a TCG boot more, and no figure is checked
[repetitions]
min = 1
max = 1
[[backing]]
type = "dir"
[[backing]]
type = "loopfs"
fs = "ext4"
size = "256M"
[[backing]]
type = "loopfs"
fs = "xfs"
size = "320M"
mount_options = ["noatime"]
[[backing]]
type = "loopfs"
fs = "btrfs"
size = "256M"
[[backing]]
type = "blockdev"
device = "{device}"
[[backing]]
type = "tmpfs"
size = "256M"
[[backing]]
type = "lvm"
vg = "iomatrix-no-such-vg"
size = "1G"
[[backing]]
type = "zfs"
pool = "iomatrix-no-such-pool"
kind = "dataset"
"""  # noqa: E501


def _ours(text: str, marker: str) -> list[str]:
    return [line for line in text.splitlines() if marker in line]


def test_backings_in_both_tiers(tmp_path: Path) -> None:
    img = tmp_path / "handed-over.img"
    img.write_bytes(b"")
    subprocess.run(["truncate", "-s", "192M", str(img)], check=True)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(img)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        (tmp_path / "p.toml").write_text(PLAN.replace("{device}", dev))
        proc = run_cli(
            "run",
            "p.toml",
            "--db",
            "r.sqlite",
            "--accel",
            "tcg",
            "--allow-destroy",
            dev,
            cwd=tmp_path,
            timeout=1500,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
        doc = json.loads(
            run_cli("results", "--db", "r.sqlite", "--format", "json", cwd=tmp_path).stdout
        )
        sweep = doc["sweeps"][0]
        seen = {
            (c["axes"]["tier"], c["axes"]["backing"], c["axes"]["cache"]): c for c in sweep["cells"]
        }
        labels = {"dir", "ext4-loop", "xfs-loop(noatime)", "btrfs-loop", f"blockdev:{dev}"}
        for tier in ("baremetal", "guest"):
            for label in labels:
                for cache in ("none", "writeback"):
                    cell = seen.get((tier, label, cache))
                    assert cell is not None and cell["ok_runs"] == 1, (tier, label, cache)
                    # the backing is in every result
                    assert cell["backing"]["backing_label"] == label
            assert seen[(tier, "tmpfs", "writeback")]["ok_runs"] == 1
            # Linux ≥ 6.6: tmpfs opens with O_DIRECT, so cache=none runs
            if tmpfs_accepts_o_direct():
                assert seen[(tier, "tmpfs", "none")]["ok_runs"] == 1
            else:
                assert (tier, "tmpfs", "none") not in seen  # O_DIRECT pruned on tmpfs
        fs_types = {
            seen[("baremetal", lab, "none")]["backing"].get("fs_type")
            for lab in ("ext4-loop", "xfs-loop(noatime)", "btrfs-loop")
        }
        assert fs_types == {"ext4", "xfs", "btrfs"}
        assert (
            "noatime"
            in seen[("baremetal", "xfs-loop(noatime)", "none")]["backing"][
                "mount_options_effective"
            ]
        )
        reasons = " ".join(p["reason"] for p in sweep["pruned"])
        assert "lvm:iomatrix-no-such-vg" in reasons and "zfs:" in reasons
        assert ("tmpfs" in reasons and "O_DIRECT" in reasons) is not tmpfs_accepts_o_direct()
        # nothing left behind by iomatrix: only the test's own loop device is attached
        workdir = str((tmp_path / "iomatrix-work").resolve())
        assert (
            _ours(subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout, workdir)
            == []
        )
        assert _ours(Path("/proc/self/mountinfo").read_text(), workdir) == []
        assert run_cli("clean", cwd=tmp_path).stdout.startswith("nothing left behind")
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
