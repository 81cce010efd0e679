"""Network disks through the tiers (issue 34): the QEMU graph over an iSCSI LUN or a file on an NFS
export, the disk a run asks its server for, and the server's processes counted in the CPU per I/O.

The fast tests pin the argv builders and the pure helpers; the slow ones run the real thing end to
end: a lab-started tgtd / nfs-ganesha, qemu-storage-daemon opening the network disk and fio's nbd
engine driving it.

A lab NFS server needs the machine's one port 111 (rpcbind) and registers there, one per machine at
a time. The sweep through the `iomatrix` CLI on a lab NFS server runs in a network and mount
namespace of its own (tests/own_network.py), beside any other; the tests that start one in the test
process hold the machine-wide lock of the host's lab NFS instead (another test session's wait). So
the module is in no xdist group, and is placed by its tests' durations. (The iSCSI tests need
neither: their tgtd takes a free portal port and a control port no other tgtd holds.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import IscsiBacking
from iomatrix.backing.leftovers import clean
from iomatrix.backing.network import NetworkDisk
from iomatrix.backing.nfs import NfsBacking
from iomatrix.backing.provision import BackingHandle, provision
from iomatrix.domain.axes import BackingFacts
from iomatrix.fio.jobs import JobShape
from iomatrix.guest.process import live_guest_pids
from iomatrix.matrix import Cell, estimate_seconds
from iomatrix.matrix import expand as matrix_expand
from iomatrix.monitor.sampler import HostSampler
from iomatrix.monitor.summary import field_total
from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec, blockdev_spec, out_of_space
from iomatrix.report.per_backing import answer_backings
from iomatrix.runner import plan_expansion
from iomatrix.store import Store
from iomatrix.sweep.expansion import backing_facts
from iomatrix.tiers.baremetal import BareMetalTier
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Target, Tier
from iomatrix.tiers.blocklayer import BlockLayerTier, daemon_argv
from iomatrix.tiers.declared.baremetal import BareMetal
from iomatrix.tiers.declared.blocklayer import BlockLayer
from iomatrix.tiers.declared.consolidation import Consolidation
from iomatrix.tiers.declared.durability import Durability
from iomatrix.tiers.guest import GuestTier
from iomatrix.tiers.network_disks import disk_name, disk_values, measures_rtt
from iomatrix.workloads import resolve
from tests.conftest import (
    descendants_named,
    iomatrix_argv,
    needs,
    root_only,
    run_cli,
    sigint_default,
)
from tests.kill_campaigns import left_behind, sweep_plan
from tests.own_network import host_lab_nfs, own_network

IQN = "iqn.2026-11.io.iomatrix:t1"
LUN = NetworkDisk(
    "iscsi",
    (
        ("driver", "iscsi"),
        ("transport", "tcp"),
        ("portal", "127.0.0.1:3261"),
        ("target", IQN),
        ("lun", "1"),
    ),
    f"iscsi://127.0.0.1:3261/{IQN}/1",
    "raw",
    1 << 30,
    Path("/w/lun1.img"),
)
NFS_FILE = NetworkDisk(
    "nfs",
    (
        ("driver", "nfs"),
        ("server.type", "inet"),
        ("server.host", "127.0.0.1"),
        ("path", "/w/export/d,1.qcow2"),
    ),
    "nfs://127.0.0.1/w/export/d,1.qcow2",
    "qcow2",
    1 << 30,
)


# ----------------------------------------------------------------------------- the -blockdev graph


def test_format_node_over_the_iscsi_protocol_node_with_the_cache_switches_on_both():
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="none", aio="threads"))
    assert spec == (
        "driver=raw,node-name=d0,cache.direct=on,cache.no-flush=off,file.driver=iscsi,"
        f"file.transport=tcp,file.portal=127.0.0.1:3261,file.target={IQN},file.lun=1,"
        "file.cache.direct=on,file.cache.no-flush=off"
    )


def test_no_file_protocol_option_on_a_network_protocol_node():
    """aio is an option of QEMU's file protocol only: libiscsi would refuse it (the axes prune aio ≠
    default on a network backing; a disk built anyway still gets a graph QEMU accepts)."""
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="none", aio="native"))
    assert "aio" not in spec and "filename" not in spec


def test_nfs_file_under_a_qcow2_node_with_a_comma_escaped():
    spec = blockdev_spec(DiskSpec(NFS_FILE, format="qcow2", cache="writeback"))
    assert spec.startswith("driver=qcow2,node-name=d0,cache.direct=off,cache.no-flush=off,")
    assert (
        ",file.driver=nfs,file.server.type=inet,file.server.host=127.0.0.1,"
        "file.path=/w/export/d,,1.qcow2,"
        "file.cache.direct=off,file.cache.no-flush=off"
    ) in spec


def test_unsafe_drops_flushes_on_both_nodes_of_a_network_disk():
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="unsafe"))
    assert "cache.no-flush=on" in spec and "file.cache.no-flush=on" in spec


def test_a_cells_disk_on_a_network_target_keeps_the_disk():
    cell = Cell.of(
        tier="blocklayer", backing="iscsi", format="raw", cache="directsync", aio="threads"
    )
    disk = DiskSpec.for_cell(cell, LUN, 1 << 30)
    assert disk.target is LUN
    argv = daemon_argv("qemu-storage-daemon", disk, 3)
    assert argv[argv.index("--blockdev") + 1] == blockdev_spec(disk)
    # directsync: the export's half
    assert argv[argv.index("--export") + 1].endswith(",writethrough=on")


def test_a_network_disk_is_never_judged_out_of_space_from_a_local_filesystem():
    assert out_of_space(LUN) is None


# ----------------------------------------------------------------------------- what a run asks its
# server for


def test_the_server_reads_the_axes_that_apply_and_a_raw_file_without_a_format_axis():
    cell = Cell.of(tier="baremetal", backing="iscsi", cache="none", aio="threads")
    values = disk_values(cell)
    assert values["format"] == "raw" and values["cache"] == "none"
    assert "-" not in values.values()
    assert (
        disk_values(Cell.of(tier="blocklayer", format="qcow2", cache="none"))["format"] == "qcow2"
    )


def test_disk_names_are_unique_and_fit_a_file_name_and_an_iqn():
    a, b = disk_name("blk", "rand-write-4k"), disk_name("blk", "Custom/Job.fio")
    assert a != b and a.startswith("blk-")
    assert all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in a + b)


def test_iscsi_runs_measure_their_rtt_and_nfs_runs_cannot():
    assert measures_rtt({"rtt": "0"}, LUN) and measures_rtt({"rtt": "0.5ms"}, LUN)
    assert not measures_rtt({"rtt": "0"}, NFS_FILE)
    assert not measures_rtt(Cell.of(tier="baremetal"), LUN)  # a tier without the rtt axis


# ----------------------------------------------------------------------------- which tiers run a
# network backing


def test_consolidation_is_pruned_on_a_network_backing_durability_where_it_cannot_cut_and_guests_run():  # noqa: E501
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["baremetal", "blocklayer", "guest"],
            "format": ["raw"],
            "cache": ["none"],
            "backing": [{"type": "nfs"}],
            "workloads": ["rand-write-4k"],
        }
    )
    exp = plan_expansion(plan, None, set())
    keys = {c.key for c in exp.cells}
    assert {
        "baremetal/-/-/none/threads/-/nfs/none",
        "blocklayer/raw/off/none/threads/-/nfs/none",
        "guest/raw/off/none/threads/virtio-blk/nfs/none",
    } <= keys
    assert not [p for p in exp.pruned if p.what.startswith("guest/") and "network" in p.reason]
    for tier in (Durability, Consolidation):
        assert tier.prune_reason(
            Cell.of(tier=tier.name), BackingFacts(None, True, False, protocol="nfs")
        )
        assert tier.prune_reason(Cell.of(tier=tier.name), BackingFacts(None, True, False)) is None
    # the durability tier cuts a target iomatrix started (tests/test_durability_iscsi.py), not an
    # existing one
    lab, existing = (
        BackingFacts(None, True, False, protocol="iscsi", lab_started=b) for b in (True, False)
    )
    assert Consolidation.prune_reason(Cell.of(tier="consolidation"), lab)
    assert Durability.prune_reason(Cell.of(tier="durability"), lab) is None
    assert Durability.prune_reason(Cell.of(tier="durability"), existing)


@pytest.mark.parametrize(
    "backing",
    [
        {"type": "iscsi", "portal": "192.0.2.7:3260", "iqn": "iqn.2026-11.org.example:t"},
        {"type": "nfs", "server": "192.0.2.7", "export": "/srv/vms"},
    ],
)
def test_the_server_side_baseline_is_pruned_with_the_reason_on_an_existing_server(
    backing: dict[str, str],
):
    """An existing server does not show where it keeps a disk's bytes: the bare-metal cell is pruned
    (no failed run), the lab-started server's bare-metal cell is kept, and the block layer runs on
    both. (The existing server, at a documentation address, is taken as reachable and handed over:
    its facts as probed, but `unavailable` cleared.)"""
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["baremetal", "blocklayer"],
            "format": ["raw"],
            "cache": ["none"],
            "workloads": ["rand-write-4k"],
            "backing": [backing, {"type": backing["type"]}],
        }
    )
    facts = backing_facts(plan, set())
    existing = next(label for label in facts if label != backing["type"])
    facts[existing] = replace(facts[existing], unavailable=None)
    assert facts[existing].lab_started is False and facts[backing["type"]].lab_started is True
    exp = matrix_expand(plan, facts, [resolve("rand-write-4k", None)])
    cells = {(c.tier, c.backing) for c in exp.cells}
    assert {
        ("baremetal", backing["type"]),
        ("blocklayer", backing["type"]),
        ("blocklayer", existing),
    } <= cells
    assert ("baremetal", existing) not in cells
    reasons = [
        p.reason
        for p in exp.pruned
        if p.what.startswith("baremetal/") and p.what.endswith(f"/{existing}/none")
    ]
    assert reasons and all(
        f"an existing {backing['type']} server does not show" in r for r in reasons
    ), exp.pruned
    assert (
        BareMetal.prune_reason(Cell.of(tier="baremetal"), BackingFacts(None, True, False)) is None
    )


def test_the_server_side_baseline_is_pruned_on_rbd_which_keeps_no_file_of_the_disk():
    rbd = BackingFacts(None, True, False, protocol="rbd", lab_started=True)
    assert "ioengine=rbd" in (BareMetal.prune_reason(Cell.of(tier="baremetal"), rbd) or "")


def test_the_block_layer_opens_network_disks_with_qemus_own_client_only():
    iscsi = BackingFacts(None, True, False, protocol="iscsi")
    kernel = Cell.of(
        tier="blocklayer", format="raw", cache="none", initiator="kernel", backing="iscsi"
    )
    assert "initiator=kernel" in (BlockLayer.prune_reason(kernel, iscsi) or "")
    assert (
        BlockLayer.prune_reason(
            Cell.of(tier="blocklayer", format="raw", initiator="libiscsi"), iscsi
        )
        is None
    )


def test_the_built_in_shared_storage_plan_covers_both_protocols_within_its_budget():
    """`iomatrix run shared-storage`: iSCSI LUN types × write cache and NFS raw/qcow2 × cache
    none/writeback on the block layer, the server-side baseline on both backings, the null LUN and
    the null-co ceiling; answered per backing; its own estimate within 20 minutes (at the most runs
    it allows)."""
    plan, base = load_plan("shared-storage")
    exp = plan_expansion(plan, base, set())
    cells = {c.key: c for c in exp.cells}
    blk = [c for c in cells.values() if c.tier == "blocklayer"]
    iscsi = {
        (c.format, c.cache, c.lun_type, c.lun_write_cache) for c in blk if c.backing == "iscsi"
    }
    assert {
        (f, c, t, wc)
        for f in ("raw", "qcow2")
        for c in ("none", "writeback")
        for t in ("fileio", "blockio")
        for wc in ("off", "on")
    } <= iscsi
    # the protocol's ceiling
    assert {("raw", c, "null", "off") for c in ("none", "writeback")} <= iscsi
    assert {(c.format, c.cache) for c in blk if c.backing == "nfs"} == {
        (f, c) for f in ("raw", "qcow2") for c in ("none", "writeback")
    }
    assert any(c.is_null_ceiling for c in blk)  # the block layer's own ceiling beside the null LUN
    assert {c.backing for c in cells.values() if c.tier == "baremetal"} == {"iscsi", "nfs"}
    assert answer_backings(json.loads(plan.canonical_json())) == ["iscsi", "nfs"]
    assert estimate_seconds(plan, exp)[1] <= 20 * 60


# ----------------------------------------------------------------------------- the server's CPU

BUSY = (
    "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: time.sleep(0) "
    "or None\n"
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_server_process_counts_in_the_io_paths_cpu_under_its_own_role():
    """tgtd / ganesha.nfsd attached with role "server" are part of what an I/O costs (iopath.*), and
    listed as "server" in the run's followed processes."""
    server = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        with HostSampler([], interval=0.1) as s:
            s.attach_pid(server.pid, role="server")
            at_attach = _cpu_s(server.pid)
            deadline = time.monotonic() + 120  # CPU used, not wall time: the host is shared
            while _cpu_s(server.pid) - at_attach < 0.2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.25)
    finally:
        server.kill()
        server.wait()
    assert (field_total(s.samples, "iopath.cpu_s") or 0.0) > 0.1
    assert {p["pid"]: p["role"] for p in s.followed_processes()} == {server.pid: "server"}


