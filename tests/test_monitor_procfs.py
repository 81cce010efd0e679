"""Parsers and rate functions against real /proc content captured on a 2-core
Debian 12 VM (kernel 6.18) while fio wrote to an ext4 on a loop device
(/dev/loop0) over a sparse file on /dev/vda. See tests/data/proc/capture.sh.
Snapshots *.0 and *.1 were taken 1 s apart; the tests use interval = 1.0.

Every expected value is worked out by hand from the captured lines quoted in
the comments, never by calling the function under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.monitor import procfs

DATA = Path(__file__).parent / "data" / "proc"
MIB = 1048576


def _text(name: str) -> str:
    return (DATA / name).read_text()


# ----------------------------------------------------------------------------- /proc/stat

# stat.0: cpu  10992 0 2249 31887 566 0 116 68 0 0
# stat.1: cpu  11006 0 2314 31914 652 0 121 68 0 0
# deltas: user 14, nice 0, system 65, idle 27, iowait 86, irq 0, softirq 5, steal 0 -> total 197


def test_parse_proc_stat_aggregate_line():
    c = procfs.parse_proc_stat(_text("stat.0"))
    assert (c.user, c.nice, c.system, c.idle, c.iowait, c.irq, c.softirq, c.steal) == (
        10992,
        0,
        2249,
        31887,
        566,
        0,
        116,
        68,
    )


def test_cpu_pct_from_captured_snapshots():
    a, b = procfs.parse_proc_stat(_text("stat.0")), procfs.parse_proc_stat(_text("stat.1"))
    pct = procfs.cpu_pct(a, b)
    assert pct["usr"] == pytest.approx(100 * 14 / 197)  # user + nice
    assert pct["sys"] == pytest.approx(100 * (65 + 0 + 5) / 197)  # system + irq + softirq
    assert pct["iowait"] == pytest.approx(100 * 86 / 197)
    assert pct["steal"] == pytest.approx(0.0)
    assert pct["idle"] == pytest.approx(100 * 27 / 197)
    assert sum(pct.values()) == pytest.approx(100.0)


def test_cpu_pct_zero_interval_and_backwards_counter():
    a = procfs.parse_proc_stat("cpu  100 0 50 1000 20 0 0 0 0 0\n")
    assert procfs.cpu_pct(a, a) == {
        "usr": 0.0,
        "sys": 0.0,
        "iowait": 0.0,
        "steal": 0.0,
        "idle": 0.0,
    }
    # iowait going backwards (NO_HZ wobble) counts as 0, not negative
    b = procfs.parse_proc_stat("cpu  110 0 50 1010 19 0 0 0 0 0\n")
    assert procfs.cpu_pct(a, b) == {
        "usr": 50.0,
        "sys": 0.0,
        "iowait": 0.0,
        "steal": 0.0,
        "idle": 50.0,
    }


def test_parse_proc_stat_rejects_garbage():
    with pytest.raises(ValueError):
        procfs.parse_proc_stat("intr 1 2 3\n")


# ----------------------------------------------------------------------------- /proc/diskstats

# diskstats.0:   7 0 loop0 183 0 4510 10 21970 3572 2687813 4805 1 2040 6155 3 0 2711560 17 3314
# 1321 diskstats.1:   7 0 loop0 183 0 4510 10 30433 3813 3639821 6650 1 2776 8496 3 0 2711560 17
# 4482 1817 diskstats.0: 254 0 vda 27631 5119 1537538 4198 53492 19602 5422792 15127 9 5832 19881
#                              5781 0 961688 356 7818 199
# diskstats.1: 254 0 vda 27631 5119 1537538 4198 63480 19602 6383120 17890 3 6236 22678
#                              5783 0 961704 356 8986 232


def test_parse_diskstats_fields_and_filter():
    all_ = procfs.parse_diskstats(_text("diskstats.0"))
    assert {"loop0", "vda", "zram0"} <= set(all_)
    vda = all_["vda"]
    assert (vda.major, vda.minor, vda.reads, vda.sectors_read) == (254, 0, 27631, 1537538)
    assert vda.read_ticks == 4198
    assert (vda.writes, vda.writes_merged, vda.sectors_written) == (53492, 19602, 5422792)
    assert vda.write_ticks == 15127
    assert (vda.in_flight, vda.io_ticks, vda.time_in_queue) == (9, 5832, 19881)
    assert (vda.discards, vda.sectors_discarded, vda.flushes, vda.flush_ticks) == (
        5781,
        961688,
        7818,
        199,
    )
    only = procfs.parse_diskstats(_text("diskstats.0"), {"loop0"})
    assert list(only) == ["loop0"]


def test_parse_diskstats_old_kernel_14_fields():
    d = procfs.parse_diskstats("   8       0 sda 10 0 80 5 20 0 160 7 0 9 12\n")["sda"]
    assert (d.writes, d.io_ticks, d.time_in_queue, d.discards, d.flushes) == (20, 9, 12, 0, 0)


def test_disk_rates_loop_device():
    a = procfs.parse_diskstats(_text("diskstats.0"))["loop0"]
    b = procfs.parse_diskstats(_text("diskstats.1"))["loop0"]
    r = procfs.disk_rates(a, b, 1.0)
    assert r["read_mbps"] == 0.0 and r["read_iops"] == 0.0
    assert r["write_mbps"] == pytest.approx((3639821 - 2687813) * 512 / MIB)  # 464.85 MiB/s
    assert r["write_iops"] == pytest.approx(30433 - 21970)  # 8463
    assert r["util_pct"] == pytest.approx((2776 - 2040) / 1000 * 100)  # 73.6 %
    assert r["await_ms"] == pytest.approx((6650 - 4805) / (30433 - 21970))  # 0.218 ms
    assert r["queue_depth"] == pytest.approx((8496 - 6155) / 1000)  # 2.341


def test_disk_rates_physical_disk_and_interval_scaling():
    a = procfs.parse_diskstats(_text("diskstats.0"))["vda"]
    b = procfs.parse_diskstats(_text("diskstats.1"))["vda"]
    r = procfs.disk_rates(a, b, 1.0)
    assert r["write_mbps"] == pytest.approx(960328 * 512 / MIB)  # 468.9 MiB/s
    assert r["write_iops"] == pytest.approx(9988)
    assert r["util_pct"] == pytest.approx(40.4)
    assert r["await_ms"] == pytest.approx(2763 / 9988)
    assert r["queue_depth"] == pytest.approx(2.797)
    r2 = procfs.disk_rates(a, b, 2.0)
    assert r2["write_mbps"] == pytest.approx(960328 * 512 / MIB / 2)
    assert r2["util_pct"] == pytest.approx(20.2)
    assert r2["await_ms"] == pytest.approx(2763 / 9988)  # await does not depend on the interval


def test_disk_rates_idle_interval_has_no_await_and_util_is_capped():
    a = procfs.parse_diskstats("7 0 loop1 0 0 0 0 0 0 0 0 0 100 100\n")["loop1"]
    b = procfs.parse_diskstats("7 0 loop1 0 0 0 0 0 0 0 0 0 1150 100\n")["loop1"]
    r = procfs.disk_rates(a, b, 1.0)
    assert "await_ms" not in r
    assert r["util_pct"] == 100.0
    with pytest.raises(ValueError):
        procfs.disk_rates(a, b, 0.0)


def test_disk_rates_counter_reset_is_zero_not_negative():
    a = procfs.parse_diskstats("7 0 loop1 5 0 80 3 9 0 800 4 0 10 10\n")["loop1"]
    b = procfs.parse_diskstats("7 0 loop1 0 0 0 0 0 0 0 0 0 0 0\n")["loop1"]
    assert all(v == 0.0 for v in procfs.disk_rates(a, b, 1.0).values())


# ----------------------------------------------------------------------------- /proc/meminfo

# meminfo.1: MemTotal 24682416, MemFree 21976916, Buffers 92272, Cached 2338848,
#            SReclaimable 132640, Dirty 111304, Writeback 0 (kB)
# meminfo.0: Writeback 512 kB


def test_parse_meminfo():
    m = procfs.parse_meminfo(_text("meminfo.1"))
    assert m["MemTotal"] == 24682416 and m["Cached"] == 2338848 and m["SReclaimable"] == 132640
    assert "HugePages_Total" in m


def test_mem_mb_used_excludes_cache():
    mb = procfs.mem_mb(procfs.parse_meminfo(_text("meminfo.1")))
    # 138.4
    assert mb["used"] == pytest.approx((24682416 - 21976916 - 92272 - 2338848 - 132640) / 1024)
    assert mb["cached"] == pytest.approx((2338848 + 132640) / 1024)
    assert mb["buffers"] == pytest.approx(92272 / 1024)
    assert mb["dirty"] == pytest.approx(111304 / 1024)
    assert mb["writeback"] == 0.0
    assert mb["used"] + mb["cached"] + mb["buffers"] + 21976916 / 1024 == pytest.approx(
        24682416 / 1024
    )
    assert procfs.mem_mb(procfs.parse_meminfo(_text("meminfo.0")))["writeback"] == 0.5


# ----------------------------------------------------------------------------- /proc/pressure

# pressure_io.0:  some ... total=3665756 / full ... total=3458802
# pressure_io.1:  some ... total=4172259 / full ... total=3911370
# pressure_cpu.0: some ... total=13160747, pressure_cpu.1: some ... total=13266832


def test_parse_pressure():
    p = procfs.parse_pressure(_text("pressure_io.1"))
    assert p["some"] == procfs.PsiLine(13.72, 2.83, 0.89, 4172259)
    assert p["full"].total == 3911370 and p["full"].avg10 == 12.73
    assert set(procfs.parse_pressure(_text("pressure_cpu.0"))) == {"some", "full"}
    assert "full" not in procfs.parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")


def test_psi_stall_pct_from_totals():
    a, b = (
        procfs.parse_pressure(_text("pressure_io.0")),
        procfs.parse_pressure(_text("pressure_io.1")),
    )
    assert procfs.psi_stall_pct(a["some"], b["some"], 1.0) == pytest.approx(
        (4172259 - 3665756) / 1e6 * 100
    )
    assert procfs.psi_stall_pct(a["full"], b["full"], 1.0) == pytest.approx(
        (3911370 - 3458802) / 1e6 * 100
    )
    c0, c1 = (
        procfs.parse_pressure(_text("pressure_cpu.0")),
        procfs.parse_pressure(_text("pressure_cpu.1")),
    )
    assert procfs.psi_stall_pct(c0["some"], c1["some"], 0.5) == pytest.approx(106085 / 0.5e6 * 100)
    m0 = procfs.parse_pressure(_text("pressure_memory.0"))
    m1 = procfs.parse_pressure(_text("pressure_memory.1"))
    assert procfs.psi_stall_pct(m0["some"], m1["some"], 1.0) == 0.0


def test_ksm_files():
    assert procfs.parse_int_file(_text("ksm_pages_sharing.1")) == 0
    assert procfs.parse_int_file("1234\n") == 1234
