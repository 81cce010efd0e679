"""The role's installer (roles/sweep/files/install.sh) hands its options to scripts/setup.sh: the
measure profile's --measure-only and a shared-storage plan's --shared-storage, empty ones left out.
The tarball here is a real one whose scripts/setup.sh writes down the options it was given (the
installer's own logic is what is tested: the checksum, the unpacking, the options; setup.sh itself
is tested by every CI run)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

INSTALLER = (
    Path(__file__).resolve().parent.parent
    / "ansible"
    / "collections"
    / "ansible_collections"
    / "iomatrix"
    / "fleet"
    / "roles"
    / "sweep"
    / "files"
    / "install.sh"
)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src-tree"
    (src / "scripts").mkdir(parents=True)
    setup = src / "scripts" / "setup.sh"
    setup.write_text('#!/bin/sh\nprintf "%s\\n" "$#" "$@" > "$(dirname "$0")/../setup-args"\n')
    setup.chmod(0o755)
    tarball = tmp_path / "source.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src / "scripts", arcname="scripts")
    return tarball


@pytest.mark.parametrize(
    ("options", "given"),
    [
        (["--measure-only", "--shared-storage"], ["--measure-only", "--shared-storage"]),
        # a plan without shared storage: the role passes an empty one
        (["--measure-only", ""], ["--measure-only"]),
        (["", ""], []),  # the full profile
        ([], []),
    ],
)
def test_the_installer_gives_setup_its_options_and_leaves_out_empty_ones(
    tmp_path: Path, options: list[str], given: list[str]
) -> None:
    project = tmp_path / "opt-iomatrix"
    project.mkdir()
    tarball = _source(tmp_path)
    done = subprocess.run(
        ["sh", str(INSTALLER), str(project), str(tarball), "", *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "iomatrix-install: changed: source unpacked" in done.stdout
    count, *args = (project / "setup-args").read_text().splitlines()
    assert int(count) == len(given) and args == given