# ----------------------------------------------------------------------------- end to end, real
# servers

SCRATCH = Path("/tmp/iomx-netint")  # short: ganesha's export path and UNIX sockets live under it


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="w-", dir=SCRATCH))
    yield d
    clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def host_nfs() -> Iterator[None]:
    """The host's lab NFS for one test that starts it in the test process (provision): held
    machine-wide, so that another test session's waits instead of being refused by rpcbind."""
    with host_lab_nfs():
        yield


def _plan() -> Plan:
    return Plan.model_validate(
        {
            "name": "t",
            "tier": ["baremetal", "blocklayer"],
            "size": "16M",
            "image_size": "64M",
            "runtime": 1,
        }
    )


def _sampled_run(
    tier: Tier, req: RunRequest
) -> tuple[RunOutcome, list[dict[str, object]], float | None]:
    """One run under the real host sampler, wired as the runner wires it: (outcome, followed
    processes, the I/O path's CPU seconds)."""
    with HostSampler([], interval=0.2) as s:
        req = replace(
            req,
            on_process=s.attach_pid,
            on_load_process=lambda pid: s.attach_pid(pid, role="load"),
            on_server_process=lambda pid: s.attach_pid(pid, role="server"),
        )
        out = tier.run(req)
    return out, s.followed_processes(), field_total(s.samples, "iopath.cpu_s")


