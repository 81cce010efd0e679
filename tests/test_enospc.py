"""A disk image that fills its host filesystem fails the run naming ENOSPC, instead of pausing the
guest.

QEMU's default error policy (werror=enospc) stops the VM when a write to the image gets ENOSPC on
the host; the guest then never finishes and the run used to time out with no reason. The guest tier
attaches its disk with werror=report,rerror=report and names the full host filesystem; the
block-layer tier gets ENOSPC from the NBD export and names it with the same hint."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from iomatrix.domain import BUS, Aio, Bus, CacheMode, Format, Preallocation
from iomatrix.guest.cmdline import device_args
from iomatrix.qemu_block import DiskSpec, blockdev_args, out_of_space
from iomatrix.snippets import DiskConfig, qemu_argv
from tests.conftest import needs, root_only, run_cli


def _qom_werror(args: list[str]) -> tuple[str, str]:
    """Start QEMU paused with `args` (the disk device gets id=dut) and read the device's
    werror/rerror."""
    cmds = [
        {"execute": "qmp_capabilities"},
        *(
            {"execute": "qom-get", "arguments": {"path": "/machine/peripheral/dut", "property": p}}
            for p in ("werror", "rerror")
        ),
        {"execute": "quit"},
    ]
    argv = [
        "qemu-system-x86_64",
        "-S",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-machine",
        "pc",
        "-accel",
        "tcg",
        "-m",
        "64",
        "-qmp",
        "stdio",
        *args,
    ]
    res = subprocess.run(
        argv,
        input="\n".join(json.dumps(c) for c in cmds) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, f"{res.stderr}\n{argv}"
    values = [
        r["return"]
        for r in map(json.loads, res.stdout.splitlines())
        if isinstance(r.get("return"), str)
    ]
    assert len(values) == 2, res.stdout
    return values[0], values[1]


@needs("qemu-system-x86_64")
@pytest.mark.parametrize("bus", [b for b in Bus if BUS[b].error_policy])
def test_the_guest_disk_reports_errors_instead_of_pausing(bus: Bus, tmp_path: Path) -> None:
    image = tmp_path / "d.raw"
    image.write_bytes(b"\0" * (1 << 20))
    disk = DiskSpec(str(image), "raw", CacheMode.WRITEBACK, Aio.THREADS, bus)
    dev = device_args(disk)
    dev[-1] += ",id=dut"
    assert _qom_werror(blockdev_args(disk) + dev) == ("report", "report")


@needs("qemu-system-x86_64")
def test_nvme_has_no_error_policy_and_gets_none() -> None:
    # QEMU 7.2's nvme device completes failed requests with an error status itself (no werror
    # property).
    out = subprocess.run(
        ["qemu-system-x86_64", "-device", "nvme,help"], capture_output=True, text=True, timeout=60
    )
    assert "werror" not in out.stdout
    assert "werror" not in device_args(DiskSpec("/x.raw", "raw", bus=Bus.NVME))[-1]


def test_snippets_keep_qemus_default_error_policy() -> None:
    # A user's VM should pause on a full thin pool (QEMU's default), not fail the guest's writes.
    argv = qemu_argv(
        DiskConfig(Format.RAW, Preallocation.OFF, CacheMode.NONE, Aio.THREADS, Bus.VIRTIO_BLK)
    )
    assert not any("werror" in a for a in argv)


def test_out_of_space_only_for_a_full_filesystem(tmp_path: Path) -> None:
    assert out_of_space(tmp_path / "roomy.raw") is None
    assert out_of_space(None) is None


@root_only
def test_out_of_space_names_a_full_tmpfs(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "iomatrix-test-full", str(mnt)], check=True
    )
    try:
        with open(mnt / "fill", "wb") as f, pytest.raises(OSError):
            f.write(b"\1" * (2 << 20))
        why = out_of_space(mnt / "disk.qcow2")
        assert why is not None and "ENOSPC" in why and "0 bytes free" in why
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


PLAN = """
tier = ["{tier}"]
format = ["raw"]
cache = ["writeback"]
workloads = ["seq-write-1m"]
size = "32M"
runtime = 3
run_timeout = 120
null_ceiling = false
[repetitions]
min = 1
max = 1
[[backing]]
type = "tmpfs"
size = "48M"
"""


def fill_when_mounted(work: Path, stop: threading.Event, leave: int = 4 << 20) -> None:
    """Fill the sweep's tmpfs once it is mounted under `work`, leaving `leave` bytes: the plan fits
    when checked, and its first run then fills the host filesystem in the middle of the run."""
    from iomatrix.mountinfo import parse_mountinfo

    while not stop.is_set():
        mounts = [
            m["mountpoint"]
            for m in parse_mountinfo()
            if m["fstype"] == "tmpfs" and m["mountpoint"].startswith(str(work) + "/")
        ]
        if mounts:
            st = os.statvfs(mounts[0])
            with open(Path(mounts[0]) / "filler", "wb") as f:
                f.write(b"\1" * max(0, st.f_bavail * st.f_frsize - leave))
            return
        stop.wait(0.05)


@pytest.mark.slow
@root_only
@pytest.mark.parametrize("tier", ["guest", "blocklayer"])
def test_an_image_filling_its_backing_fails_the_run_naming_enospc(
    tier: str, tmp_path: Path
) -> None:
    # The tmpfs fills while the image is written: the host filesystem is full in the middle of the
    # run.
    (tmp_path / "p.toml").write_text(PLAN.format(tier=tier))
    stop = threading.Event()
    filler = threading.Thread(target=fill_when_mounted, args=(tmp_path / "w", stop), daemon=True)
    filler.start()
    try:
        proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path)
    finally:
        stop.set()
        filler.join(timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the unit gave up
    assert "Traceback" not in proc.stdout + proc.stderr
    # named by its settings and workload, as the progress lines name it, not by its store key
    # ("guest/raw/off/writeback/…::seq-write-1m")
    gave_up = [line for line in proc.stdout.splitlines() if line.startswith("gave up: ")]
    assert len(gave_up) == 1 and "::" not in gave_up[0], proc.stdout
    assert gave_up[0].startswith(f"gave up: tier={tier} format=raw"), gave_up
    assert "cache=writeback" in gave_up[0] and "× seq-write-1m: " in gave_up[0], gave_up
    con = sqlite3.connect(tmp_path / "r.sqlite")
    errors = [r[0] for r in con.execute("SELECT error FROM runs")]
    con.close()
    assert errors and all(e and "ENOSPC" in e and "did not finish" not in e for e in errors), errors


def test_a_plan_that_does_not_fit_its_backing_is_refused_with_the_arithmetic(
    tmp_path: Path,
) -> None:
    # 96 MiB written onto a 48 MiB tmpfs: refused before anything is created, by `run`; `plan`
    # warns.
    (tmp_path / "p.toml").write_text(
        PLAN.format(tier="blocklayer").replace('size = "32M"', 'size = "96M"')
    )
    planned = run_cli("plan", "p.toml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "warning: does not fit: backing tmpfs (48 MiB filesystem) needs 96 MiB" in planned.stdout
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "the plan does not fit" in lines[0]
        and "100663296 > 50331648 bytes" in lines[0]
    )
    assert not (tmp_path / "w").exists() and not (tmp_path / "r.sqlite").exists()


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ('tier = ["baremetal"]\nsize = "999T"\n', "fio file (size) 999 TiB"),
        (
            'tier = ["blocklayer"]\nformat = ["raw"]\npreallocation = '
            '["full"]\n[[backing]]\ntype = "tmpfs"\n'
            'size = "64M"\n',
            "image preallocated full (image_size) 1 GiB",
        ),
        (
            'tier = ["baremetal"]\nsize = "48M"\n[[backing]]\ntype = "loopfs"\nfs = '
            '"ext4"\nsize = "32M"\n',
            "backing ext4-loop (32 MiB filesystem) needs 48 MiB",
        ),
        # issue 50: a tmpfs larger than the host's RAM and swap was mounted and left to the OOM
        # killer
        (
            'tier = ["baremetal"]\nsize = "16M"\n[[backing]]\ntype = "tmpfs"\nsize = "999T"\n',
            "this host's memory (a tmpfs lives in RAM and swap) needs 999 TiB (backing "
            "tmpfs (tmpfs) size 999 TiB)",
        ),
    ],
)
def test_plans_that_cannot_fit_are_named_by_plan_and_refused_by_run(
    tmp_path: Path, plan: str, words: str
) -> None:
    (tmp_path / "p.toml").write_text(plan)
    planned = run_cli("plan", "p.toml", cwd=tmp_path)
    assert (
        planned.returncode == 0
        and "warning: does not fit" in planned.stdout
        and words in planned.stdout
    ), planned.stdout + planned.stderr
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=tmp_path)
    assert (
        proc.returncode == 2 and "the plan does not fit" in proc.stderr and words in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "r.sqlite").exists()


def test_a_plan_that_fits_gets_no_warning(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('tier = ["baremetal"]\nsize = "16M"\n')
    planned = run_cli("plan", "p.toml", cwd=tmp_path)
    assert planned.returncode == 0 and "does not fit" not in planned.stdout


@root_only
def test_a_database_on_a_filesystem_that_filled_is_read_and_resumed_once_space_is_freed(
    tmp_path: Path,
) -> None:
    # A real ext4 that fills while runs are recorded: the checkpoint at close writes the header page
    # (which now promises every page) but not the pages after it, so the runs live only in the -wal.
    # The file must still be read (by SQLite, WAL included) and the sweep resume, instead of
    # "truncated: its header promises …".
    import dataclasses

    from iomatrix.errors import UserError
    from iomatrix.store import Store
    from tests.conftest import loop_mounted_ext4
    from tests.test_store import rec

    with loop_mounted_ext4(tmp_path, 8) as (_, mnt, _):
        filler = mnt / "filler"
        st = os.statvfs(mnt)
        with open(filler, "wb") as f:
            f.write(b"\1" * (st.f_bavail * st.f_frsize - 300 * 1024))
        db = mnt / "x.db"
        s = Store(db)
        sweep = s.create_sweep(s.host_id({"hostname": "h"}), "p", "fp", "{}", [], [])
        axes = dict(
            tier="baremetal",
            format="-",
            preallocation="-",
            cache="none",
            aio="threads",
            bus="-",
            backing="dir",
            modifier="none",
        )
        cell = s.cell_id(sweep, "k1", axes, {})
        recorded = 0
        with pytest.raises(UserError, match="database or disk is full"):
            for _ in range(1000):  # bounded: 300 KiB free fills after a dozen 20 KB runs
                s.record_run(dataclasses.replace(rec(cell), raw_output="x" * 20000))
                recorded += 1
        s.close()
        assert recorded > 0
        assert (mnt / "x.db-wal").stat().st_size > 0  # the runs are in the WAL
        filler.unlink()
        proc = run_cli("results", "--db", str(db), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert "truncated" not in proc.stderr
        reader = Store.open_existing(db)
        assert reader.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == recorded
        reader.close()
        again = Store(db)  # what `iomatrix run` opens to resume
        again.record_run(rec(cell))
        assert again.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == recorded + 1
        assert again.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        again.close()


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        # vgs --noheadings --nosuffix --units b -o vg_free vg0 (LVM2 2.03)
        ("  10733223936 \n", 10733223936),
        ("  10733223936.00\n", 10733223936),  # older LVM2 prints a decimal point even in bytes
        ("1893720064\n", 1893720064),  # zfs get -Hp -o value available tank
        ("", None),
        ("-\n", None),
        ("  1\n  2\n", None),
        ('  Volume group "vg9" not found\n', None),
        ("-5\n", None),
    ],
)
def test_the_free_bytes_of_a_volume_group_or_zfs_pool_are_read_from_the_tools_answer(
    printed: str, expected: int | None
) -> None:
    # issue 50: the size of every backing is checked; LVM and ZFS against what their group or pool
    # has (the tools cannot run on this host: no device-mapper, no ZFS, so their answers are the
    # captured text)
    from iomatrix.backing.space import parse_size_answer

    assert parse_size_answer(printed) == expected


def test_an_lvm_or_zfs_backing_this_host_cannot_ask_is_not_checked_and_does_not_fail_the_plan(
    tmp_path: Path,
) -> None:
    from iomatrix.backing.space import vg_free_bytes, zfs_available_bytes

    assert (
        vg_free_bytes("iomatrix-no-such-vg") is None
        and zfs_available_bytes("iomatrix-no-such-pool") is None
    )
    (tmp_path / "p.toml").write_text(
        'tier = ["baremetal"]\nsize = "16M"\n[[backing]]\ntype = "dir"\n'
        '[[backing]]\ntype = "lvm"\nvg = "iomatrix-no-such-vg"\nsize = "999T"\n'
        '[[backing]]\ntype = "zfs"\npool = "nosuchpool"\nkind = "zvol"\nsize = "999T"\n'
    )
    planned = run_cli("plan", "p.toml", cwd=tmp_path)
    assert planned.returncode == 0 and "Traceback" not in planned.stderr, (
        planned.stdout + planned.stderr
    )
