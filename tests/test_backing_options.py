"""mkfs/mount options are an allowlist per filesystem; bad backing fields are one-line errors."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.provision import provision
from iomatrix.backing.spec import parse_backing
from iomatrix.errors import UserError
from tests.conftest import root_only, run_cli

SCRATCH = Path("/tmp/iomx-backing")


def _loopfs(
    fs: str, mkfs: list[str] | None = None, mount: list[str] | None = None, size: str = "1G"
) -> dict:
    return {
        "type": "loopfs",
        "fs": fs,
        "size": size,
        "mkfs_options": mkfs or [],
        "mount_options": mount or [],
    }


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        # the findings of issue #14: each named another device
        (_loopfs("btrfs", ["-f", "/dev/loop7"]), "names a path or device"),
        (_loopfs("xfs", ["-l", "logdev=/dev/loop7"]), "names a path or device"),
        (_loopfs("xfs", ["-r", "rtdev=/dev/loop7"]), "'-r' is not allowed"),
        (_loopfs("ext4", ["-J", "device=/dev/loop7"]), "names a path or device"),
        (_loopfs("ext4", ["-d", "/etc"]), "'-d' is not allowed"),
        (_loopfs("btrfs", ["--rootdir=/etc"]), "'--rootdir' is not allowed"),
        (_loopfs("xfs", ["-p", "proto"]), "'-p' is not allowed"),
        (_loopfs("xfs", ["-d", "file=1,name=x"]), "'-d file' is not allowed"),
        (_loopfs("ext4", ["-b"]), "needs a value"),
        (_loopfs("ext4", ["-L", "a b"]), "characters other than"),
        (_loopfs("xfs", mount=["logdev=/dev/loop7"]), "names a path or device"),
        (_loopfs("xfs", mount=["rtdev=/dev/loop7"]), "names a path or device"),
        (_loopfs("btrfs", mount=["device=/dev/loop7"]), "names a path or device"),
        (_loopfs("ext4", mount=["journal_path=/dev/loop7"]), "names a path or device"),
        (_loopfs("ext4", mount=["noatime,journal_dev=7"]), "one option per item"),
        (_loopfs("ext4", mount=["data=/x"]), "names a path or device"),
        (_loopfs("ext4", mount=["bogus"]), "'bogus' is not allowed for ext4"),
        ({"type": "dir", "name": "null"}, "reserved for the null ceiling"),
        ({"type": "tmpfs", "size": "1G", "name": "NULL"}, "reserved for the null ceiling"),
        ({"type": "dir", "path": "/proc"}, "kernel interface"),
        ({"type": "dir", "path": "/sys/kernel"}, "kernel interface"),
        ({"type": "dir", "path": "/dev/shm/../../proc/self"}, "kernel interface"),
        (_loopfs("ext4", size="1" * 400 + "G"), "bad size"),
        ({"type": "tmpfs", "size": int("9" * 400)}, "larger than"),
        ({"type": "tmpfs", "size": "2000000000T"}, "larger than"),
    ],
)
def test_refused_at_plan_load_with_one_line(table: dict, needle: str) -> None:
    with pytest.raises(UserError) as err:
        parse_backing(table)
    msg = err.value.one_line()
    assert needle in msg and "\n" not in msg and "Traceback" not in msg, msg


TUNING = [
    _loopfs(
        "ext4",
        ["-O", "^has_journal", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-b", "4096"],
        ["noatime", "nodelalloc"],
    ),
    _loopfs(
        "ext4",
        ["-j", "-J", "size=4", "-L", "bench", "-m", "0"],
        ["noatime", "commit=60", "data=writeback"],
    ),
    _loopfs(
        "xfs",
        ["-m", "crc=1,reflink=0", "-i", "size=512", "-f"],
        ["noatime", "logbufs=8", "inode64"],
    ),
    _loopfs(
        "btrfs",
        ["-d", "single", "-m", "single", "--csum", "xxhash"],
        ["noatime", "compress=zstd:1"],
    ),
]


@pytest.mark.parametrize("table", TUNING)
def test_common_tuning_is_accepted(table: dict) -> None:
    parse_backing(table)


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="opts-", dir=SCRATCH))
    yield d
    leftovers.clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("index", range(4))
@root_only
def test_accepted_options_really_format_and_mount(workdir: Path, index: int) -> None:
    # the allowlist names real options: real mkfs and mount take them
    table = dict(TUNING[index])
    table["size"] = "300M" if table["fs"] == "xfs" else "128M"
    spec = parse_backing(table)
    with provision(spec, workdir, set()) as h:
        (h.path / "probe").write_bytes(b"x" * 4096)
        for opt in table["mount_options"]:
            assert opt.split("=")[0] in h.metadata["mount_options_effective"] or opt == "inode64"


@root_only
def test_loop_image_larger_than_free_space_is_refused_with_the_arithmetic(workdir: Path) -> None:
    spec = parse_backing(_loopfs("ext4", size="999T"))
    with pytest.raises(UserError) as err, provision(spec, workdir, set()):
        pass
    msg = err.value.one_line()
    assert "999T" in msg and "larger than the free space" in msg and f"{999 << 40} >" in msg
    assert leftovers.pending(workdir) == []
    assert not any((workdir / "backings").iterdir()) if (workdir / "backings").exists() else True


@root_only
def test_plan_naming_a_victim_device_is_refused_before_anything_runs(tmp_path: Path) -> None:
    image = tmp_path / "victim.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    victim = subprocess.run(
        ["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", victim], check=True, capture_output=True)
        before = hashlib.sha256(Path(victim).read_bytes()).hexdigest()
        for fs, opts in (
            ("btrfs", f'mkfs_options = ["-f", "{victim}"]'),
            ("xfs", f'mkfs_options = ["-l", "logdev={victim}"]'),
        ):
            (tmp_path / "p.toml").write_text(f"""
tier = ["baremetal"]
workloads = ["rand-write-4k"]
size = "16M"
runtime = 0.3
[[backing]]
type = "loopfs"
fs = "{fs}"
size = "300M"
{opts}
""")
            proc = run_cli(
                "run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path, timeout=120
            )
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert "mkfs_options" in proc.stderr and "Traceback" not in proc.stderr
            assert proc.stderr.startswith("error:") and proc.stderr.count("error:") == 1, (
                proc.stderr
            )
        assert hashlib.sha256(Path(victim).read_bytes()).hexdigest() == before
    finally:
        subprocess.run(["losetup", "-d", victim], check=False)
