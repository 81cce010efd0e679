"""An axis from an installed package (entry-point group ``iomatrix.axes``) reaches the plan, the
QEMU argv and the snippets with no change to iomatrix; one that collides with an existing QEMU
option is refused in one line.

The test package is a real distribution on sys.path (a ``.dist-info`` with its ``entry_points.txt``,
what pip installs), read by importlib.metadata in a fresh interpreter, as an installed plugin would
be."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import iomatrix_argv, needs

AXIS_MODULE = """
from iomatrix.domain.axes import Axis, Layer, QemuOptions, ToolOption

# QEMU's image locking on the file protocol node (an option no built-in axis sets).
LOCKING = Axis(
    "locking", "whether QEMU takes OFD locks on the image file", ("auto", "off"), "auto", ("auto",),
    frozenset({Layer.IMAGE}),
    qemu=lambda v: QemuOptions() if v == "auto" else QemuOptions(file_protocol=(("locking", v),)),
    tools={"libvirt": lambda v: ToolOption(unavailable="libvirt has no per-disk locking option") if v == "off"
           else ToolOption()})
# Sets the device's write-cache, which the cache axis already sets: refused.
WRITE_CACHE = Axis(
    "write_cache", "demo", ("on", "off"), "on", ("on",), frozenset({Layer.DEVICE}),
    qemu=lambda v: QemuOptions(device=(("write-cache", v),)))
# Its QEMU option is its own; its libvirt spelling writes <driver cache=>, the cache axis's: refused.
HOST_CACHE = Axis(
    "host_cache", "demo", ("on", "off"), "on", ("on",), frozenset({Layer.IMAGE}),
    qemu=lambda v: QemuOptions(file_protocol=(("locking", v),)),
    tools={"libvirt": lambda v: ToolOption((("cache", "none" if v == "on" else "writeback"),))})
"""  # noqa: E501

# A tier package whose module registers an axis when it is imported (the tier registry loads it),
# with a Proxmox spelling that writes cache=, the cache axis's key.
TIER_MODULE = """
from iomatrix.domain import axes
from iomatrix.domain.axes import Axis, Layer, ToolOption
from iomatrix.tiers.declaration import TierDeclaration

axes.register(Axis("host_cache", "demo", ("on", "off"), "on", ("on",), frozenset({Layer.IMAGE}),
                   tools={"proxmox": lambda v: ToolOption((("cache", v),))}))


class Demo(TierDeclaration):
    name = "demo"
"""

PROBE = """
import json
from iomatrix.domain import axes
from iomatrix.matrix import expand
from iomatrix.plan.load import plan_from_dict
from iomatrix.qemu_block import DiskSpec, disk_args
from iomatrix.snippets import DiskConfig, snippets_for
from iomatrix.workloads import resolve

plan = plan_from_dict({"name": "p", "tier": ["blocklayer", "guest"], "format": ["raw"], "cache": ["none"],
                       "locking": ["auto", "off"], "workloads": ["rand-read-4k"], "size": "32M",
                       "image_size": "64M"}, "p.toml")
exp = expand(plan, {}, [resolve(w) for w in plan.workloads])
off = next(c for c in exp.cells if c["tier"] == "guest" and c["locking"] == "off")
argv = disk_args(DiskSpec.for_cell(dict(off.items()), "/images/vm.raw"))
snips = snippets_for(DiskConfig.from_axes(dict(off.items())), "/images/vm.raw")
print(json.dumps({"registered": "locking" in axes.REGISTRY, "write_cache": "write_cache" in axes.REGISTRY,
                  "keys": sorted(c.key for c in exp.cells), "argv": argv,
                  "qemu": snips.by_tool("qemu").text, "libvirt": snips.by_tool("libvirt").note}))