def _blocklayer_and_baseline(
    handle: BackingHandle, workdir: Path, cells: list[Cell], server_names: set[str]
) -> Iterator[tuple[Cell, RunOutcome]]:
    """Run each cell in the block layer (checking what every network run records; yields (cell,
    outcome)), then the server-side baseline."""
    plan = _plan()
    target = Target("network", handle.path, server=handle.server)
    shape = JobShape(size_bytes=plan.size_bytes, runtime_s=1.0, image_bytes=plan.image_size_bytes)
    blk = BlockLayerTier(plan, RunOptions(workdir=workdir))
    blk.open()
    try:
        for i, cell in enumerate(cells):
            req = RunRequest(
                cell=cell,
                workload=resolve("rand-write-4k", None),
                target=target,
                shape=shape,
                run_dir=workdir / "runs" / f"blk{i}",
                timeout_s=300,
            )
            out, followed, io_cpu = _sampled_run(blk, req)
            assert out.ok, out.error
            assert out.metrics["total.iops"] > 0
            nd = out.meta["network_disk"]
            assert nd["protocol"] == handle.server.protocol and nd["format"] == cell.format
            assert out.meta["network_server"] == handle.server.metadata()
            spec = next(a for a in out.meta["daemon_argv"] if a.startswith("driver="))
            assert f"file.driver={handle.server.protocol}" in spec and "aio" not in spec
            # the server's processes were counted in the I/O path's CPU, under their own role, and
            # named
            roles = {p["name"]: p["role"] for p in followed}
            assert {n for n, r in roles.items() if r == "server"} >= server_names, roles
            assert {p["name"] for p in out.meta["server_processes"]} >= server_names
            assert io_cpu is not None and io_cpu > 0
            # the disk was given back: its file is gone from the server (a null LUN has none)
            assert nd["server_path"] is None or not Path(nd["server_path"]).exists()
            yield cell, out
    finally:
        blk.close()
    # the server-side baseline: fio on the disk's own file on the server
    bm = BareMetalTier(plan, RunOptions(workdir=workdir))
    cell = Cell.of(
        tier="baremetal", cache="none", aio="threads", backing=cells[0].backing, modifier="none"
    )
    out = bm.run(
        RunRequest(
            cell=cell,
            workload=resolve("rand-write-4k", None),
            target=target,
            shape=shape,
            run_dir=workdir / "runs" / "bm",
            timeout_s=300,
        )
    )
    assert out.ok, out.error
    assert out.meta["target"] == out.meta["network_disk"]["server_path"]
    assert out.meta["baseline"].startswith("server side")
    assert not Path(out.meta["target"]).exists()


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_nfs_files_through_the_block_layer_and_the_server_side_baseline(
    workdir: Path, host_nfs: None
) -> None:
    """A lab-started nfs-ganesha: qemu-storage-daemon opens a raw and a qcow2 file on the export
    with QEMU's libnfs driver, fio drives it over NBD; ganesha's CPU is counted; every file is
    removed after its run; the bare-metal tier runs on the file in the export directory; nothing is
    left once the backing is torn down."""
    if (why := NfsBacking().availability(set())) is not None:
        pytest.skip(why)
    cells = [
        Cell.of(
            tier="blocklayer",
            format=f,
            preallocation="off",
            cache=c,
            aio="threads",
            backing="nfs",
            modifier="none",
        )
        for f, c in (("raw", "none"), ("qcow2", "writeback"))
    ]
    with provision(NfsBacking(), workdir, set()) as handle:
        assert handle.server is not None
        export = handle.server.export_dir
        assert len(list(_blocklayer_and_baseline(handle, workdir, cells, {"ganesha.nfsd"}))) == len(
            cells
        )
        assert list(export.iterdir()) == []
    assert leftovers.pending(workdir) == []


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_iscsi_luns_through_the_block_layer_with_an_emulated_rtt_and_the_server_side_baseline(
    workdir: Path,
) -> None:
    """A lab-started tgtd: fileio LUNs with the write cache off and on, a blockio LUN, the null LUN
    and a fileio LUN behind the delaying relay, each opened by qemu-storage-daemon with libiscsi;
    tgtd's CPU counted; the LUN's settings and the RTT asked for and achieved recorded with the run;
    the bare-metal tier on a LUN's backing file; no tgtd, relay or file left."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    base = {
        "tier": "blocklayer",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": "threads",
        "backing": "iscsi",
        "modifier": "none",
    }
    cells = [
        Cell({**base, "lun_type": t, "lun_write_cache": wc, "rtt": rtt})
        for t, wc, rtt in (
            ("fileio", "off", "0"),
            ("fileio", "on", "0"),
            ("blockio", "off", "0"),
            ("null", "off", "0"),
            ("fileio", "on", "2ms"),
        )
    ]
    with provision(IscsiBacking(), workdir, set()) as handle:
        outs = dict(_blocklayer_and_baseline(handle, workdir, cells, {"tgtd"}))
        relay_pids = [out.meta["relay_pid"] for out in outs.values() if "relay_pid" in out.meta]
    for cell, out in outs.items():
        nd = out.meta["network_disk"]
        assert nd["lun_type"] == cell["lun_type"]
        # what tgtd reports, not what was asked
        assert nd["lun_write_cache_read_back"] == cell["lun_write_cache"]
        assert (nd["server_path"] is None) == (cell["lun_type"] == "null")
        assert out.meta["rtt_requested_ms"] == (2.0 if cell["rtt"] == "2ms" else 0.0)
        assert out.meta["rtt_measured_ms"] > 0
    slow = outs[cells[-1]]
    assert (
        slow.meta["rtt_method"] == "userspace relay"
        and slow.meta["rtt_measured_ms"] > slow.meta["rtt_direct_ms"]
    )
    assert len(relay_pids) == 1 and not psutil.pid_exists(relay_pids[0])
    assert leftovers.pending(workdir) == []


TWO_BACKINGS = sweep_plan(
    '[[backing]]\ntype = "dir"\n[[backing]]\ntype = "nfs"\n',
    tiers=("baremetal", "blocklayer"),
    rounds=3,
    runtime=0.5,
    more='time_budget = "10m"\n',
)


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_a_sweep_with_a_network_backing_answers_once_per_backing_and_leaves_nothing(
    workdir: Path,
) -> None:
    """`iomatrix run` on a local directory and a lab-started NFS server: every cell runs (the
    server-side baseline included), each run records its network disk and the server processes
    counted in its CPU per I/O, the answer is given per backing ("rand-write-4k on nfs" from the nfs
    cells only), and no server, file or ledger entry is left."""
    if (why := NfsBacking().availability(set())) is not None:
        pytest.skip(why)
    (workdir / "p.toml").write_text(TWO_BACKINGS)
    with own_network() as ns:  # its lab rpcbind and ganesha beside any other (module docstring)
        run = ns.run_cli(
            "run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=workdir, timeout=900
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # one decision per backing on the first screen: its configuration's heading names the backing
    # ("Use: cache=none · nfs"), the workload's line under it (issue 49's one-screen layout says the
    # backing once, in the heading); the verdicts' own names are checked in the JSON below
    lines = run.stdout.splitlines()
    for backing in ("dir", "nfs"):
        at = [i for i, x in enumerate(lines) if x[:1].isalpha() and x.endswith(f" · {backing}")]
        assert at and lines[at[0] + 1].strip().startswith("rand-write-4k"), (backing, run.stdout)
    rec = run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=workdir)
    assert rec.returncode == 0, rec.stderr
    verdicts = {v["workload"]: v for v in json.loads(rec.stdout)["verdicts"]}
    assert set(verdicts) == {"rand-write-4k on dir", "rand-write-4k on nfs"}
    for backing in ("dir", "nfs"):
        shown = verdicts[f"rand-write-4k on {backing}"]
        named = [
            c
            for c in [
                (shown.get("choice") or {}).get("cell"),
                *((shown.get("choice") or {}).get("tied") or []),
            ]
            if c
        ]
        assert all(f" {backing}" in c or c.endswith(backing) for c in named), (backing, named)
    # rank ranks the same groups recommend answers: no table holds cells of both backings
    ranked = run_cli("rank", "--db", "r.sqlite", "--format", "json", cwd=workdir)
    assert ranked.returncode == 0, ranked.stderr
    tables = [t for t in json.loads(ranked.stdout) if " · tier " in t["title"]]
    assert {t["title"].split(" · ")[0] for t in tables} == {
        "rand-write-4k on dir",
        "rand-write-4k on nfs",
    }
    for t in tables:
        backing = t["title"].split(" · ")[0].rsplit(" on ", 1)[1]
        assert {row.get("backing", backing) for row in t["rows"]} == {backing}, t
    store = Store(workdir / "r.sqlite")
    try:
        runs = [
            tuple(r)
            for r in store.db.execute(
                "SELECT c.tier, c.backing, r.meta_json, r.status FROM runs r "
                "JOIN cells c ON c.id = r.cell_id"
            ).fetchall()
        ]
    finally:
        store.close()
    assert {(t, b) for t, b, _, _ in runs} == {
        (t, b) for t in ("baremetal", "blocklayer") for b in ("dir", "nfs")
    }
    assert all(status == "ok" for *_, status in runs)
    for tier, backing, meta_json, _ in runs:
        meta = json.loads(meta_json)
        if backing != "nfs":
            assert "network_disk" not in meta
            continue
        assert meta["network_disk"]["url"].startswith("nfs://127.0.0.1/")
        if tier == "blocklayer":
            roles = {p["name"]: p["role"] for p in meta["processes"]}
            assert (
                roles.get("ganesha.nfsd") == "server" and roles.get("qemu-storage-daemon") == "io"
            )
        else:
            assert meta["target"] == meta["network_disk"]["server_path"]
    assert not any(
        p.info["name"] in ("ganesha.nfsd", "tgtd")
        and str(workdir) in " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["name", "cmdline"])
    )
    assert leftovers.pending(workdir / "w") == []


ISCSI_LONG = """
tier = ["blocklayer"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads"]
lun_write_cache = ["off", "on"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = RUNTIME
null_ceiling = false
retry_disturbed = false  # what the sweep records is checked, not how clean its runs were
[repetitions]
min = 1
max = 1
[[backing]]
type = "iscsi"
"""


def _serving_iscsi(proc: subprocess.Popen, qemu: str) -> list[psutil.Process]:
    """The sweep's QEMU process `qemu` (qemu-storage-daemon, qemu-system-x86_64) with an iSCSI disk
    and its tgtd, once both run."""
    users = descendants_named(proc.pid, qemu, "file.driver=iscsi")
    tgtd = descendants_named(proc.pid, "tgtd")
    return [*users, *tgtd] if users and tgtd else []


def _wait_serving(proc: subprocess.Popen, qemu: str, bound_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + bound_s
    serving: list[psutil.Process] = []
    while not serving and time.monotonic() < deadline and proc.poll() is None:
        serving = _serving_iscsi(proc, qemu)
        time.sleep(0.1)
    assert serving, f"no {qemu} ran on an iSCSI disk within {bound_s:g} s"
    return serving


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_sweep_on_iscsi_interrupted_mid_run_leaves_nothing(
    workdir: Path, sig: signal.Signals
) -> None:
    """Ctrl-C while qemu-storage-daemon serves a LUN: the LUN, its file, tgtd and the daemon are
    gone when `iomatrix run` exits. SIGKILL there: the next `run` removes what the killed one left,
    then runs and leaves nothing itself."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    (workdir / "p.toml").write_text(ISCSI_LONG.replace("RUNTIME", "30"))
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--workdir", "w"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    serving = _wait_serving(proc, "qemu-storage-daemon", 180)
    # the whole foreground group, as a terminal's Ctrl-C (or a kill -9 of the session)
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    if sig == signal.SIGKILL:  # the next run cleans up after the killed one, then runs
        (workdir / "p.toml").write_text(ISCSI_LONG.replace("RUNTIME", "0.5"))
        again = run_cli(
            "run", "p.toml", "--db", "again.sqlite", "--workdir", "w", cwd=workdir, timeout=600
        )
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    else:
        assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert left_behind(workdir / "w", serving) == []
    backings = workdir / "w" / "backings"
    assert not backings.exists() or list(backings.iterdir()) == []  # no directory of a disk either


@needs("fio")
@needs("qemu-storage-daemon")
@root_only
@pytest.mark.slow
def test_the_answer_says_a_latency_was_emulated_and_how_closely_it_was_met(workdir: Path) -> None:
    """A sweep with rtt = ["0", "2ms"] on a lab-started tgtd: `recommend` (every output shares its
    warnings) says that 2 ms was emulated by the relay and the round trip measured; rtt "0" gets no
    such line."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    plan = ISCSI_LONG.replace("RUNTIME", "0.5").replace(
        'lun_write_cache = ["off", "on"]', 'lun_write_cache = ["on"]\nrtt = ["0", "2ms"]'
    )
    (workdir / "p.toml").write_text(plan)
    run = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=workdir, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rec = run_cli("recommend", "--db", "r.sqlite", "--format", "json", cwd=workdir)
    assert rec.returncode == 0, rec.stderr
    notes = [w for w in json.loads(rec.stdout)["warnings"] if w.startswith("rtt=")]
    assert len(notes) == 1 and notes[0].startswith("rtt=2ms was emulated by a userspace relay"), (
        notes
    )
    measured = float(notes[0].split("(no netem): ")[1].split(" ms measured")[0])
    assert measured > 0


# ----------------------------------------------------------------------------- guests on a network
# disk


# A bound on a hung guest, not a pace: a TCG boot and its two runs took 7-13 s on a quiet host, and
# over 300 s with a second test suite and coverage beside it (as NETWORK_PLAN's run_timeout in
# tests/test_real_guest_network.py).
GUEST_RUN_TIMEOUT_S = 900


def _guest_plan(backing: str) -> Plan:
    return Plan.model_validate(
        {
            "name": "t",
            "tier": ["guest"],
            "format": ["raw"],
            "preallocation": ["off"],
            "cache": ["none"],
            "bus": ["virtio-blk"],
            "lun_write_cache": ["off"],
            "backing": [{"type": backing}],
            "size": "16M",
            "image_size": "64M",
            "runtime": 0.1,
            "null_ceiling": False,
            "workloads": ["rand-write-4k", "rand-read-4k"],
        }
    )


def _guest_runs(
    handle: BackingHandle, workdir: Path, batched: bool
) -> tuple[list[RunOutcome], list[dict[str, object]], float | None]:
    """Every unit of the guest plan on the backing, under the real host sampler wired as the runner
    wires it: in one boot (`batched`, the guest tier's usual way) or a boot each; (outcomes,
    followed processes, I/O CPU s)."""
    assert handle.server is not None
    plan = _guest_plan(handle.server.protocol)
    exp = plan_expansion(plan, None, set())
    assert not [p for p in exp.pruned if p.what.startswith("guest/")], exp.pruned
    target = Target("network", handle.path, server=handle.server)
    tier = GuestTier(plan, RunOptions(workdir=workdir, accel="tcg"))
    tier.open()
    try:
        with HostSampler([], interval=0.2) as s:
            reqs = [
                RunRequest(
                    cell=u.cell,
                    workload=resolve(u.workload.name, None),
                    target=target,
                    shape=JobShape(
                        plan.size_bytes, plan.runtime, image_bytes=plan.image_size_bytes
                    ),
                    run_dir=workdir / "runs" / f"g{i}",
                    timeout_s=GUEST_RUN_TIMEOUT_S,
                    on_process=s.attach_pid,
                    on_server_process=lambda pid: s.attach_pid(pid, role="server"),
                )
                for i, u in enumerate(exp.units)
            ]
            outs = tier.run_batch(reqs) if batched else [tier.run(r) for r in reqs]
    finally:
        tier.close()
    return outs, s.followed_processes(), field_total(s.samples, "iopath.cpu_s")


def _check_guest_runs(
    handle: BackingHandle,
    outs: list[RunOutcome],
    followed: list[dict[str, object]],
    io_cpu: float | None,
    server_name: str,
) -> None:
    assert handle.server is not None
    protocol = handle.server.protocol
    assert len(outs) == 2
    for out in outs:
        assert out.ok, (out.error, out.console_tail[-2000:])
        assert out.metrics["total.iops"] > 0
        nd = out.meta["network_disk"]
        assert nd["protocol"] == protocol and nd["format"] == "raw"
        assert out.meta["network_server"] == handle.server.metadata()
        assert server_name in {p["name"] for p in out.meta["server_processes"]}
        # QEMU opened the disk with its own client: the block layer's graph, on the guest's command
        # line
        argv = " ".join(out.meta["qemu_argv"])
        assert f"file.driver={protocol}" in argv and nd["url"].split("/")[2] in argv
        # the disk was given back: its file is gone from the server
        assert nd["server_path"] and not Path(nd["server_path"]).exists()
    roles = {p["name"]: p["role"] for p in followed}
    assert roles.get(server_name) == "server", roles
    assert io_cpu is not None and io_cpu > 0


def _nothing_left(workdir: Path, server_name: str) -> None:
    assert not live_guest_pids()
    assert not any(
        p.info["name"] in (server_name, "qemu-system-x86_64")
        and str(workdir) in " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["name", "cmdline"])
    )
    assert leftovers.pending(workdir) == []
    backings = workdir / "backings"
    assert not backings.exists() or not any(f.is_file() for f in backings.rglob("*"))


@needs("qemu-system-x86_64")
@root_only
@pytest.mark.slow
def test_a_guest_on_a_lab_started_iscsi_lun(workdir: Path) -> None:
    """Two runs in one TCG boot, each on its own fileio LUN with the write cache off, opened by
    QEMU's libiscsi driver: ok with a positive figure, the LUN, the server and the RTT recorded,
    tgtd counted in the CPU per I/O; no LUN file, tgtd, QEMU or ledger entry left."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    with provision(IscsiBacking(), workdir, set()) as handle:
        outs, followed, io_cpu = _guest_runs(handle, workdir, batched=True)
    _check_guest_runs(handle, outs, followed, io_cpu, "tgtd")
    assert outs[0].boot_id == outs[1].boot_id  # one boot for both
    for out in outs:
        nd = out.meta["network_disk"]
        assert nd["lun_type"] == "fileio" and nd["lun_write_cache_read_back"] == "off"
        assert out.meta["rtt_requested_ms"] == 0.0 and out.meta["rtt_measured_ms"] > 0
    _nothing_left(workdir, "tgtd")


@needs("qemu-system-x86_64")
@root_only
@pytest.mark.slow
def test_a_guest_on_a_file_on_a_lab_started_nfs_export(workdir: Path, host_nfs: None) -> None:
    """A boot per run (the guest tier's single-run path), each on its own raw file on the export,
    opened by QEMU's libnfs driver: ok, recorded, ganesha counted; the export empty and nothing left
    afterwards."""
    if (why := NfsBacking().availability(set())) is not None:
        pytest.skip(why)
    with provision(NfsBacking(), workdir, set()) as handle:
        outs, followed, io_cpu = _guest_runs(handle, workdir, batched=False)
        assert list(handle.server.export_dir.iterdir()) == []
    _check_guest_runs(handle, outs, followed, io_cpu, "ganesha.nfsd")
    _nothing_left(workdir, "ganesha.nfsd")


GUEST_ISCSI_LONG = """
tier = ["guest"]
format = ["raw"]
preallocation = ["off"]
cache = ["none"]
bus = ["virtio-blk"]
workloads = ["rand-write-4k", "rand-read-4k"]
size = "16M"
image_size = "64M"
runtime = RUNTIME
run_timeout = 300
null_ceiling = false
retry_disturbed = false  # what the sweep records is checked, not how clean its runs were
[repetitions]
min = 1
max = 1
[[backing]]
type = "iscsi"
"""


@needs("qemu-system-x86_64")
@root_only
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_guest_sweep_on_iscsi_interrupted_mid_boot_leaves_nothing(
    workdir: Path, sig: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM while a guest runs on its LUNs: the LUNs, their files, tgtd and QEMU are
    gone when `iomatrix run` exits. SIGKILL there: the next `run` removes what the killed one left,
    runs its guest on fresh LUNs and leaves nothing itself."""
    if (why := IscsiBacking().availability(set())) is not None:
        pytest.skip(why)
    (workdir / "p.toml").write_text(GUEST_ISCSI_LONG.replace("RUNTIME", "60"))
    proc = subprocess.Popen(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--accel", "tcg"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    serving = _wait_serving(proc, "qemu-system-x86_64", 300)
    if sig == signal.SIGTERM:
        os.kill(proc.pid, sig)  # the runner alone, as a service manager would stop it
    else:
        # the whole foreground group, as a terminal's Ctrl-C (or a kill -9 of the session)
        os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=180)
    assert "Traceback" not in err
    if sig == signal.SIGKILL:
        (workdir / "p.toml").write_text(GUEST_ISCSI_LONG.replace("RUNTIME", "0.1"))
        again = run_cli(
            "run",
            "p.toml",
            "--db",
            "again.sqlite",
            "--workdir",
            "w",
            "--accel",
            "tcg",
            cwd=workdir,
            timeout=900,
        )
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    else:  # the runner turns SIGTERM into an interruption, as Ctrl-C
        assert proc.returncode == 130, (proc.returncode, out[-2000:] + err[-2000:])
    assert left_behind(workdir / "w", serving) == []
