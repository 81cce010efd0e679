"""What `iomatrix run` records of the host: on a measuring-only install (setup.sh --minimal, the
fleet role's default) there is no qemu-system-x86, and the QEMU version every result carries comes
from the storage daemon."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from iomatrix.metadata import host_metadata
from tests.conftest import needs


@needs("qemu-storage-daemon")
@needs("qemu-img")
def test_without_the_qemu_emulator_the_qemu_version_is_the_storage_daemons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PATH with the programs a measuring-only install has, and no qemu-system-x86_64.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("qemu-storage-daemon", "qemu-img", "fio"):
        if (found := shutil.which(program)) is not None:
            (bin_dir / program).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    meta = host_metadata()
    assert meta["qemu_version"] is not None and meta["qemu_version"].startswith(
        "qemu-storage-daemon version "
    )
    assert meta["qemu_img_version"] is not None and meta["qemu_img_version"].startswith(
        "qemu-img version "
    )


@needs("qemu-system-x86_64")
def test_with_the_emulator_the_qemu_version_is_the_emulators() -> None:
    assert host_metadata()["qemu_version"].startswith("QEMU emulator version ")