"""  # noqa: E501


def _install(site: Path, entry_points: str) -> None:
    """A distribution `iomx-demo-axis` with module iomx_demo_axis, as pip would lay it out."""
    (site / "iomx_demo_axis.py").write_text(AXIS_MODULE)
    info = site / "iomx_demo_axis-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iomx-demo-axis\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def _env(site: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(site), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        ).rstrip(os.pathsep),
        "COLUMNS": "200",
    }


def test_an_installed_axis_reaches_the_plan_the_qemu_argv_and_the_snippets(tmp_path: Path) -> None:
    _install(tmp_path, "[iomatrix.axes]\nlocking = iomx_demo_axis:LOCKING\n")
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["registered"] and not out["write_cache"]
    # The default keeps the key it had before the axis; the other value names it.
    assert "guest/raw/off/none/threads/virtio-blk/dir/none" in out["keys"]
    assert "guest/raw/off/none/threads/virtio-blk/dir/none+locking=off" in out["keys"]
    blockdev = out["argv"][out["argv"].index("-blockdev") + 1]
    assert ",file.locking=off" in blockdev
    assert "file.locking=off" in out["qemu"].replace("\\\n", "")
    assert "libvirt has no per-disk locking option" in out["libvirt"]
    # The CLI's plan sees it too.
    plan = tmp_path / "p.toml"
    plan.write_text(
        'name = "p"\ntier = ["blocklayer"]\nformat = ["raw"]\ncache = ["none"]\n'
        'locking = ["auto", "off"]\nworkloads = ["rand-read-4k"]\nsize = '
        '"32M"\nimage_size = "64M"\n'
    )
    cli = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan), "--explain"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    # (axes every cell shares are listed once above the table: "cells: all tier=blocklayer …")
    header = next(
        line for line in cli.stdout.splitlines() if "workloads" in line and "format" in line
    )
    assert header.split()[-2:] == ["locking", "workloads"]
    assert [
        line.split()[-2] for line in cli.stdout.splitlines() if line.split()[1:2] == ["raw"]
    ] == ["auto", "off"]


def test_an_installed_axis_that_sets_an_existing_qemu_option_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    _install(tmp_path, "[iomatrix.axes]\nwrite_cache = iomx_demo_axis:WRITE_CACHE\n")
    res = subprocess.run(
        [sys.executable, "-c", "from iomatrix.domain import axes; print(sorted(axes.REGISTRY))"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert res.returncode == 0 and "'write_cache'" not in res.stdout  # (lun_write_cache is not it)
    assert res.stderr.strip().splitlines() == [
        "iomatrix: an installed axis was refused: iomatrix.axes: axis 'write_cache' sets "
        "write-cache on the guest "
        "device (-device), which axis 'cache' already sets: one QEMU option belongs to "
        "one axis (extend 'cache''s "
        "values instead, or set another option)"
    ]


def test_an_installed_axis_that_writes_another_axis_libvirt_key_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    _install(tmp_path, "[iomatrix.axes]\nhost_cache = iomx_demo_axis:HOST_CACHE\n")
    res = subprocess.run(
        [sys.executable, "-c", "from iomatrix.domain import axes; print(sorted(axes.REGISTRY))"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert res.returncode == 0 and "'host_cache'" not in res.stdout
    assert res.stderr.strip().splitlines() == [
        "iomatrix: an installed axis was refused: iomatrix.axes: axis 'host_cache' sets "
        "cache on libvirt's <disk>, "
        "which axis 'cache' already sets: one libvirt option belongs to one axis (extend "
        "'cache''s values instead, "
        "or set another option)"
    ]


def test_a_collision_raised_by_an_installed_package_is_a_user_error_not_a_crash(
    tmp_path: Path,
) -> None:
    """A package that registers a colliding axis as it is imported (here a tier package, loaded when
    the tier registry is first asked): the CLI's one-line error and exit 2, no "internal error" and
    no crash log."""
    _install(tmp_path, "[iomatrix.tiers]\ndemo = iomx_demo_tier:Demo\n")
    (tmp_path / "iomx_demo_tier.py").write_text(TIER_MODULE)
    plan = tmp_path / "p.toml"
    plan.write_text(
        'name = "p"\ntier = ["blocklayer"]\nworkloads = ["rand-read-4k"]\nsize = "32M"\n'
    )
    res = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: entry point iomatrix.tiers:demo = iomx_demo_tier:Demo (from "
        "iomx-demo-axis) cannot be loaded: axis "
        "'host_cache' sets cache on Proxmox's drive (qm set), which axis 'cache' already "
        "sets: one proxmox option "
        "belongs to one axis (extend 'cache''s values instead, or set another option); "
        "reinstall or uninstall that "
        "package"
    ]
    assert not (tmp_path / "cache").exists()  # no crash log written


def test_an_entry_point_that_cannot_be_loaded_is_named(tmp_path: Path) -> None:
    _install(tmp_path, "[iomatrix.axes]\nbroken = iomx_demo_axis:NOT_THERE\n")
    res = subprocess.run(
        [sys.executable, "-c", "import iomatrix.domain.axes"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert res.returncode == 0 and "Traceback" not in res.stderr
    assert (
        "entry point iomatrix.axes:broken = iomx_demo_axis:NOT_THERE (from "
        "iomx-demo-axis) cannot be loaded: "
        "AttributeError"
    ) in res.stderr
    assert "reinstall or uninstall that package" in res.stderr and len(res.stderr.splitlines()) == 1


@pytest.mark.slow
@needs("fio")
@needs("qemu-storage-daemon")
def test_an_installed_axis_reaches_the_store_every_run_and_the_exports(tmp_path: Path) -> None:
    """A real block-layer sweep with the installed axis: qemu-storage-daemon opens the image with
    its option, the database keeps the axis with each cell, and `results` JSON/CSV and the report's
    "Every run" show it."""
    _install(tmp_path, "[iomatrix.axes]\nlocking = iomx_demo_axis:LOCKING\n")
    plan = tmp_path / "p.toml"
    plan.write_text(
        'name = "p"\ntier = ["blocklayer"]\nformat = ["raw"]\ncache = ["none"]\n'
        'locking = ["auto", "off"]\nworkloads = ["rand-read-4k"]\nsize = '
        '"16M"\nimage_size = "32M"\n'
        "runtime = 0.5\nnull_ceiling = false\n[repetitions]\nmin = 2\nmax = 2\n"
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*iomatrix_argv(), *args],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            cwd=tmp_path,
            timeout=600,
        )

    res = cli("run", "p.toml", "--db", "r.sqlite")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    doc = json.loads(cli("results", "--db", "r.sqlite", "--format", "json").stdout)
    locking = {r["axes"].get("locking") for r in doc["sweeps"][0]["results"]}
    assert locking == {"auto", "off"}
    header, *rows = cli("results", "--db", "r.sqlite", "--format", "csv").stdout.splitlines()
    column = header.split(",").index("locking")
    assert {r.split(",")[column] for r in rows} == {"auto", "off"}
    assert cli("report", "--db", "r.sqlite", "--html", "r.html").returncode == 0
    every_run = (tmp_path / "r.html").read_text().split('id="runs"', 1)[1]
    # by setting, not the store key's slash form ("raw/off/none/threads/-/dir+locking=off")
    assert ">locking=off</td>" in every_run and "backing=dir" in every_run
    # qemu-storage-daemon was given the option on exactly the locking=off cell's runs (their stored
    # argv)
    with sqlite3.connect(f"file:{tmp_path / 'r.sqlite'}?mode=ro", uri=True) as con:
        stored = con.execute(
            "SELECT c.key, r.meta_json FROM runs r JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
    given = {
        key: "file.locking=off" in " ".join(json.loads(meta)["daemon_argv"]) for key, meta in stored
    }
    assert given == {
        "blocklayer/raw/off/none/threads/-/dir/none": False,
        "blocklayer/raw/off/none/threads/-/dir/none+locking=off": True,
    }, given
