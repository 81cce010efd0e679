"""`--current` against a sweep's cells: the qcow2 L2 cache size read from libvirt XML and QEMU
options, and how a configuration whose later axes (zero detection, discard, IOThread, L2 cache) the
sweep did not vary for a workload is compared, saying what it took as what."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from iomatrix.report.headline import WorkloadGain
from iomatrix.report.query import CellWorkload
from iomatrix.report.rank import rank_workload
from iomatrix.report.recommend import Gain, workload_verdict
from iomatrix.report.render import gain_text
from tests.conftest import needs

BLOCK = {
    "tier": "blocklayer",
    "format": "qcow2",
    "preallocation": "off",
    "cache": "none",
    "aio": "io_uring",
    "bus": "-",
    "backing": "dir",
    "modifier": "none",
    "detect_zeroes": "off",
    "cluster_size": "64k",
    "l2_cache": "default",
    "iothread": "off",
}
SPARSE = "rand-read-4k-sparse-1t"  # random reads across a 1 TiB thin image: the L2 cache's workload

DOMAIN = """<domain type='kvm'><name>vm</name><memory>1048576</memory><os><type>hvm</type></os><devices>
<disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='none' io='io_uring'>{cache}</driver>
<source file='/var/lib/libvirt/images/vm.qcow2'/><target dev='vda' bus='virtio'/></disk></devices></domain>
"""  # noqa: E501


def _domain(tmp_path: Path, max_size: str) -> Path:
    path = tmp_path / "vm.xml"
    path.write_text(DOMAIN.format(cache=f"<metadata_cache>{max_size}</metadata_cache>"))
    return path


# --------------------------------------------------------------------------- reading the L2 cache
# size


@pytest.mark.parametrize(
    ("option", "value", "bytes_", "l2"),
    [
        ("l2-cache-size", "64M", 64 << 20, "whole-image"),  # above QEMU's 32 MiB default bound
        ("l2-cache-size", "134217728", 128 << 20, "whole-image"),
        # the combined cache, at most 16 MiB of L2: below the default
        ("cache-size", "16M", 16 << 20, None),
    ],
)
def test_qemu_l2_cache_size_is_read(option: str, value: str, bytes_: int, l2: str | None) -> None:
    cfg = parse_current(
        f"-drive file=vm.qcow2,format=qcow2,cache=none,aio=io_uring,if=virtio,{option}={value}"
    )
    assert cfg.l2_cache_bytes == bytes_
    assert cfg.axes.get("l2_cache") == l2  # QEMU's default is left out, as in a cell's key
    assert len(cfg.notes) == 1 and cfg.notes[0].startswith(
        f"l2_cache={l2 or 'default'} from {option}="
    )
    assert ("smaller than QEMU's default" in cfg.notes[0]) == (bytes_ < 32 << 20)


def test_blockdev_format_node_l2_cache_size_and_what_it_covers() -> None:
    cfg = parse_current(
        "-blockdev driver=qcow2,node-name=d,file.driver=file,file.filename=vm.qcow2,"
        "file.aio=native,cache.direct=on,l2-cache-size=128M -device virtio-blk-pci,drive=d"
    )
    assert cfg.axes["l2_cache"] == "whole-image" and cfg.l2_cache_bytes == 128 << 20
    assert "images up to 1 TiB at 64 KiB clusters" in cfg.notes[0]


def test_raw_image_has_no_l2_cache() -> None:
    cfg = parse_current("-drive file=vm.img,format=raw,cache=none,l2-cache-size=64M")
    assert cfg.l2_cache_bytes is None and "l2_cache" not in cfg.axes and not cfg.notes


def test_bad_l2_cache_size_is_one_line_naming_the_option() -> None:
    with pytest.raises(UserError, match="cannot read l2-cache-size 'lots'"):
        parse_current("-drive file=vm.qcow2,format=qcow2,l2-cache-size=lots")


@pytest.mark.parametrize(
    ("max_size", "bytes_"),
    [
        ("<max_size unit='MiB'>256</max_size>", 256 << 20),
        ("<max_size unit='KB'>100000</max_size>", 100_000_000),  # libvirt: KB is 1000 bytes
        ("<max_size>67108864</max_size>", 64 << 20),  # no unit: bytes
        ("<max_size unit='bytes'>8388608</max_size>", 8 << 20),
    ],
)
def test_libvirt_metadata_cache_max_size_is_read(
    tmp_path: Path, max_size: str, bytes_: int
) -> None:
    cfg = parse_current(str(_domain(tmp_path, max_size)))
    assert cfg.l2_cache_bytes == bytes_
    assert cfg.axes.get("l2_cache", "default") == (
        "whole-image" if bytes_ > 32 << 20 else "default"
    )
    assert "from metadata_cache max_size=" in cfg.notes[0]


@needs("virt-xml-validate")
def test_the_metadata_cache_domain_is_valid_libvirt_xml(tmp_path: Path) -> None:
    path = _domain(tmp_path, "<max_size unit='MiB'>256</max_size>")
    proc = subprocess.run(
        ["virt-xml-validate", str(path), "domain"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_libvirt_bad_unit_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="metadata_cache max_size"):
        parse_current(str(_domain(tmp_path, "<max_size unit='parsecs'>3</max_size>")))


# --------------------------------------------------------------------------- comparing with the
# sweep's cells


def _cell(
    cid: int, workload: str, values: list[float], metric: str = "read.iops", **axes: str
) -> CellWorkload:
    c = CellWorkload(
        cid,
        f"k{cid}",
        {**BLOCK, **axes},
        {"kind": "dir"},
        workload,
        ["kvm"],
        runs=[cid * 100 + i for i in range(len(values))],
    )
    c.samples[metric] = list(values)
    return c


def _current_gain(cells: list[CellWorkload], workload: str, current: str) -> Gain:
    wr = rank_workload(cells, workload, None, min_n=2)
    assert wr is not None
    v = workload_verdict(cells, wr, [], parse_current(current))
    return next(g for g in v.gains if g.against.startswith("current"))


READS = [
    _cell(1, "rand-read-4k", [100.0, 101.0, 99.0, 100.0]),
    _cell(2, "rand-read-4k", [50.0, 51.0, 49.0, 50.0], cache="writeback"),
]


def test_axes_a_read_workload_cannot_show_are_compared_at_the_cells_value_and_said() -> None:
    # What Proxmox runs with discard=on (detect_zeroes=unmap) and an IOThread, against a sweep that
    # ran reads with zero detection off and no IOThread: the comparison is made, and says what it
    # took as what.
    g = _current_gain(
        READS,
        "rand-read-4k",
        "cache=writeback,aio=io_uring,format=qcow2,discard=unmap,detect_zeroes=unmap,iothread=on",
    )
    assert g.label is not None and "cache=writeback" in g.label and g.ratio is not None
    assert g.assumed == (
        "discard=unmap as ignore (cannot show)",
        "detect_zeroes=unmap as off (cannot show)",
        "iothread=on as off (not varied)",
    )
    assert "rand-read-4k only reads" in g.note and "ran rand-read-4k at iothread=off only" in g.note
    text = gain_text(
        WorkloadGain("rand-read-4k", "read.iops", "answer", "current (writeback)", g, "blocklayer"),
        "chosen",
    )
    assert text.endswith(
        "(taking discard=unmap as ignore (cannot show), detect_zeroes=unmap as off (cannot show), "
        "iothread=on as off (not varied))"
    )


def test_a_first_release_axis_is_never_taken_as_another_value() -> None:
    g = _current_gain(READS, "rand-read-4k", "cache=directsync,aio=io_uring,format=qcow2")
    assert g.label is None and g.note.startswith("not measured in this sweep") and not g.assumed


def test_a_later_axis_the_current_configuration_leaves_out_is_qemus_default() -> None:
    # The sweep asked 64k vs 1M clusters; a configuration that does not name a cluster size runs 64k
    # (it used to match whichever cell was chosen: "1.00×: it is current").
    cells = [
        _cell(
            1, "rand-write-4k-first", [130.0, 128.0, 131.0, 129.0], "write.iops", cluster_size="1M"
        ),
        _cell(2, "rand-write-4k-first", [100.0, 101.0, 99.0, 100.0], "write.iops"),
    ]
    g = _current_gain(cells, "rand-write-4k-first", "cache=none,aio=io_uring,format=qcow2")
    assert (
        g.label is not None
        and "cluster_size" not in g.label
        and g.ratio is not None
        and g.ratio.ratio > 1.2
    )


SPARSE_CELLS = [
    _cell(1, SPARSE, [160.0, 170.0, 165.0, 168.0], l2_cache="whole-image"),
    _cell(2, SPARSE, [15.0, 15.5, 14.8, 15.2]),
]


def test_an_l2_cache_holding_the_whole_image_is_the_whole_image_cell() -> None:
    # 1 TiB at 64 KiB clusters has 128 MiB of L2 tables: a 128 MiB bound holds them all.
    g = _current_gain(
        SPARSE_CELLS,
        SPARSE,
        "-drive file=vm.qcow2,format=qcow2,cache=none,aio=io_uring,l2-cache-size=128M",
    )
    assert g.label is not None and "whole-image" in g.label and g.note == "same cell"


def test_an_l2_cache_holding_part_of_the_image_is_between_the_measured_values() -> None:
    g = _current_gain(
        SPARSE_CELLS,
        SPARSE,
        "-drive file=vm.qcow2,format=qcow2,cache=none,aio=io_uring,l2-cache-size=64M",
    )
    assert g.label is None and g.ratio is None
    assert g.note == (
        f"its L2 cache bound (64 MiB) holds part of the L2 metadata of {SPARSE}'s 1 TiB image: "
        "between l2_cache=default and whole-image, neither measured"
    )


def test_no_l2_cache_size_is_qemus_default_cache() -> None:
    g = _current_gain(SPARSE_CELLS, SPARSE, "cache=none,aio=io_uring,format=qcow2")
    assert g.label is not None and "whole-image" not in g.label
    assert g.ratio is not None and g.ratio.ratio > 10


def test_a_size_that_is_no_whole_binary_unit_reads_to_one_decimal(tmp_path: Path) -> None:
    cfg = parse_current(str(_domain(tmp_path, "<max_size unit='KB'>100000</max_size>")))
    assert cfg.notes == [
        "l2_cache=whole-image from metadata_cache max_size=95.4 MiB: it holds the whole "
        "L2 metadata "
        "of images up to 762.9 GiB at 64 KiB clusters (QEMU's default cache: up to 256 GiB)"
    ]
