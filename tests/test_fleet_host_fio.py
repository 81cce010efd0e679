"""The fio a fleet's measuring hosts run: built on the controller without the engines a sweep never
uses, found beside iomatrix's interpreter before any fio on PATH, and recorded with every sweep
(issue 37)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from iomatrix.fio.host_build import (
    CACHE_NAME,
    ENGINES,
    RUNTIME_LIBRARIES,
    host_fio,
    needed_libraries,
    unfit,
)
from iomatrix.guest.cache import entry_lock
from iomatrix.guest.static_fio import host_fio_package_version
from tests.conftest import needs, root_only

SRC = Path(__file__).resolve().parent.parent / "src"


@needs("fio")
def test_debians_fio_is_unfit_for_a_measuring_host_because_of_its_engine_libraries() -> None:
    # Debian's fio has every engine iomatrix runs, and links the Ceph, GlusterFS, RDMA and PMEM
    # libraries too.
    debian = Path(shutil.which("fio") or "")
    why = unfit(debian)
    assert why is not None and why.startswith("it links ") and "librbd.so.1" in why, why
    assert "which a measuring host does not install" in why


@root_only
@needs("fio")
@needs("gcc")
def test_the_controller_builds_a_fio_with_the_engines_and_only_the_libraries_a_host_gets() -> None:
    # The playbook's own call, into the iomatrix cache (built once there, ~20 s; the fleet demo uses
    # the same one).
    done = subprocess.run(
        [sys.executable, "-m", "iomatrix.fio.host_build"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    built = json.loads(done.stdout)
    assert built["path"], built["why"]
    fio = Path(built["path"])
    assert unfit(fio) is None
    engines = subprocess.run([fio, "--enghelp"], capture_output=True, text=True).stdout.split()
    assert set(ENGINES) <= set(engines) and "rbd" not in engines and "rdma" not in engines
    assert set(needed_libraries(fio) or ["?"]) <= set(RUNTIME_LIBRARIES)
    # The same fio version as Debian's, from Debian's source of it.
    same = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout
    assert subprocess.run([fio, "--version"], capture_output=True, text=True).stdout == same
    assert "built from Debian source fio " in built["why"] and "unpatched" in built["why"]
    # Cached: asked again (as check mode asks, without building), the same file.
    again = json.loads(
        subprocess.run(
            [sys.executable, "-m", "iomatrix.fio.host_build", "--no-build"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert again == built


def test_a_second_builder_waits_for_the_first_and_takes_its_fio(tmp_path: Path) -> None:
    """Two CI runs side by side (issue 67: test_fleet_host_fio beside another suite's, or a fleet
    demo's playbook) build the hosts' fio into one cache: the second waits on the entry's lock,
    saying so, and takes what the first built instead of building it again."""
    version = host_fio_package_version()
    if version is None:
        pytest.skip("no Debian fio package here: nothing is built")
    binary = tmp_path / CACHE_NAME / f"fio_{version}"
    said: list[str] = []
    got: list[tuple[Path | None, str]] = []
    with entry_lock(binary, "the fio for the hosts (the first builder, this test)"):
        second = threading.Thread(target=lambda: got.append(host_fio(tmp_path, said.append)))
        second.start()
        second.join(timeout=3)
        if not second.is_alive():  # it did not reach the lock: a build tool is missing here
            pytest.skip(got[0][1])
        binary.write_bytes(b"fio built by the first builder")  # what the first built
    second.join(timeout=60)
    assert got == [(binary, got[0][1])] and "built from Debian source fio" in got[0][1], got
    assert binary.read_bytes() == b"fio built by the first builder"
    assert any(line.startswith("waiting for ") for line in said), said


def test_without_a_cached_build_check_mode_builds_nothing(tmp_path: Path) -> None:
    path, why = host_fio(tmp_path, lambda _: None, build=False)
    if path is None:  # (no Debian fio package here: said so, nothing built either)
        assert "hosts install Debian's fio package" in why
    assert list(tmp_path.rglob("fio_*")) == []


@needs("fio")
def test_a_fio_beside_the_interpreter_comes_before_path_and_is_recorded(tmp_path: Path) -> None:
    """As on a host the role installed: its fio in the .venv's bin, Debian's (or none) on PATH."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shutil.copy(shutil.which("fio") or "", venv / "bin" / "fio")  # a real fio, in the role's place
    site = next(p for p in sys.path if p.endswith("site-packages"))
    probe = (
        "import json; from iomatrix.hostcmd import program_path, require; "
        "from iomatrix.metadata import host_metadata; m = host_metadata(); "
        "print(json.dumps([program_path('fio'), require('fio'), m['fio_path'], m['fio_version'], "
        "program_path('qemu-img')]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), site])}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    beside, required, recorded, version, other = json.loads(out)
    assert beside == required == recorded == str(venv / "bin" / "fio")
    assert version and version.startswith("fio-")
    assert other == shutil.which("qemu-img")  # only fio is looked for there

    # Without one there, PATH's.
    (venv / "bin" / "fio").unlink()
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert json.loads(out)[0] == shutil.which("fio")


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--fio-binary=/nonexistent/fio", "--measure-only"],
            "--fio-binary /nonexistent/fio: no such file; fix: ",
        ),
        (["--fio-binary=/bin/true"], "--fio-binary is for --measure-only installs"),
    ],
)
def test_setup_refuses_a_fio_binary_it_cannot_use_in_one_line(
    options: list[str], message: str
) -> None:
    setup = Path(__file__).resolve().parent.parent / "scripts" / "setup.sh"
    done = subprocess.run(
        ["bash", str(setup), *options], capture_output=True, text=True, timeout=60
    )
    assert (
        done.returncode == 2
        and message in done.stderr
        and len(done.stderr.strip().splitlines()) == 1
    ), done.stderr


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_setup_help_prints_its_options_and_exits_0(option: str) -> None:
    """`setup.sh --help` (issue 49) prints the usage and what each option installs, fitting 80
    columns, and installs nothing: it answers before the root check and the apt step."""
    setup = Path(__file__).resolve().parent.parent / "scripts" / "setup.sh"
    done = subprocess.run(
        ["bash", str(setup), option, "--fleet"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("usage: scripts/setup.sh")
    for flag in (
        "--fleet",
        "--no-guest",
        "--real-guest",
        "--minimal",
        "--measure-only",
        "--shared-storage",
        "--fio-binary=PATH",
    ):
        assert f"`{flag}`" in done.stdout, flag
    assert "set -euo" not in done.stdout and max(len(line) for line in lines) <= 80
