"""Guest tier: result extraction from a real ttyS1 capture (no QEMU)."""

from __future__ import annotations

import pytest

from iomatrix.guest.stream import (
    extract_fio_json,
    fs_result_from_block,
    parse_result_stream,
    run_phases,
)

# Captured from a real TCG guest (null-co ceiling, fio 4k randread io_uring), with junk injected the
# way fio#731 reports it (an error line and a broken brace before the JSON) and CRLF/escape noise.
CAPTURE = (
    "\x00\x1b[0m@@IOMX:MARK:init:2.62@@\r\n"
    "@@IOMX:MARK:modules:3.02@@\r\n"
    "@@IOMX:BEGIN:disk@@\r\n"
    '{"disk": "vda", "tar": "", "write_cache": "write back", "size_bytes": 1073741824'
    "}\r\n"
    "\r\n"
    "@@IOMX:END:disk@@\n"
    "@@IOMX:MARK:workload_start:3.14@@\n"
    "@@IOMX:MARK:workload_end:5.55@@\n"
    "@@IOMX:BEGIN:fio@@\n"
    "fio: io_u error on file /dev/vda: Input/output error: write offset=0, buflen=409"
    "6\n"
    "{ not json\n"
    "{\n"
    '  "fio version" : "fio-3.33",\n'
    '  "timestamp" : 1795218940,\n'
    '  "timestamp_ms" : 1795218940826,\n'
    '  "time" : "Fri Nov 20 23:55:40 2026",\n'
    '  "jobs" : [\n'
    "    {\n"
    '      "jobname" : "r",\n'
    '      "groupid" : 0,\n'
    '      "error" : 0,\n'
    '      "eta" : 0,\n'
    '      "elapsed" : 3,\n'
    '      "job options" : {\n'
    '        "rw" : "randread",\n'
    '        "bs" : "4k",\n'
    '        "direct" : "1",\n'
    '        "ioengine" : "io_uring",\n'
    '        "iodepth" : "8",\n'
    '        "runtime" : "2",\n'
    '        "time_based" : "1",\n'
    '        "filename" : "/dev/vda"\n'
    "      },\n"
    '      "read" : {\n'
    '        "io_bytes" : 50085888,\n'
    '        "io_kbytes" : 48912,\n'
    '        "bw_bytes" : 25030428,\n'
    '        "bw" : 24443,\n'
    '        "iops" : 6110.944528,\n'
    '        "runtime" : 2001,\n'
    '        "total_ios" : 12228,\n'
    '        "short_ios" : 0,\n'
    '        "drop_ios" : 0,\n'
    '        "slat_ns" : {\n'
    '          "min" : 50048,\n'
    '          "max" : 4489717,\n'
    '          "mean" : 116094.705185,\n'
    '          "stddev" : 124622.228552,\n'
    '          "N" : 12228\n'
    "        },\n"
    '        "clat_ns" : {\n'
    '          "min" : 219599,\n'
    '          "max" : 8334913,\n'
    '          "mean" : 1145444.319594,\n'
    '          "stddev" : 532587.327759,\n'
    '          "N" : 12228,\n'
    '          "percentile" : {\n'
    '            "1.000000" : 626688,\n'
    '            "5.000000" : 675840,\n'
    '            "10.000000" : 741376,\n'
    '            "20.000000" : 831488,\n'
    '            "30.000000" : 872448,\n'
    '            "40.000000" : 905216,\n'
    '            "50.000000" : 954368,\n'
    '            "60.000000" : 1028096,\n'
    '            "70.000000" : 1155072,\n'
    '            "80.000000" : 1335296,\n'
    '            "90.000000" : 1875968,\n'
    '            "95.000000" : 2179072,\n'
    '            "99.000000" : 3227648,\n'
    '            "99.500000" : 3784704,\n'
    '            "99.900000" : 4358144,\n'
    '            "99.950000" : 6979584,\n'
    '            "99.990000" : 7045120\n'
    "          }\n"
    "        },\n"
    '        "lat_ns" : {\n'
    '          "min" : 377437,\n'
    '          "max" : 12824630,\n'
    '          "mean" : 1261539.024779,\n'
    '          "stddev" : 569937.633480,\n'
    '          "N" : 12228\n'
    "        },\n"
    '        "bw_min" : 23417,\n'
    '        "bw_max" : 24886,\n'
    '        "bw_agg" : 99.653174,\n'
    '        "bw_mean" : 24359.666667,\n'
    '        "bw_dev" : 818.223889,\n'
    '        "bw_samples" : 3,\n'
    '        "iops_min" : 5854,\n'
    '        "iops_max" : 6221,\n'
    '        "iops_mean" : 6089.666667,\n'
    '        "iops_stddev" : 204.539320,\n'
    '        "iops_samples" : 3\n'
    "      },\n"
    '      "write" : {\n'
    '        "io_bytes" : 0,\n'
    '        "io_kbytes" : 0,\n'
    '        "bw_bytes" : 0,\n'
    '        "bw" : 0,\n'
    '        "iops" : 0.000000,\n'
    '        "runtime" : 0,\n'
    '        "total_ios" : 0,\n'
    '        "short_ios" : 0,\n'
    '        "drop_ios" : 0,\n'
    '        "slat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "clat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "lat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "bw_min" : 0,\n'
    '        "bw_max" : 0,\n'
    '        "bw_agg" : 0.000000,\n'
    '        "bw_mean" : 0.000000,\n'
    '        "bw_dev" : 0.000000,\n'
    '        "bw_samples" : 0,\n'
    '        "iops_min" : 0,\n'
    '        "iops_max" : 0,\n'
    '        "iops_mean" : 0.000000,\n'
    '        "iops_stddev" : 0.000000,\n'
    '        "iops_samples" : 0\n'
    "      },\n"
    '      "trim" : {\n'
    '        "io_bytes" : 0,\n'
    '        "io_kbytes" : 0,\n'
    '        "bw_bytes" : 0,\n'
    '        "bw" : 0,\n'
    '        "iops" : 0.000000,\n'
    '        "runtime" : 0,\n'
    '        "total_ios" : 0,\n'
    '        "short_ios" : 0,\n'
    '        "drop_ios" : 0,\n'
    '        "slat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "clat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "lat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        },\n"
    '        "bw_min" : 0,\n'
    '        "bw_max" : 0,\n'
    '        "bw_agg" : 0.000000,\n'
    '        "bw_mean" : 0.000000,\n'
    '        "bw_dev" : 0.000000,\n'
    '        "bw_samples" : 0,\n'
    '        "iops_min" : 0,\n'
    '        "iops_max" : 0,\n'
    '        "iops_mean" : 0.000000,\n'
    '        "iops_stddev" : 0.000000,\n'
    '        "iops_samples" : 0\n'
    "      },\n"
    '      "sync" : {\n'
    '        "total_ios" : 0,\n'
    '        "lat_ns" : {\n'
    '          "min" : 0,\n'
    '          "max" : 0,\n'
    '          "mean" : 0.000000,\n'
    '          "stddev" : 0.000000,\n'
    '          "N" : 0\n'
    "        }\n"
    "      },\n"
    '      "job_runtime" : 2001,\n'
    '      "usr_cpu" : 30.984508,\n'
    '      "sys_cpu" : 33.583208,\n'
    '      "ctx" : 12575,\n'
    '      "majf" : 0,\n'
    '      "minf" : 17,\n'
    '      "iodepth_level" : {\n'
    '        "1" : 0.100000,\n'
    '        "2" : 0.100000,\n'
    '        "4" : 0.100000,\n'
    '        "8" : 99.942754,\n'
    '        "16" : 0.000000,\n'
    '        "32" : 0.000000,\n'
    '        ">=64" : 0.000000\n'
    "      },\n"
    '      "iodepth_submit" : {\n'
    '        "0" : 0.000000,\n'
    '        "4" : 100.000000,\n'
    '        "8" : 0.000000,\n'
    '        "16" : 0.000000,\n'
    '        "32" : 0.000000,\n'
    '        "64" : 0.000000,\n'
    '        ">=64" : 0.000000\n'
    "      },\n"
    '      "iodepth_complete" : {\n'
    '        "0" : 0.000000,\n'
    '        "4" : 99.991818,\n'
    '        "8" : 0.100000,\n'
    '        "16" : 0.000000,\n'
    '        "32" : 0.000000,\n'
    '        "64" : 0.000000,\n'
    '        ">=64" : 0.000000\n'
    "      },\n"
    '      "latency_ns" : {\n'
    '        "2" : 0.000000,\n'
    '        "4" : 0.000000,\n'
    '        "10" : 0.000000,\n'
    '        "20" : 0.000000,\n'
    '        "50" : 0.000000,\n'
    '        "100" : 0.000000,\n'
    '        "250" : 0.000000,\n'
    '        "500" : 0.000000,\n'
    '        "750" : 0.000000,\n'
    '        "1000" : 0.000000\n'
    "      },\n"
    '      "latency_us" : {\n'
    '        "2" : 0.000000,\n'
    '        "4" : 0.000000,\n'
    '        "10" : 0.000000,\n'
    '        "20" : 0.000000,\n'
    '        "50" : 0.000000,\n'
    '        "100" : 0.000000,\n'
    '        "250" : 0.010000,\n'
    '        "500" : 0.016356,\n'
    '        "750" : 10.565914,\n'
    '        "1000" : 46.589794\n'
    "      },\n"
    '      "latency_ms" : {\n'
    '        "2" : 35.075237,\n'
    '        "4" : 7.466470,\n'
    '        "10" : 0.278050,\n'
    '        "20" : 0.000000,\n'
    '        "50" : 0.000000,\n'
    '        "100" : 0.000000,\n'
    '        "250" : 0.000000,\n'
    '        "500" : 0.000000,\n'
    '        "750" : 0.000000,\n'
    '        "1000" : 0.000000,\n'
    '        "2000" : 0.000000,\n'
    '        ">=2000" : 0.000000\n'
    "      },\n"
    '      "latency_depth" : 8,\n'
    '      "latency_target" : 0,\n'
    '      "latency_percentile" : 100.000000,\n'
    '      "latency_window" : 0\n'
    "    }\n"
    "  ],\n"
    '  "disk_util" : [\n'
    "    {\n"
    '      "name" : "vda",\n'
    '      "read_ios" : 11467,\n'
    '      "write_ios" : 0,\n'
    '      "read_merges" : 0,\n'
    '      "write_merges" : 0,\n'
    '      "read_ticks" : 1219,\n'
    '      "write_ticks" : 0,\n'
    '      "in_queue" : 1219,\n'
    '      "util" : 57.513729\n'
    "    }\n"
    "  ]\n"
    "}\n"
    "\n"
    "@@IOMX:END:fio@@\n"
    "@@IOMX:MARK:done:5.59@@\n"
)


