"""--current input that cannot be read is refused in one line naming the problem, never a traceback
(issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.errors import UserError
from tests.conftest import run_cli
from tests.test_current import DOMAIN

# The CD-ROM on sdb (a name a disk could have), the data disk on vdb.
CDROM_SDA = DOMAIN.replace(
    "<target dev='hdc' bus='ide'/>", "<target dev='sdb' bus='sata'/>"
).replace("<target dev='sda' bus='scsi'/>", "<target dev='vdb' bus='virtio'/>")


def _one_line(value: str, disk: str | None = None) -> str:
    with pytest.raises(UserError) as e:
        parse_current(value, disk)
    line = e.value.one_line()
    assert "\n" not in line and "Traceback" not in line
    return line


def test_an_unbalanced_quote_is_named() -> None:
    line = _one_line("-drive file='/vm/a.qcow2,cache=none")
    assert "no closing quotation" in line and "quote" in line and "ValueError" not in line


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    adir = tmp_path / "adir"
    adir.mkdir()
    line = _one_line(str(adir))
    assert f"{adir} is a directory" in line and "axis" not in line


def test_a_binary_file_is_named_without_the_codec_message(tmp_path: Path) -> None:
    blob = tmp_path / "vm.xml"
    blob.write_bytes(b"<domain>\x00\xff\xfe garbage")
    line = _one_line(str(blob))
    assert "is not a text file (byte 0xff at offset 9 is not UTF-8)" in line
    assert "codec" not in line and "utf-8' codec" not in line


def test_a_cdrom_named_as_the_disk_is_called_a_cdrom_and_only_disks_are_listed(
    tmp_path: Path,
) -> None:
    xml = tmp_path / "vm.xml"
    xml.write_text(CDROM_SDA)
    line = _one_line(str(xml), "sdb")
    assert line.startswith("--current-disk: sdb in vm.xml is a cdrom drive, not a disk")
    assert line.endswith("disks in it: vda, vdb (--current-disk DEV)")
    assert "has no disk" not in line
    # An unknown name lists the disks, not the CD-ROM.
    assert _one_line(str(xml), "vdz").endswith("disks in it: vda, vdb (--current-disk DEV)")


def test_current_disk_with_a_value_that_has_no_disks_is_refused() -> None:
    assert "not a file with several disks" in _one_line("cache=none", "sda")


def test_the_cli_prints_each_as_one_line(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    adir = tmp_path / "adir"
    adir.mkdir()
    blob = tmp_path / "b.conf"
    blob.write_bytes(bytes(range(256)))
    for value, said in (
        ("-drive file='x,cache=none", "no closing quotation"),
        (str(adir), "is a directory"),
        (str(blob), "is not a text file"),
    ):
        res = run_cli("recommend", "--db", str(db), "--current", value)
        assert res.returncode != 0
        assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
