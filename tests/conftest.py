from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported by the fixture itself, when a test asks for it
    from iomatrix.guest.debian_image import DebianImage
    from tests.host_speed import CpuTimes

DATA = Path(__file__).parent / "data"


# The suite runs on three pytest-xdist workers (scripts/test: `-n 3 --dist loadgroup`): a 2-core
# host spends much of a serial run waiting on a child (fio, QEMU, a daemon, a disk) or starting the
# CLI. Tests that share something only one of them can hold at a time run on one worker, one after
# the other (an xdist group per entry):
SERIAL_GROUPS = {
    # A lab NFS server needs rpcbind on port 111 and registers program 100003 there: one per machine
    # at a time, across test sessions too (two suites side by side refused each other's). The tests
    # that start one through the `iomatrix` CLI (test_network_disks' sweep, test_real_guest_network,
    # test_kill_campaign_network) run it in a network and mount namespace of their own
    # (tests/own_network.py) and need no group. test_nfs_backing's tests are about the host's
    # rpcbind and start theirs in the test process, on the host: each holds a machine-wide lock
    # (own_network.host_lab_nfs, as test_network_disks' two in-process ones do), which makes another
    # session's wait; the group keeps this suite's on one worker, so that its workers do not.
    "nfs": ("test_nfs_backing",),
    # A lab Ceph cluster (a mon and an OSD) takes about a core; two at once would measure each
    # other.
    "ceph": (
        "test_rbd_backing",
        "test_rbd_flush_finding",
        "test_snippets_rbd",
        "test_kill_campaign_ceph",
        "test_durability_rbd",
        "test_findings_by_shape",
    ),
    # One throw-away PostgreSQL cluster for the module (test_pgstore's own xdist group, named here
    # so that its whole time places it: unlisted, its ~4 minutes would be handed out last).
    "postgresql": ("test_pgstore",),
    # The fleet demo and the namespaced client hosts (tests/client_hosts.py) each run sshds and
    # sweeps over SSH. Nothing orders them against another suite's (two CI runs side by side), so
    # what they share machine-wide is shared by locks, not by this group: sshd's /run/sshd by a
    # reader/writer lock, the last user out removing it (tests/sshd_privsep.py); the client hosts'
    # range is one no one uses when they are made (client_hosts.free_subnet); the demo runs one
    # at a time on a host (its own lock, its fixed 10.231 range and user); the controller's fio
    # that test_fleet_host_fio and the demo's playbook build is built once under the cache entry's
    # lock. The group stays so that one suite does not run the demo's three-host sweep and the
    # client hosts' sweeps at once on a 2-core host (not measured without it). (Not here:
    # test_fleet_collection, whose playbooks run on local connections, since the demo's test looks
    # only at what its own demo made (its process id's namespaces, its directory) and waits while
    # another demo holds the host; test_fleet_answers, which runs no playbook and whose three hosts
    # are UTS namespaces of its own. In the group their minutes only lengthened the fleet chain.)
    "fleet": (
        "test_fleet_demo",
        "test_fleet_host_label",
        "test_client_hosts",
        "test_fleet_host_fio",
    ),
}
# Modules whose module-scoped fixture is a sweep or a boot: kept on one worker so it is made once.
# (test_real_guest's is the Debian image: built once, minutes, by the first of its tests that runs.)
WHOLE_MODULES = (
    "test_guest_boot",
    "test_verdict",
    "test_guest_sweep",
    "test_headline",
    "test_guest_batch",
    "test_bad_input_campaign",
    "test_network_input_campaign",
    "test_real_guest",
)