def test_marks_and_blocks_from_real_capture() -> None:
    stream = parse_result_stream(CAPTURE)
    assert set(stream.marks) >= {"init", "modules", "workload_start", "workload_end", "done"}
    assert stream.marks["workload_end"] > stream.marks["workload_start"] > stream.marks["init"]
    assert '"disk": "vda"' in stream.blocks["disk"]


def test_fio_json_survives_junk_before_it() -> None:
    stream = parse_result_stream(CAPTURE)
    fio = extract_fio_json(stream.blocks["fio"])
    assert fio is not None
    assert fio["fio version"] == "fio-3.33"
    assert fio["jobs"][0]["read"]["iops"] > 0


def test_fio_json_with_trailing_junk_and_none() -> None:
    assert extract_fio_json('fio: warn\n{"jobs": [{"a": 1}]}\nfio: trailing noise {') == {
        "jobs": [{"a": 1}]
    }
    assert extract_fio_json("fio: file:ioengines.c:1: error\n") is None
    assert extract_fio_json('{"not": "fio"}') is None


def test_unterminated_block_is_ignored() -> None:
    stream = parse_result_stream('@@IOMX:BEGIN:fio@@\n{"jobs": []}\n')
    assert "fio" not in stream.blocks


def test_fs_block() -> None:
    block = (
        '{"fs": "ext4", "steps": [{"name": "mkfs", "start": 1.0, "end": 1.5}, '
        '{"name": "find", "start": 2.0, "end": 2.25}, {"name": "tar_list", "start": '
        '2.25, "end": 3.0}]}'
    )
    res = fs_result_from_block(block)
    assert res == {
        "fs": "ext4",
        "steps": {"mkfs": 0.5, "find": 0.25, "tar_list": 0.75},
        "timed_s": 1.0,
        "untimed_s": 0.5,
    }
    assert fs_result_from_block("garbage") is None


