"""Network protocols from installed packages: the ``iomatrix.protocols`` entry-point group
(docs/design.md, "Adding a network protocol").

A tiny distribution is installed the way pip leaves one (a module and a ``*.dist-info`` directory
with METADATA and entry_points.txt) into a temporary directory put on the path of a fresh
interpreter. Its protocol is then found by the registry beside the built-in ones, checked, listed
and asked for its spellings; a package whose module does not import, or whose protocol takes a
built-in's name, is refused in one line, not a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iomatrix import protocol_registry, protocols
from iomatrix.backing import leftovers
from iomatrix.domain import axes
from iomatrix.plugins import PluginError
from iomatrix.protocols.base import NetworkProtocol
from iomatrix.protocols.place import NetworkPlace
from tests.conftest import iomatrix_argv

SRC = Path(__file__).resolve().parent.parent / "src"

# A protocol in one module, shaped like NBD over TCP (the built-in protocols/nbd.py) but installed
# under a name of its own ("toy" unless a test asks for another).
TOY_MODULE = """
from iomatrix.protocols.base import NetworkProtocol


class Nbd(NetworkProtocol):
    name = "{name}"
    title = "NBD"
    client_axis = "nbd_client"
    kernel_client = "kernel"
    userspace_library = "QEMU's nbd driver"
    server_noun = "NBD server"
    is_volume = True
    spec = "iomx_toy_protocol:NbdSpec"

    def url(self, place, fmt):
        return f"nbd://{{place.host}}:10809/{{place.image}}"

    def libvirt_source(self, values, fmt, place):
        return "network", {{"protocol": self.name, "name": place.image}}, {{"name": place.host}}

    def qemu_node(self, values, fmt, place):
        return [("driver", "nbd"), ("server.type", "inet"), ("server.host", place.host),
                ("server.port", "10809"), ("export", place.image)]

    def kernel_client_steps(self, place):
        return f"connect the export first: nbd-client {{place.host}} /dev/nbd0 -N {{place.image}}"

    def placeholder_where(self, place):
        return f"server {{place.host}}, export {{place.image}}"

    def proxmox_storage(self, values, place):
        return "nbd", "nbd-store", "nbd: nbd-store"

    def proxmox_notes(self, values, kind, place):
        return []
"""


def _install(root: Path, module_text: str, name: str = "toy") -> Path:
    """The distribution as pip would leave it in site-packages; returns the directory to put on the
    path."""
    site = root / "site"
    dist = site / "iomx_toy_protocol-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "iomx_toy_protocol.py").write_text(module_text.format(name=name))
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: iomx-toy-protocol\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[iomatrix.protocols]\n{name} = iomx_toy_protocol:Nbd\n"
    )
    return site


def _run(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC)])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_installed_protocol_is_found_checked_and_listed(tmp_path: Path) -> None:
    site = _install(tmp_path, TOY_MODULE)
    proc = _run(
        site,
        """
        from iomatrix import protocols
        from iomatrix.protocols.place import NetworkPlace
        print(protocols.protocol_names())
        nbd = protocols.protocol("toy")
        kernel = nbd.client_is_kernel({"nbd_client": "kernel"})
        print(protocols.is_network("toy"), nbd.named, kernel)
        print(nbd.url(NetworkPlace(), "raw"))
        print(dict(nbd.qemu_node({}, "raw", NetworkPlace()))["driver"])
        try:
            protocols.protocol("nope")
        except KeyError as err:
            print(err.args[0])
    """,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == str(["iscsi", "nbd", "nfs", "rbd", "toy"])
    assert out[1] == "True an NBD True"
    assert out[2] == "nbd://192.0.2.10:10809/vm-disk"
    assert out[3] == "nbd"
    assert out[4] == "no network protocol named 'nope'; known: iscsi, nbd, nfs, rbd, toy"


def test_a_broken_protocol_package_is_one_line(tmp_path: Path) -> None:
    """A package whose module fails to import: the CLI names the entry point and the package in one
    line."""
    site = _install(tmp_path, "import iomx_no_such_dependency\n")
    proc = _run(
        site,
        """
        from iomatrix import protocols
        protocols.protocol_names()
    """,
    )
    assert proc.returncode != 0
    assert (
        "PluginError: entry point iomatrix.protocols:toy = iomx_toy_protocol:Nbd (from "
        "iomx-toy-protocol) cannot be loaded: ModuleNotFoundError" in proc.stderr
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'tier = ["baremetal"]\nformat = ["raw"]\ncache = ["none"]\naio = ["threads"]\n'
        'workloads = ["rand-read-4k"]\nsize = "64M"\nruntime = 1\n\n[[backing]]\ntype = "nfs"\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC)]), "COLUMNS": "200"}
    cli = subprocess.run(
        [*iomatrix_argv(), "plan", str(plan)], env=env, capture_output=True, text=True, timeout=120
    )
    assert cli.returncode != 0
    assert "Traceback" not in cli.stderr
    lines = [
        line for line in (cli.stdout + cli.stderr).splitlines() if "iomatrix.protocols:toy" in line
    ]
    assert len(lines) == 1 and "reinstall or uninstall that package" in lines[0], (
        cli.stdout + cli.stderr
    )


def test_an_installed_protocol_with_a_built_in_name_is_refused(tmp_path: Path) -> None:
    site = _install(tmp_path, TOY_MODULE, name="iscsi")
    proc = _run(
        site,
        """
        from iomatrix import protocols
        from iomatrix.plugins import PluginError
        try:
            protocols.protocol_names()
        except PluginError as err:
            print(err.one_line())
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "entry point iomatrix.protocols:iscsi declares protocol 'iscsi', a name "
        "iomatrix.protocols.iscsi "
        "already has; rename the protocol or uninstall the package that declares it"
    )


