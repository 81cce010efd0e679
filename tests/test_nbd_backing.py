"""NBD over TCP, the fourth network protocol (issue 48): a sweep on a lab-started nbdkit and on an
existing export, its one-line refusals, and its snippets validated by the real tools.

NBD is protocols/nbd.py (the spellings) and backing/nbd.py (the spec and the servers); this test
drives it only through the plan and the CLI, as a user would. The existing export is an nbdkit the
test starts itself (memory plugin, 127.0.0.1, a free port) and stops after; an unreachable server is
a closed port on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.leftovers import clean
from iomatrix.backing.spec import parse_backing
from iomatrix.domain import axes
from iomatrix.domain.axes import BackingFacts, RuleContext
from iomatrix.errors import UserError
from iomatrix.protocols.place import NetworkPlace
from iomatrix.snippets import DiskConfig, minimal_domain_xml, snippets_for
from iomatrix.store import Store
from tests.conftest import hold_provisioned, needs, run_cli

SCRATCH = Path("/tmp/iomx-nbd")
PLAN = """
tier = ["blocklayer"]
format = ["FORMAT"]
preallocation = ["off"]
cache = ["none"]
aio = ["threads"]
workloads = ["rand-write-4k"]
size = "16M"
image_size = "64M"
runtime = 1
null_ceiling = false
[repetitions]
min = 1
max = 1
[[backing]]
type = "nbd"
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="nbd-", dir=SCRATCH))
    yield d
    clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def export() -> Iterator[str]:
    """An existing NBD export: nbdkit's memory plugin (64 MiB) on 127.0.0.1, started and stopped
    here."""
    port = _free_port()
    proc = subprocess.Popen(
        ["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "-e", "vm", "memory", "64M"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.05)
        assert proc.poll() is None, "the test's nbdkit did not start"
        yield f"nbd://127.0.0.1:{port}/vm"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _runs(db: Path) -> list[tuple[str, dict]]:
    store = Store(db)
    try:
        rows = store.db.execute("SELECT status, meta_json FROM runs").fetchall()
    finally:
        store.close()
    return [(status, json.loads(meta)) for status, meta in rows]


def _nbdkits_of(workdir: Path) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "nbdkit" and str(workdir) in " ".join(p.info["cmdline"] or [])
    ]


@needs("fio")
@needs("nbdkit")
@needs("qemu-storage-daemon")
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["qcow2"])
def test_a_sweep_on_a_lab_started_nbdkit_measures_and_leaves_nothing(
    workdir: Path, fmt: str
) -> None:
    """`iomatrix run` with `type = "nbd"`: nbdkit serves a qcow2 image file over TCP on 127.0.0.1,
    QEMU's nbd driver opens it under the block layer, the run records the disk and counts nbdkit's
    CPU as the server's; afterwards no nbdkit, file or ledger entry is left."""
    (workdir / "p.toml").write_text(PLAN.replace("FORMAT", fmt))
    run = run_cli("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", cwd=workdir, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    runs = _runs(workdir / "r.sqlite")
    assert runs and all(status == "ok" for status, _ in runs)
    for _, meta in runs:
        disk = meta["network_disk"]
        assert disk["protocol"] == "nbd" and disk["format"] == fmt
        assert disk["url"].startswith("nbd://127.0.0.1:") and disk["nbd_mode"] == "lab-started"
        roles = {p["name"]: p["role"] for p in meta["processes"]}
        assert roles.get("nbdkit") == "server" and roles.get("qemu-storage-daemon") == "io"
    assert _nbdkits_of(workdir) == []
    assert leftovers.pending(workdir / "w") == []
    assert not list((workdir / "w" / "backings").iterdir())


@needs("fio")
@needs("nbdkit")
@needs("qemu-storage-daemon")
@pytest.mark.slow
def test_a_sweep_on_an_existing_export_handed_over(workdir: Path, export: str) -> None:
    """An existing `nbd://HOST:PORT/EXPORT` is measured as the raw disk once handed over with
    --allow-destroy; iomatrix starts and stops no server of its own and leaves the user's running.
    Not handed over, the plan has nothing to run and says why in one line."""
    plan = PLAN.replace("FORMAT", "raw") + f'url = "{export}"\n'
    (workdir / "p.toml").write_text(plan)
    refused = run_cli("run", "p.toml", "--db", "no.sqlite", "--workdir", "w", cwd=workdir)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"pass --allow-destroy {export}" in refused.stderr
    run = run_cli(
        *("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--allow-destroy", export),
        cwd=workdir,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    runs = _runs(workdir / "r.sqlite")
    assert runs and all(status == "ok" for status, _ in runs)
    for _, meta in runs:
        assert meta["network_disk"]["url"] == export
        assert meta["network_disk"]["nbd_mode"] == "existing"
        assert "nbdkit" not in {p["name"] for p in meta["processes"]}
    assert leftovers.pending(workdir / "w") == []


def test_an_unreachable_export_is_refused_in_one_line_before_the_sweep(workdir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # bound, never listening: closed
        s.bind(("127.0.0.1", 0))
        url = f"nbd://127.0.0.1:{s.getsockname()[1]}/vm"
        (workdir / "p.toml").write_text(PLAN.replace("FORMAT", "raw") + f'url = "{url}"\n')
        run = run_cli(
            *("run", "p.toml", "--db", "r.sqlite", "--workdir", "w", "--allow-destroy", url),
            cwd=workdir,
            timeout=300,
        )
    assert run.returncode == 2, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"backing nbd:{url[6:]} cannot serve" in lines[0], run.stderr
    assert "Connection refused" in lines[0] and not (workdir / "r.sqlite").exists()


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"type": "nbd", "url": "http://127.0.0.1/vm"}, "is not an NBD export"),
        ({"type": "nbd", "url": "nbd://127.0.0.1:99999/vm"}, "is not an NBD export"),
        ({"type": "nbd", "export": "vm"}, "export: unknown field"),
    ],
)
def test_bad_nbd_tables_are_one_line(table: dict, named: str) -> None:
    with pytest.raises(UserError) as err:
        parse_backing(table)
    assert named in str(err.value) and "\n" not in str(err.value)


