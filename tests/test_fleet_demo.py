"""scripts/fleet-demo: three hosts in network namespaces swept through Ansible over SSH, merged, and
all of it removed; the bad hosts (unreachable, not root, a failed install) reported in one line
each.

What the demo's other options show is proven by faster tests (issue 67): --ansible-checks (--check,
--limit) and the shared backend's hosts starting together by
test_fleet_collection.py::test_check_mode_makes_nothing_hosts_start_together_and_limit_runs_only_the_hosts_chosen,
a refused device by the same test and test_a_groups_failures_leave_its_later_hosts_unswept_and_fail_the_run,
clients on several hosts on one LUN by
test_client_hosts.py::test_two_client_hosts_share_one_target_with_per_client_aggregate_and_fairness,
--store postgresql by test_pgstore.py::test_the_fleet_demos_hosts_published_answer_as_their_merged_file
(the demo's captured hosts) and
test_fleet_collection.py::test_the_role_publishes_each_host_and_the_next_run_catches_up_a_failed_publish,
--interrupt-once and --twice (a sweep stopped during a playbook run is reported interrupted and the
next run resumes it, keeping its runs; a finished host is not swept again) by
test_fleet_collection.py::test_an_interrupted_sweep_is_reported_so_and_the_next_run_resumes_it and
the publish test above ("already finished earlier", changed=0)."""  # noqa: E501

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.hostcmd import version_of
from iomatrix.store import Store
from tests.bounded_flock import flock_within
from tests.conftest import root_only

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "scripts" / "fleet-demo"
DEMO_USER = "iomatrix-demo-user"  # the throw-away user of --with-nonroot
# One demo at a time on a host (its subnet, its user's name): the demo takes this lock and exits 2
# when another holds it, as when a second CI run's demo is under way beside this one.
DEMO_LOCK = Path("/run/lock/iomatrix-fleet-demo.lock")
BUSY = ("another fleet-demo is running", "is already in use on this machine")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists("/usr/sbin/ip") and not os.path.exists("/sbin/ip"),
        reason="iproute2 not installed",
    ),
]