# The longest work first (longest-processing-time-first, as pytest-split's .test_durations does it):
# a worker that picks up a five-minute test near the end leaves the other idle meanwhile. Seconds
# per test from a CI run's `--durations` (tests/durations.json: refresh it from a CI log when the
# slowest tests change; a test missing from it keeps its place after the listed ones, so a stale
# file costs time, never a test). xdist hands out a group as one unit of work, so a group is placed
# by the sum of its tests' seconds (the fleet group's chain of playbook runs is the longest unit of
# all), and its own tests run longest first within it.
DURATIONS = Path(__file__).parent / "durations.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fixture-times",
        metavar="PATH",
        default="",
        help="append one JSON line per fixture set up (its name, scope, where it is defined, "
        "the test that asked for it, wall seconds) to PATH; bench/suite_time.py sums them",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """--fixture-times: the wall time of each fixture's set-up (a module-scoped sweep, a lab Ceph,
    a booted guest), which --durations folds into the set-up of whichever test came first."""
    path = request.config.getoption("fixture_times", default="")
    started = time.monotonic()
    yield
    if path:
        line = {
            "fixture": fixturedef.argname,
            "scope": fixturedef.scope,
            "defined_in": fixturedef.baseid or "(plugin)",
            "test": request.node.nodeid,
            "seconds": round(time.monotonic() - started, 3),
        }
        # O_APPEND: whole lines from the xdist workers, which share the file, never interleaved
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


def pytest_configure(config: pytest.Config) -> None:
    # xdist's loadgroup scheduler otherwise reorders the units by how many tests each holds, not by
    # how long they take: the 692 quick cases of the bad-input campaign went first and the fleet
    # group's 48 long ones after the Ceph and NFS groups. Off, it keeps the order
    # pytest_collection_modifyitems gives.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # The records of which name each open results database is written by (store/wal_names.py) go to
    # a directory of this test process, not the host's /var/lib/iomatrix: a test leaves nothing on
    # the machine and reads no record another run left there. Subprocesses (the CLI under test)
    # inherit it. xdist's workers inherit the controller's; only the process that made it removes
    # it, at the very end.
    if "IOMATRIX_STATE" not in os.environ:
        os.environ["IOMATRIX_STATE"] = MADE_STATE[0] = tempfile.mkdtemp(prefix="iomatrix-state-")


MADE_STATE = [""]