def test_phases_split() -> None:
    host = {"init": 10.0 + 0.4 + 2.0, "workload_start": 12.6, "workload_end": 15.6}
    guest = {"init": 2.0, "modules": 2.1, "workload_start": 2.2, "workload_end": 5.2}
    ph = run_phases(10.0, 15.7, host, guest)
    assert ph["qemu_start_s"] == pytest.approx(0.4)
    assert ph["boot_to_workload_s"] == pytest.approx(2.2)
    assert ph["workload_s"] == pytest.approx(3.0)
    assert ph["shutdown_s"] == pytest.approx(0.1)
    assert ph["wall_s"] == pytest.approx(5.7)


def test_a_shutdown_whose_mark_was_read_after_the_exit_is_not_measured() -> None:
    """On a loaded host the reader thread may stamp the workload's end after QEMU has exited (seen
    in CI: a whole cell's shutdown_s 0.0): the shutdown's length is then unknown and left out, not
    recorded as 0; a mark read before the exit still gives it."""
    host = {"init": 12.4, "workload_start": 12.6, "workload_end": 15.8}
    guest = {"init": 2.0, "workload_start": 2.2, "workload_end": 5.2}
    late = run_phases(10.0, 15.7, host, guest)
    assert "shutdown_s" not in late and late["workload_s"] == pytest.approx(3.0)
    assert "shutdown_s" not in run_phases(10.0, 15.8, host, guest)  # the same instant
    assert run_phases(10.0, 15.9, host, guest)["shutdown_s"] == pytest.approx(0.1)
