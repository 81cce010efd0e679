"""Network disks through the tiers (issue 34): the QEMU graph over an iSCSI LUN or a file on an NFS export, the
disk a run asks its server for, and the server's processes counted in the CPU per I/O.

The fast tests pin the argv builders and the pure helpers; the slow ones run the real thing end to end: a
lab-started tgtd / nfs-ganesha, qemu-storage-daemon opening the network disk and fio's nbd engine driving it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from iomatrix.backing.network import NetworkDisk
from iomatrix.matrix import Cell
from iomatrix.monitor.sampler import HostSampler
from iomatrix.monitor.summary import field_total
from iomatrix.qemu_block import DiskSpec, blockdev_spec, out_of_space
from iomatrix.tiers.blocklayer import daemon_argv
from iomatrix.tiers.network_disks import disk_name, disk_values, wants_rtt

IQN = "iqn.2026-11.io.iomatrix:t1"
LUN = NetworkDisk("iscsi", (("driver", "iscsi"), ("transport", "tcp"), ("portal", "127.0.0.1:3261"),
                            ("target", IQN), ("lun", "1")),
                  f"iscsi://127.0.0.1:3261/{IQN}/1", "raw", 1 << 30, Path("/w/lun1.img"))
NFS_FILE = NetworkDisk("nfs", (("driver", "nfs"), ("server.type", "inet"), ("server.host", "127.0.0.1"),
                               ("path", "/w/export/d,1.qcow2")),
                       "nfs://127.0.0.1/w/export/d,1.qcow2", "qcow2", 1 << 30)


# ----------------------------------------------------------------------------- the -blockdev graph

def test_format_node_over_the_iscsi_protocol_node_with_the_cache_switches_on_both():
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="none", aio="threads"))
    assert spec == ("driver=raw,node-name=d0,cache.direct=on,cache.no-flush=off,file.driver=iscsi,"
                    f"file.transport=tcp,file.portal=127.0.0.1:3261,file.target={IQN},file.lun=1,"
                    "file.cache.direct=on,file.cache.no-flush=off")


def test_no_file_protocol_option_on_a_network_protocol_node():
    """aio is an option of QEMU's file protocol only: libiscsi would refuse it (the axes prune aio ≠ default
    on a network backing; a disk built anyway still gets a graph QEMU accepts)."""
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="none", aio="native"))
    assert "aio" not in spec and "filename" not in spec


def test_nfs_file_under_a_qcow2_node_with_a_comma_escaped():
    spec = blockdev_spec(DiskSpec(NFS_FILE, format="qcow2", cache="writeback"))
    assert spec.startswith("driver=qcow2,node-name=d0,cache.direct=off,cache.no-flush=off,")
    assert (",file.driver=nfs,file.server.type=inet,file.server.host=127.0.0.1,file.path=/w/export/d,,1.qcow2,"
            "file.cache.direct=off,file.cache.no-flush=off") in spec


def test_unsafe_drops_flushes_on_both_nodes_of_a_network_disk():
    spec = blockdev_spec(DiskSpec(LUN, format="raw", cache="unsafe"))
    assert "cache.no-flush=on" in spec and "file.cache.no-flush=on" in spec


def test_a_cells_disk_on_a_network_target_keeps_the_disk():
    cell = Cell.of(tier="blocklayer", backing="iscsi", format="raw", cache="directsync", aio="threads")
    disk = DiskSpec.for_cell(cell, LUN, 1 << 30)
    assert disk.target is LUN
    argv = daemon_argv("qemu-storage-daemon", disk, 3)
    assert argv[argv.index("--blockdev") + 1] == blockdev_spec(disk)
    assert argv[argv.index("--export") + 1].endswith(",writethrough=on")  # directsync: the export's half


def test_a_network_disk_is_never_judged_out_of_space_from_a_local_filesystem():
    assert out_of_space(LUN) is None


# ----------------------------------------------------------------------------- what a run asks its server for

def test_the_server_reads_the_axes_that_apply_and_a_raw_file_without_a_format_axis():
    cell = Cell.of(tier="baremetal", backing="iscsi", cache="none", aio="threads")
    values = disk_values(cell)
    assert values["format"] == "raw" and values["cache"] == "none"
    assert "-" not in values.values()
    assert disk_values(Cell.of(tier="blocklayer", format="qcow2", cache="none"))["format"] == "qcow2"


def test_disk_names_are_unique_and_fit_a_file_name_and_an_iqn():
    a, b = disk_name("blk", "rand-write-4k"), disk_name("blk", "Custom/Job.fio")
    assert a != b and a.startswith("blk-")
    assert all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in a + b)


def test_rtt_zero_or_absent_means_the_direct_path():
    assert not wants_rtt(Cell.of(tier="blocklayer"))
    assert not wants_rtt({"rtt": "0"})
    assert wants_rtt({"rtt": "0.5ms"})


# ----------------------------------------------------------------------------- the server's CPU

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: time.sleep(0) or None\n"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_server_process_counts_in_the_io_paths_cpu_under_its_own_role():
    """tgtd / ganesha.nfsd attached with role "server" are part of what an I/O costs (iopath.*), and listed as
    "server" in the run's followed processes."""
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