@contextlib.contextmanager
def no_other_demo(timeout: float = 1800) -> Iterator[None]:
    """Hold the demo's own lock while the leftovers are looked for: no other demo (another CI run's)
    can then make namespaces, links or its user meanwhile, so what is found is this demo's."""
    DEMO_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with DEMO_LOCK.open("w") as lock:
        if not flock_within(lock.fileno(), fcntl.LOCK_EX, timeout, 1.0):
            raise BlockingIOError(
                errno.EWOULDBLOCK, f"{DEMO_LOCK} held by another demo for over {timeout:g} s"
            )
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_demo(*options: str, timeout: float = 1800) -> tuple[subprocess.CompletedProcess[str], int]:
    """The demo's run and its process id (its namespaces and links are named by it), started again
    while another demo holds the host (exit 2, nothing made)."""
    deadline = time.monotonic() + timeout
    while True:
        demo = subprocess.Popen(
            [str(DEMO), *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            out, err = demo.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            demo.terminate()  # its cleanup removes what it made
            out, err = demo.communicate(timeout=120)
            raise AssertionError(
                f"the fleet demo took over {timeout:.0f} s: {out[-3000:]}"
            ) from None
        if demo.returncode == 2 and any(b in err for b in BUSY) and time.monotonic() < deadline:
            time.sleep(5)
            continue
        return subprocess.CompletedProcess(demo.args, demo.returncode, out, err), demo.pid


def leftovers(pid: int, stdout: str) -> list[str]:
    """What the demo of process `pid` could have left: its namespaces, veths, processes, its
    temporary directory (the playbook's own for the source tarball is inside it), loops, mounts, its
    user. Called with the demo's lock held (no_other_demo)."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [
        f"netns {line.split()[0]}"
        for line in netns.splitlines()
        if line.startswith(f"iomatrix-fleet-{pid}-")
    ]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if f": iomxf{pid}" in line
    ]
    work = [
        line.split("working in ", 1)[1].strip()
        for line in stdout.splitlines()
        if line.startswith("fleet-demo: working in ")
    ]
    assert work, stdout[-2000:]
    tmp = work[0]
    found += [f"temp dir {tmp}"] if Path(tmp).exists() else []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if tmp.encode() in argv:
            found.append(f"process {proc.name}: {argv[:120]!r}")
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [f"loop {line}" for line in loops.splitlines() if tmp in line]
    found += [
        f"mount {line}" for line in Path("/proc/mounts").read_text().splitlines() if tmp in line
    ]
    for database in ("passwd", "group"):
        if subprocess.run(["getent", database, DEMO_USER], capture_output=True).returncode == 0:
            found.append(f"{database} entry {DEMO_USER}")
    return found


@root_only
def test_the_demo_sweeps_three_hosts_reports_the_bad_ones_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """One run of the demo for every bad host, as CI has time for one: hosts 4 (unreachable), 6
    (not root), 7 (its install fails: a wheelhouse without the dependencies and no package index)
    reported in one line each while hosts 1-3 install over SSH, sweep and are merged; one playbook
    run (the resume of a second one is
    test_fleet_collection.py::test_an_interrupted_sweep_is_reported_so_and_the_next_run_resumes_it:
    the second run cost this test a minute)."""
    kept = tmp_path / "kept"
    started = time.monotonic()
    done, pid = run_demo(
        "--with-unreachable",
        "--with-nonroot",
        "--with-broken-install",
        "--keep-results",
        str(kept),
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    with no_other_demo():
        assert leftovers(pid, done.stdout) == []  # the demo's user included

    lines = (kept / "summary-first.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"fleet-host-{n}" for n in (1, 2, 3, 4, 6, 7)]
    assert all(
        line.startswith(f"fleet-host-{n}: ok: sweep ")
        for n, line in zip((1, 2, 3), lines, strict=False)
    ), lines[:3]
    assert lines[3].startswith("fleet-host-4: unreachable: ") and "10.231.4.2" in lines[3]
    # A host reached as a user who is not root: refused before anything is installed, with the fix.
    assert lines[4].startswith(
        f"fleet-host-6: failed at 'Check that the host runs the sweep as root': the sweep "
        f"would run as '{DEMO_USER}', not root"
    ), lines[4]
    assert "fix: set ansible_user to root, or become to true" in lines[4]
    # A host whose install fails (setup.sh's pip step: no package index, a wheelhouse without the
    # dependencies): the step, what pip lacked and the fix, in one line.
    assert lines[5].startswith(
        "fleet-host-7: failed at 'Check the install (scripts/setup.sh)': pip could not "
        "install the Python dependencies (No matching distribution found for "
    ), lines[5]
    assert "from the wheelhouse wheelhouse-pip-only.tar alone" in lines[5]
    assert "fix: put every dependency in it (python3 -m pip download" in lines[5]
    db = sqlite3.connect(f"file:{kept / 'merged.sqlite'}?mode=ro", uri=True)
    per_host = dict(
        db.execute(
            "SELECT h.hostname, COUNT(*) FROM sweeps s JOIN hosts h ON h.id=s.host_id "
            "WHERE s.status='finished' GROUP BY h.hostname"
        )
    )
    assert per_host == {"fleet-host-1": 1, "fleet-host-2": 1, "fleet-host-3": 1}
    # Their measuring install ran the fio the playbook built on the controller (iomatrix_fio:
    # controller), copied beside iomatrix, not Debian's: the same version, recorded with every
    # sweep.
    fios = {
        (json.loads(extra).get("fio_path"), version)
        for extra, version in db.execute("SELECT extra_json, fio_version FROM hosts")
    }
    assert len(fios) == 1, fios
    ((fio_path, fio_version),) = fios
    assert fio_path.endswith("/opt-iomatrix/.venv/bin/fio") and fio_version == version_of(
        ["fio", "--version"]
    ), fios
    sweep_ids = [sweep_id for (sweep_id,) in db.execute("SELECT id FROM sweeps")]
    db.close()
    # Every host's sweep ran the plan: 2 cells x 1 workload x its 2 runs each.
    merged = Store.open_existing(kept / "merged.sqlite")
    for sweep_id in sweep_ids:
        counts = merged.run_counts(sweep_id)
        assert len(counts) == 2 and {ok for ok, _ in counts.values()} == {2}, (sweep_id, counts)
    assert "fleet-host-4: unreachable" in done.stdout
    # The failed install removed the .venv it had begun (pip had installed nothing of iomatrix into
    # it) and the unpacked wheels.
    left = (
        "fleet-host-7: its failed install left the source and the copied wheelhouse tar, "
        "no .venv, no unpacked "
        "wheels"
    )
    assert done.stdout.count(left) == 1, done.stdout[-4000:]
    print(f"fleet demo (with an unreachable, a non-root host, a failed install): {took:.0f} s")


@root_only
def test_the_demo_removes_everything_when_stopped() -> None:
    # With the user who is not root: made before the playbook runs, it must be gone after the stop
    # too. Started again while another demo holds the host (exit 2 before anything is made).
    deadline = time.monotonic() + 1800
    while True:
        demo = subprocess.Popen(
            [str(DEMO), "--with-nonroot"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        seen = []
        try:
            assert demo.stdout is not None
            for line in demo.stdout:  # stop it once the hosts are up and the playbook runs
                seen.append(line)
                if "running ansible/sweep.yml" in line:
                    time.sleep(15)
                    demo.send_signal(signal.SIGTERM)
                    break
            rest, _ = demo.communicate(timeout=120)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
        out = "".join(seen) + rest
        if demo.returncode == 2 and any(b in out for b in BUSY) and time.monotonic() < deadline:
            time.sleep(5)
            continue
        break
    assert demo.returncode == 143, out
    assert "removed everything it made" in rest
    with no_other_demo():
        assert leftovers(demo.pid, out) == []
