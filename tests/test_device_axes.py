"""The device axes of issue 24: iothread, queues and the virtio-scsi-single bus — QEMU's
capabilities probed (parsed from captured output of QEMU 7.2.22), the rules that prune with QEMU's
versions, and the guest's and the block export's command lines they produce (the QEMU-started checks
are in the slow tests)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from iomatrix import qemu_caps
from iomatrix import workloads as wl
from iomatrix.domain import axes
from iomatrix.domain.axes import QemuFacts, RuleContext
from iomatrix.guest import cmdline
from iomatrix.guest.cmdline import build_argv, build_batch_argv, device_args
from iomatrix.guest.job import BatchRun, GuestJob
from iomatrix.matrix import BackingFacts, Cell, expand
from iomatrix.plan.load import plan_from_dict
from iomatrix.qemu_block import DiskSpec
from iomatrix.tiers.blocklayer import daemon_argv
from tests.conftest import needs, run_cli
from tests.test_guest_argv_pinned import _artifacts

DATA = Path(__file__).parent / "data" / "qemu_caps"
OK = BackingFacts(unavailable=None, o_direct=True, is_device=False)
FIO = GuestJob("fio", "[j]\nfilename=@DISK@\n")


def _facts_72() -> QemuFacts:
    return QemuFacts(
        system_version=qemu_caps.parse_version((DATA / "qemu-7.2.22-version.txt").read_text()),
        daemon_version=qemu_caps.parse_version(
            (DATA / "qemu-storage-daemon-7.2.22-version.txt").read_text()
        ),
        device_properties={
            d: qemu_caps.parse_device_properties((DATA / f"qemu-7.2.22-{d}.txt").read_text())
            for d in qemu_caps.PROBED_DEVICES
        },
    )


# QEMU 9.0 as its facts would read: virtio-blk-pci gained iothread-vq-mapping, virtio-scsi-pci not
# yet.
FACTS_90 = QemuFacts(
    system_version=(9, 0, 0),
    daemon_version=(9, 0, 0),
    device_properties={
        "virtio-blk-pci": frozenset({"iothread", "num-queues", "iothread-vq-mapping"}),
        "virtio-scsi-pci": frozenset({"iothread", "num_queues"}),
    },
)


def test_captured_qemu_72_output_parses() -> None:
    facts = _facts_72()
    assert facts.system_version == (7, 2, 22) and facts.daemon_version == (7, 2, 22)
    assert facts.has_property("virtio-blk-pci", "iothread") is True
    assert facts.has_property("virtio-blk-pci", "num-queues") is True
    assert facts.has_property("virtio-blk-pci", "iothread-vq-mapping") is False
    assert facts.has_property("virtio-scsi-pci", "num_queues") is True
    assert facts.has_property("nvme", "iothread") is None  # not probed
    assert qemu_caps.parse_version("no version here") is None
    assert qemu_caps.parse_version("QEMU emulator version 9.0 (x)") == (9, 0, 0)


def _plan(**kw: object):
    return plan_from_dict(
        {"name": "t", "workloads": ["rand-read-4k"], "null_ceiling": False, **kw}, "test"
    )


def _expand(plan, qemu: QemuFacts | None):
    return expand(
        plan, {b.label(): OK for b in plan.backing}, [wl.resolve(w) for w in plan.workloads], qemu
    )


def test_vq_mapping_is_pruned_with_the_version_that_has_it() -> None:
    p = _plan(
        tier=["guest"],
        bus=["virtio-blk", "virtio-scsi-single"],
        iothread=["vq-mapping"],
        queues=["2"],
    )
    e = _expand(p, _facts_72())
    assert not e.cells
    reasons = {x.reason for x in e.pruned}
    assert (
        "iothread=vq-mapping needs QEMU ≥ 9.0 (virtio-blk-pci's iothread-vq-mapping); "
        "this host has 7.2.22" in reasons
    )
    assert any("QEMU ≥ 10.0 (virtio-scsi-pci's" in r for r in reasons)
    # On QEMU 9.0 virtio-blk has it; without facts (nothing probed) the rule does not apply.
    assert {c.bus for c in _expand(p, FACTS_90).cells} == {"virtio-blk"}
    assert len(_expand(p, None).cells) == 2


def test_block_export_iothread_follows_qemu_storage_daemon_version() -> None:
    p = _plan(tier=["blocklayer", "guest"], iothread=["off", "on"])
    old = _expand(p, _facts_72())
    assert sorted(c.key for c in old.cells) == [
        "blocklayer/raw/off/none/threads/-/dir/none",
        "guest/raw/off/none/threads/virtio-blk/dir/none",
        "guest/raw/off/none/threads/virtio-blk/dir/none+iothread=on",
    ]
    (pruned,) = old.pruned
    assert pruned.what == "blocklayer/raw/off/none/threads/-/dir/none+iothread=on"
    assert (
        "qemu-storage-daemon 7.2.22 aborts" in pruned.reason
        and "nbd_blockdev_client_closed" in pruned.reason
    )
    assert len(_expand(p, FACTS_90).cells) == 4  # 9.0's export runs requests in its IOThread


def test_device_axes_need_a_virtio_bus_and_enough_cpus() -> None:
    p = _plan(tier=["guest"], bus=["virtio-blk", "ide"], iothread=["on"], queues=["auto", "2", "8"])
    ctx = RuleContext(host_cpus=2)
    assert axes.prune_reason(Cell.of(bus="ide", iothread="on", queues="auto"), ctx).startswith(
        "bus=ide has no IOThread option"
    )
    assert axes.prune_reason(Cell.of(bus="ide", iothread="off", queues="2"), ctx).startswith(
        "bus=ide has no virtqueues"
    )
    assert axes.prune_reason(Cell.of(bus="virtio-blk", iothread="off", queues="8"), ctx) == (
        "queues=8 needs 8 guest vCPUs (the guest boots one per queue: more queues than "
        "vCPUs go unused); "
        "this host has 2 CPUs"
    )
    e = _expand(p, None)
    assert {(c.bus, c.queues) for c in e.cells} <= {
        ("virtio-blk", "auto"),
        ("virtio-blk", "2"),
        ("virtio-blk", "8"),
    }


def test_plans_without_the_new_axes_do_not_probe_qemu() -> None:
    assert not qemu_caps.plan_needs_facts(
        _plan(tier=["guest", "blocklayer"], cache=["none", "writeback"])
    )
    assert qemu_caps.plan_needs_facts(_plan(tier=["guest"], iothread=["off", "on"]))
    assert not qemu_caps.plan_needs_facts(_plan(tier=["guest"], iothread=["off"]))


def _disk(root: Path, bus: str, name: str = "d", **more: str) -> DiskSpec:
    return DiskSpec(str(root / f"{name}.qcow2"), "qcow2", "none", "threads", bus, more=more)  # type: ignore[arg-type]


def _devices(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a in ("-device", "-object", "-smp")]


def test_guest_command_line_of_the_device_axes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cmdline, "host_tsc_khz", lambda cpuinfo=None: 2_600_000)
    art = _artifacts(tmp_path)
    blk = build_argv(
        art, "tcg", _disk(tmp_path, "virtio-blk", iothread="on", queues="2"), FIO, tmp_path
    )
    assert _devices(blk) == [
        "2",
        "iothread,id=iothread-d0",
        "virtio-blk-pci,drive=d0,serial=iomx-test,write-cache=on,iothread=iothread-d0,"
        "num-queues=2,werror=report,rerror=report",
    ]
    single = build_batch_argv(
        art,
        "tcg",
        [
            BatchRun(_disk(tmp_path, "virtio-scsi-single", f"d{i}", iothread="on"), FIO)
            for i in range(2)
        ],
        tmp_path,
        machine="microvm",
    )
    assert _devices(single)[-6:] == [
        "iothread,id=iothread-d1",
        "virtio-scsi-device,id=scsi-d1,iothread=iothread-d1",
        "scsi-hd,drive=d1,bus=scsi-d1.0,serial=iomx-t01,write-cache=on,werror=report,rerror=report",
        "iothread,id=iothread-d2",
        "virtio-scsi-device,id=scsi-d2,iothread=iothread-d2",
        "scsi-hd,drive=d2,bus=scsi-d2.0,serial=iomx-t02,write-cache=on,werror=report,rerror=report",
    ]
    shared = device_args(_disk(tmp_path, "virtio-scsi", queues="2", iothread="on"), "d0", "s")
    assert shared == [
        "-object",
        "iothread,id=iothread-scsi0",
        "-device",
        "virtio-scsi-pci,id=scsi0,iothread=iothread-scsi0,num_queues=2",
        "-device",
        "scsi-hd,drive=d0,bus=scsi0.0,serial=s,write-cache=on,werror=report,rerror=report",
    ]
    mapped = device_args(
        _disk(tmp_path, "virtio-blk", queues="2", iothread="vq-mapping"), "d0", "s"
    )
    assert mapped[:4] == [
        "-object",
        "iothread,id=iothread0-d0",
        "-object",
        "iothread,id=iothread1-d0",
    ]
    assert json.loads(mapped[5]) == {
        "driver": "virtio-blk-pci",
        "drive": "d0",
        "serial": "s",
        "write-cache": "on",
        "iothread-vq-mapping": [{"iothread": "iothread0-d0"}, {"iothread": "iothread1-d0"}],
        "num-queues": 2,
        "werror": "report",
        "rerror": "report",
    }


def test_block_export_iothread_argv(tmp_path: Path) -> None:
    argv = daemon_argv("qsd", _disk(tmp_path, "virtio-blk", iothread="on"), 3)
    assert argv[1:3] == ["--object", "iothread,id=iothread"]
    assert argv[-1].endswith(",writable=on,writethrough=off,iothread=iothread")
    assert "--object" not in daemon_argv("qsd", _disk(tmp_path, "virtio-blk"), 3)


@needs("qemu-system-x86_64")
@pytest.mark.parametrize(
    "bus,more",
    [
        ("virtio-blk", {"iothread": "on", "queues": "2"}),
        ("virtio-scsi", {"iothread": "on", "queues": "2"}),
        ("virtio-scsi-single", {"iothread": "on", "queues": "2"}),
    ],
)
def test_qemu_accepts_the_device_command_line(
    tmp_path: Path, bus: str, more: dict[str, str]
) -> None:
    """QEMU itself parses and realises the devices (started paused with -S, then quit over QMP on
    stdio)."""
    image = tmp_path / "d.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "16M"], check=True)
    disk = DiskSpec(str(image), "qcow2", "none", "threads", bus, more=more)  # type: ignore[arg-type]
    argv = [
        shutil.which("qemu-system-x86_64") or "",
        "-nodefaults",
        "-display",
        "none",
        "-S",
        "-machine",
        "pc",
        "-accel",
        "tcg",
        "-smp",
        str(cmdline.guest_cpus([disk])),
        "-qmp",
        "stdio",
        *cmdline.disk_args(disk),
    ]
    out = subprocess.run(
        argv,
        input='{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
@needs("qemu-system-x86_64")
def test_guest_sweep_runs_iothread_queues_and_virtio_scsi_single(tmp_path: Path) -> None:
    """A real TCG guest per cell, through the CLI: the cell's IOThread, two virtqueues (two vCPUs)
    and a controller per disk reach QEMU's command line, and fio ran in the guest."""
    (tmp_path / "p.toml").write_text(
        'tier = ["guest"]\nformat = ["qcow2"]\ncache = ["none"]\nbus = ["virtio-blk", '
        '"virtio-scsi-single"]\n'
        'iothread = ["on"]\nqueues = ["2"]\nworkloads = ["rand-write-4k"]\nsize = '
        '"16M"\nimage_size = "64M"\n'
        "runtime = 1\nrun_timeout = 180\nnull_ceiling = false\nretry_disturbed = false\n"
        "[repetitions]\nmin = 1\nmax = 1\n"
    )
    proc = run_cli("run", "p.toml", "--db", "r.sqlite", "--accel", "tcg", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    con = sqlite3.connect(tmp_path / "r.sqlite")
    rows = {
        key: (status, json.loads(meta))
        for key, status, meta in con.execute(
            "SELECT c.key, r.status, r.meta_json FROM runs r JOIN cells c ON c.id = r.cell_id"
        )
    }
    con.close()
    assert set(rows) == {
        "guest/qcow2/off/none/threads/virtio-blk/dir/none+iothread=on+queues=2",
        "guest/qcow2/off/none/threads/virtio-scsi-single/dir/none+iothread=on+queues=2",
    }
    for key, (status, meta) in rows.items():
        assert status == "ok", key
        argv = " ".join(meta["qemu_argv"])
        assert "-smp 2 " in argv and "-object iothread,id=iothread-d0" in argv
        if "virtio-scsi-single" in key:
            assert (
                ",id=scsi-d0,iothread=iothread-d0,num_queues=2" in argv and "bus=scsi-d0.0" in argv
            )
        else:
            assert "iothread=iothread-d0,num-queues=2" in argv