class _Unfinished(NetworkProtocol):
    name = "half"
    title = "half"
    client_axis = "half_client"
    kernel_client = "kernel"
    userspace_library = "none"
    server_noun = "half server"
    is_volume = False
    spec = "nowhere:Nothing"


def test_a_protocol_missing_a_spelling_or_taking_a_name_is_refused() -> None:
    """The registry's own check, as an installed protocol gets it: every spelling written, a free
    name."""
    with (
        pytest.raises(PluginError, match=r"_Unfinished does not write .*libvirt_source"),
        protocols.registered(_Unfinished),
    ):
        pass
    taken = type("Again", (type(protocols.protocol("nfs")),), {"__module__": __name__})
    with (
        pytest.raises(PluginError, match="protocol 'nfs' is already registered"),
        protocols.registered(taken),
    ):
        pass
    assert protocols.protocol_names() == ["iscsi", "nbd", "nfs", "rbd"]


def test_a_protocol_listing_an_axis_the_registry_does_not_hold_is_refused() -> None:
    """The axis registry reads the built-in protocols' axes as it loads; an installed one's come
    through the iomatrix.axes entry point, so one listed on its class only is refused in one line,
    never silently left out of plans. A built-in's axes, inherited, are the registry's own."""
    nfs_class = type(protocols.protocol("nfs"))
    own = axes.Axis(
        "toy_client", "a toy's client", ("a", "b"), "a", ("a",), frozenset({axes.Layer.IMAGE})
    )
    toy = type(
        "ToyWithAxis",
        (nfs_class,),
        {"__module__": __name__, "name": "toy_axis", "axes": (own,)},
    )
    with (
        pytest.raises(PluginError, match=r"^ToyWithAxis.axes lists toy_client, which no axis "),
        protocols.registered(toy),
    ):
        pass
    inherited = type("ToyNfs", (nfs_class,), {"__module__": __name__, "name": "toy_nfs"})
    with protocols.registered(inherited):
        assert protocols.protocol("toy_nfs").axes == nfs_class.axes
    assert "toy_client" not in axes.REGISTRY


def test_every_built_in_protocol_keeps_its_promises() -> None:
    """What generic code relies on of each house: a name a plan and libvirt take, a client axis of
    the registry whose values include the kernel's (where the protocol has a client choice: NBD's
    client is QEMU's only), a backing spec of that type, and spellings that name the disk."""
    place = NetworkPlace()
    for network in protocols.protocols():
        assert protocol_registry._problem(type(network)) is None
        if network.client_axis in axes.REGISTRY:
            assert network.kernel_client in axes.get(network.client_axis).values
        else:
            assert not network.client_is_kernel({network.client_axis: network.kernel_client})
        kind, source, _ = network.libvirt_source({}, "raw", place)
        assert kind == "network" and source["protocol"] == network.name
        assert network.qemu_node({}, "raw", place)[0] == ("driver", network.name)
        assert network.url(place, "raw")
        spec = protocols.spec_class(network.name)
        assert spec.model_fields["type"].default == network.name


# An installed protocol with a lab of its own: it reuses the built-in NBD's house and lab (nbdkit
# on 127.0.0.1) under a name and a backing type no built-in union holds.
SWEPT_MODULE = """
from typing import Literal

from iomatrix.backing.nbd import NbdBacking
from iomatrix.protocols.nbd import Nbd


class Nbd(Nbd):
    name = "{name}"
    spec = "iomx_toy_protocol:ToyBacking"


class ToyBacking(NbdBacking):
    type: Literal["{name}"] = "{name}"

    @property
    def protocol(self):
        return "{name}"

    def _derived_label(self):
        return "{name}"
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nbdkit") is None, reason="nbdkit not installed")
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_a_sweep_runs_on_an_installed_protocols_backing(tmp_path: Path) -> None:
    """`[[backing]] type = "toy"` is read by the installed package's spec, provisioned through its
    `provision_server` and measured by the block layer; nothing of it is left."""
    site = _install(tmp_path, SWEPT_MODULE)
    (tmp_path / "p.toml").write_text(
        'tier = ["blocklayer"]\nformat = ["raw"]\npreallocation = ["off"]\ncache = ["none"]\n'
        'aio = ["threads"]\nworkloads = ["rand-write-4k"]\nsize = "16M"\nimage_size = "64M"\n'
        "runtime = 1\nnull_ceiling = false\n[repetitions]\nmin = 1\nmax = 1\n"
        '[[backing]]\ntype = "toy"\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC)])}
    run = subprocess.run(
        [*iomatrix_argv(), "run", "p.toml", "--db", "r.sqlite", "--workdir", "w"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    con = sqlite3.connect(f"file:{tmp_path / 'r.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT c.backing, r.status, r.meta_json FROM runs r JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
    finally:
        con.close()
    assert rows and {(b, s) for b, s, _ in rows} == {("toy", "ok")}
    for *_, meta_json in rows:
        meta = json.loads(meta_json)
        assert meta["network_disk"]["nbd_mode"] == "lab-started"
        assert meta["network_disk"]["url"].startswith("nbd://127.0.0.1:")
    assert leftovers.pending(tmp_path / "w") == []
