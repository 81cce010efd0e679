"""Tiers from installed packages: the ``iomatrix.tiers`` entry-point group (docs/design.md, "Adding
a tier").

A tiny distribution is installed the way pip leaves one (a module and a ``*.dist-info`` directory
with METADATA and entry_points.txt) into a temporary directory put on the path of a fresh
interpreter; its tier is then found by the registry like a built-in one, plans name it, and
`iomatrix plan --explain` expands it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import iomatrix_argv

SRC = Path(__file__).resolve().parent.parent / "src"

# The example package: a declaration (what the plan reads) and an implementation (fio on the host,
# reusing the bare-metal tier's runner) named by "module:Class", imported only to run.
EXAMPLE_MODULE = """
from iomatrix.domain.axes import Layer
from iomatrix.tiers.declaration import TierDeclaration


class HostAgain(TierDeclaration):
    name = "hostagain"
    summary = "fio on the host once more, from an installed package"
    implementation = "iomx_example_tier:HostAgainTier"
    layers = frozenset({Layer.PROCESS, Layer.HOST_IO})
    is_reference = False
    order = 60
    title = "host again"

    @classmethod
    def prune_reason(cls, cell, backing):
        return "hostagain runs buffered I/O only" if cell["cache"] == "none" else None


def __getattr__(name):
    # The implementation is built on first use, so reading the declaration imports no tier code.
    if name == "HostAgainTier":
        from iomatrix.tiers.baremetal import BareMetalTier

        return type("HostAgainTier", (HostAgain, BareMetalTier), {"__module__": __name__})
    raise AttributeError(name)
"""

PLAN = """
tier = ["baremetal", "hostagain"]
format = ["raw"]
cache = ["none", "writeback"]
aio = ["threads"]
workloads = ["rand-read-4k"]
size = "64M"
runtime = 1

[[backing]]
type = "dir"
"""


def _install_example(root: Path) -> Path:
    """The distribution as pip would leave it in site-packages; returns the directory to put on the
    path."""
    site = root / "site"
    dist = site / "iomx_example_tier-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "iomx_example_tier.py").write_text(EXAMPLE_MODULE)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: iomx-example-tier\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[iomatrix.tiers]\nhostagain = iomx_example_tier:HostAgain\n"
    )
    return site


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC)])}


def test_an_installed_tier_is_found_declared_and_loaded_only_to_run(tmp_path: Path) -> None:
    site = _install_example(tmp_path)
    code = textwrap.dedent("""
        import sys
        from iomatrix import tiers
        names = tiers.tier_names()
        decl = tiers.declaration("hostagain")
        print(names)
        print(decl.__name__, decl.prose_name(), "iomatrix.tiers.baremetal" in sys.modules)
        impl = tiers.tier_class("hostagain")
        from iomatrix.tiers.baremetal import BareMetalTier
        print(impl.__name__, issubclass(impl, decl), issubclass(impl, BareMetalTier), impl.is_reference)
    """)  # noqa: E501
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(site),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0] == str(
        ["baremetal", "blocklayer", "guest", "consolidation", "durability", "hostagain"]
    )
    assert out[1] == "HostAgain host again False"  # declared, and no tier implementation imported
    assert out[2] == "HostAgainTier True True False"


def test_an_installed_tier_reaches_plan_explain(tmp_path: Path) -> None:
    site = _install_example(tmp_path)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    proc = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan), "--explain"],
        env={**_env(site), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hostagain" in proc.stdout
    # its own prune rule, from the declaration
    assert "hostagain runs buffered I/O only" in proc.stdout


def test_a_plan_naming_the_tier_without_the_package_is_a_clear_error(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    proc = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan)],
        env={**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "'hostagain' is not valid" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