# The controller's (or a serial run's) measure of the machine, for the end of the run's log.
HOST_SPEED: list[tuple[float, CpuTimes | None]] = []  # (the loop's seconds, the CPUs' times before)


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller measures
        return
    from tests.host_speed import CpuTimes, loop_seconds

    HOST_SPEED.append((loop_seconds(), CpuTimes.read()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The machine's speed beside the suite's time (tests/host_speed.py): the same tests took 20 and
    34 minutes on two VMs, and a suite time without it cannot be compared."""
    if not HOST_SPEED:
        return
    from tests.host_speed import CpuTimes, summary

    loop_s, before = HOST_SPEED[0]
    terminalreporter.write_line(summary(before, CpuTimes.read(), loop_s))


def pytest_unconfigure(config: pytest.Config) -> None:
    if MADE_STATE[0]:
        shutil.rmtree(MADE_STATE[0], ignore_errors=True)


def _seconds_by_test(recorded: dict[str, float]) -> dict[str, float]:
    """tests/durations.json by the ids collection gives: a grouped test's id in a --durations line
    carries its xdist group ("…::test_x@nfs"), which collection's id has not; such an entry was
    never found, so a group's tests weighed nothing (5 of the ceph group's, 11 of postgresql's), and
    a test that has left a group kept its old entry only. The longer of a test's entries counts."""
    out: dict[str, float] = {}
    for key, value in recorded.items():
        test, _, group = key.rpartition("@")
        if not test or "::" not in test or "::" in group or "]" in group:
            test = key  # a group's own entry ("postgresql"), or an "@" inside a parameter's id
        out[test] = max(out.get(test, 0.0), float(value))
    return out


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    group_of = {m: g for g, modules in SERIAL_GROUPS.items() for m in modules}
    group_of.update({m: m for m in WHOLE_MODULES})
    for item in items:
        module = item.path.stem
        if module in group_of:
            item.add_marker(pytest.mark.xdist_group(group_of[module]))
    seconds = _seconds_by_test(json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {})
    unit_of = {item.nodeid: group_of.get(item.path.stem, item.nodeid) for item in items}
    # Seconds and first place of each unit and of each module: a group's modules stay whole (a
    # module-scoped fixture, the Ceph lab of test_rbd_backing, is made once), the longest module
    # first, in it the longest test.
    total: dict[str, float] = {}
    first_place: dict[str, int] = {}
    for place, item in enumerate(items):
        # (a whole module's group is named as the module)
        for key in {unit_of[item.nodeid], item.path.stem}:
            total[key] = total.get(key, 0.0) + seconds.get(item.nodeid, 0.0)
            first_place.setdefault(key, place)
    # A group of many short tests none of which --durations lists (the bad-input campaign: 692
    # cases, ~1 min) is entered by its group name with its whole time, so it is not handed out last.
    for unit in set(unit_of.values()):
        total[unit] = max(total[unit], seconds.get(unit, 0.0))

    def order(item: pytest.Item) -> tuple:
        unit, module = unit_of[item.nodeid], item.path.stem
        if unit == item.nodeid:  # a test of its own: the module's place does not matter
            return -total[unit], first_place[unit], 0.0, 0, 0.0
        return (
            -total[unit],
            first_place[unit],
            -total[module],
            first_place[module],
            -seconds.get(item.nodeid, 0.0),
        )

    # stable: units of equal seconds (the unlisted ones) keep collection order
    items.sort(key=order)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On an xdist worker, fail a grouped test whose group was not applied. xdist tags a grouped
    test by adding '@group' to its id; a pytest/xdist pair that loses the tag runs a group on both
    workers, and its tests then fail by disturbing each other (two lab Ceph clusters measuring each
    other, two fleet demos), far from the cause."""
    grouped = any(item.iter_markers("xdist_group"))
    if grouped and item.config.getoption("loadgroup", default=False) and "@" not in item.nodeid:
        pytest.fail(
            "pytest-xdist did not apply this test's xdist group (tests/conftest.py): "
            "install the pytest and "
            "pytest-xdist versions pyproject.toml's dev extra names (scripts/setup.sh), "
            "or run with -n 0",
            pytrace=False,
        )


def iomatrix_argv() -> list[str]:
    """The installed CLI, falling back to the module (same interpreter as the tests)."""
    exe = Path(sys.executable).parent / "iomatrix"
    return (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "from iomatrix.cli import main; main()"]
    )


def sigint_default() -> None:
    """preexec_fn for a CLI a test interrupts: SIGINT back to its default action. A test runner
    started in the background by a non-interactive shell inherits SIGINT ignored, and Python turns
    SIGINT into KeyboardInterrupt only when it is not ignored at start-up."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def qemu_pids_using(path: Path) -> list[int]:
    """Live QEMU processes whose command line names a file under `path` (one test's guests only)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"qemu-system-x86_64")
            and str(path).encode() in b" ".join(argv)
            and state != "Z"
        ):
            out.append(int(d.name))
    return out


def descendants_named(pid: int, name: str, argv_has: str = "") -> list:
    """The live descendants of `pid` called `name` (whose command line holds `argv_has`). A sweep's
    children come and go (qemu-img, sync, short fio runs): one that ends between the listing and the
    reading of its name is skipped, not raised — a NoSuchProcess from that race once failed a CI run
    by ending a wait early."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for kid in kids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            if kid.name() == name and argv_has in " ".join(kid.cmdline()):
                found.append(kid)
    return found


@contextlib.contextmanager
def axis_set_aside(name: str) -> Iterator[None]:
    """The registry without axis `name` for a while, restored as it was after (a test's own
    demonstration axis that spells the same QEMU option would be refused beside it)."""
    from iomatrix.domain import axes

    saved = dict(axes.REGISTRY)
    del axes.REGISTRY[name]
    try:
        yield
    finally:
        axes.REGISTRY.clear()
        axes.REGISTRY.update(saved)


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*iomatrix_argv(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def image() -> DebianImage:
    """The Debian guest image built here (issue 51), from the normal cache: built by
    scripts/setup.sh --real-guest, else here once per worker (mmdebstrap, minutes, root). Imported
    when asked for: most test processes never need it."""
    from iomatrix.guest.debian_image import cached_image, ensure_debian_image

    if cached_image() is None:
        if os.geteuid() != 0:
            pytest.skip("building the Debian guest image needs root")
        if shutil.which("mmdebstrap") is None:
            pytest.skip("mmdebstrap not installed (scripts/setup.sh)")
    return ensure_debian_image(log=print)


def needs(program: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which(program) is None, reason=f"{program} not installed")


requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def root_only(f):  # type: ignore[no-untyped-def]
    """Mark a test `root` and skip it cleanly when not root (loop devices, mounts)."""
    return pytest.mark.root(
        pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices, mounts)")(f)
    )


@contextlib.contextmanager
def loop_mounted_ext4(scratch: Path, size_mb: int = 128) -> Iterator[tuple[str, Path, Path]]:
    """Sparse file under `scratch` -> loop device -> ext4 -> mount.

    Yields (loop device path, mount point, backing file) and removes only what it made. Lazy ext4
    initialisation is off so no background zeroing writes land in what a test measures.
    """
    work = scratch / f"loop-{uuid.uuid4().hex[:8]}"
    mnt = work / "mnt"
    mnt.mkdir(parents=True)
    backing = work / "backing.img"
    with open(backing, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    loop, mounted = None, False
    try:
        try:
            loop = subprocess.run(
                ["losetup", "--find", "--show", str(backing)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        except subprocess.CalledProcessError as e:
            pytest.skip(f"losetup failed: {e.stderr.strip()}")
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop],
            check=True,
            capture_output=True,
        )
        subprocess.run(["mount", loop, str(mnt)], check=True, capture_output=True)
        mounted = True
        yield loop, mnt, backing
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def hold_provisioned(holder: str, workdir: Path, table: dict) -> tuple[subprocess.Popen, dict]:
    """Run `holder` (a Python script provisioning the backing `table` under `workdir`, printing one
    JSON line of its state once its disk is ready, then sleeping) in a subprocess a test can kill
    -9: (the process, that state)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # SIGINT at its default: the tests Ctrl-C this holder, and a suite started in the background
    # inherits it ignored.
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(workdir), json.dumps(table)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=sigint_default,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        pytest.fail("the provisioning subprocess died before its disk was ready")
    return proc, json.loads(line)


def ok_samples(db: Path) -> list[tuple[str, str, float]]:
    """(cell key, metric, value) of every ok run's samples in the results database `db`
    (read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT c.key, s.metric, s.value FROM samples s JOIN runs r ON r.id = s.run_id "
            "JOIN cells c ON c.id = r.cell_id WHERE r.status = 'ok'"
        ).fetchall()
    finally:
        con.close()


def speed_cell(backing_type: str, **axes: str):  # type: ignore[no-untyped-def] # -> CellWorkload
    """A block-layer cell a shared-storage sweep would rank (raw, cache=none unless `axes` say
    otherwise), on a backing of `backing_type`: what `recommend`'s risk lines are asked about in the
    durability tests."""
    from iomatrix.domain import NA
    from iomatrix.report.query import CellWorkload

    values = {
        "tier": "blocklayer",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": "threads",
        "bus": "virtio-blk",
        "backing": "b",
        "modifier": "none",
        "lun_type": NA,
        **axes,
    }
    return CellWorkload(0, "", values, {"backing_type": backing_type}, "rand-write-4k", ["none"])