def _snippets(fmt: str) -> dict[str, tuple[str | None, str]]:
    cell = {"tier": "blocklayer", "format": fmt, "preallocation": "off", "cache": "none"}
    cfg = DiskConfig.from_axes({**cell, "aio": "threads", "bus": "virtio-blk"}, "nbd")
    return {s.tool: (s.text, s.note) for s in reversed(snippets_for(cfg).snippets)}


@needs("virt-xml-validate")
def test_the_libvirt_disk_is_valid_and_the_tools_without_nbd_say_so(tmp_path: Path) -> None:
    place = NetworkPlace()
    snippets = _snippets("qcow2")
    xml = snippets["libvirt"][0] or ""
    assert '<disk type="network" device="disk">' in xml
    assert f'<source protocol="nbd" name="{place.image}.qcow2">' in xml
    assert f'<host name="{place.host}" port="10809" />' in xml
    path = tmp_path / "domain.xml"
    path.write_text(minimal_domain_xml(xml))
    res = subprocess.run(
        ["virt-xml-validate", str(path), "domain"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr + path.read_text()
    assert snippets["proxmox"][0] is None and "no NBD storage type" in snippets["proxmox"][1]
    assert snippets["nova"][0] is None


@needs("nbdkit")
@needs("qemu-img")
def test_the_qemu_blockdev_snippet_opens_a_real_export(export: str) -> None:
    """The QEMU snippet's nbd node, its placeholders replaced by the test's server, is opened by
    the real qemu-img (its json: form of the same -blockdev options)."""
    text = (_snippets("raw")["qemu"][0] or "").replace("\\\n", "")
    node = next(arg for arg in text.split() if "file.driver=nbd" in arg)
    opts = dict(kv.split("=", 1) for kv in node.split(","))
    place = NetworkPlace()
    assert opts["file.server.host"] == place.host and opts["file.export"] == f"{place.image}.raw"
    host_port = export.removeprefix("nbd://").split("/")[0]
    opts["file.server.host"], opts["file.server.port"] = host_port.split(":")
    opts["file.export"] = "vm"
    spec = {k: v for k, v in opts.items() if k.startswith("file.")}
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", "json:" + json.dumps({**spec, "driver": "raw"})],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["virtual-size"] == 64 << 20


HOLDER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from iomatrix import children
    from iomatrix.backing.network import DiskRequest
    from iomatrix.backing.provision import provision
    from iomatrix.backing.spec import parse_backing
    workdir = Path(sys.argv[1])
    spec = parse_backing({"type": "nbd"})
    with children.record_in(workdir), provision(spec, workdir, set()) as h:
        want = DiskRequest({"format": "qcow2"}, size_bytes=16 << 20, name="killed")
        disk = h.server.new_disk(want)
        print(json.dumps({"pids": h.server.server_pids(), "file": str(disk.server_path),
                          "scratch": str(h.path)}), flush=True)
        time.sleep(600)
""")


@needs("nbdkit")
@pytest.mark.slow
def test_kill_9_of_the_run_then_clean_removes_the_server_and_its_files(workdir: Path) -> None:
    """The ledger holds nbdkit (a child, by pid and start time) and the disk file (a path, recorded
    before it existed): after a kill -9 of the run, `iomatrix clean` leaves nothing of either."""
    proc, state = hold_provisioned(HOLDER, workdir, {})
    pids = [int(p) for p in state["pids"]]
    try:
        assert Path(state["file"]).is_file() and all(psutil.pid_exists(p) for p in pids)
        assert all(line.startswith("left alone") for line in clean(workdir))  # the run is alive
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    out = run_cli("clean", "--workdir", str(workdir))
    assert out.returncode == 0 and "failed" not in out.stdout and "refused" not in out.stdout, (
        out.stdout + out.stderr
    )
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )
    assert not Path(state["file"]).exists() and not Path(state["scratch"]).exists()
    assert leftovers.pending(workdir) == []


def test_a_lab_started_nbd_plan_counts_its_images_in_the_workdir(tmp_path: Path) -> None:
    """The space check asks the protocol where its lab keeps a run's disk (lab_disks_in_workdir):
    nbdkit's exports are image files under the workdir, so a 900T image does not fit there."""
    (tmp_path / "big.toml").write_text(
        'tier = ["blocklayer"]\nworkloads = ["rand-write-4k"]\nsize = "900T"\n'
        'image_size = "900T"\nruntime = 1\n[[backing]]\ntype = "nbd"\n'
    )
    planned = run_cli("plan", "big.toml", cwd=tmp_path, timeout=120)
    assert (
        planned.returncode == 0
        and "does not fit" in planned.stdout
        and "backing nbd" in planned.stdout
    ), planned.stdout + planned.stderr


def test_rtt_is_refused_on_nbd_where_no_relay_delays_its_client() -> None:
    """The rtt axis is a relay's delay between client and server. On NBD no relay is put in front
    of the server, so a cell at rtt ≠ 0 is pruned with the protocol's reason (it would claim a round
    trip it never had); at rtt = 0, and on iSCSI (its relay measures it), nothing is refused."""
    base = {a.name: a.default for a in axes.plan_axes()}
    cell = {**base, "tier": "blocklayer", "backing": "b", "bus": "-", "cache": "none"}
    nbd = BackingFacts(unavailable=None, o_direct=True, is_device=False, protocol="nbd")
    iscsi = BackingFacts(unavailable=None, o_direct=True, is_device=True, protocol="iscsi")
    why = axes.prune_reason({**cell, "rtt": "2ms"}, RuleContext(nbd, "b"))
    assert why is not None and "relay in front of an NBD server" in why
    assert axes.prune_reason({**cell, "rtt": "0"}, RuleContext(nbd, "b")) is None
    assert axes.prune_reason({**cell, "rtt": "2ms"}, RuleContext(iscsi, "b")) is None
