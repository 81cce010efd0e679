"""scripts/fleet-demo: three hosts in network namespaces swept through Ansible, merged, and all of
it removed; the bad hosts (unreachable, a refused device, not root, a failed install) reported in
one line each, an interrupted sweep resumed; the playbook run as an Ansible user would (--check,
--limit, a second run with no change)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.backing.iscsi import tgtd_socket_files
from iomatrix.hostcmd import version_of
from iomatrix.store import Store
from tests import pg_cluster
from tests.conftest import root_only

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "scripts" / "fleet-demo"
DEMO_USER = "iomatrix-demo-user"  # the throw-away user of --with-nonroot

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists("/usr/sbin/ip") and not os.path.exists("/sbin/ip"),
        reason="iproute2 not installed",
    ),
]


def leftovers(before_tmp: set[str]) -> list[str]:
    """What a demo could have left: its namespaces, veths, processes, temporary directories, loops,
    mounts."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [
        f"netns {line.split()[0]}"
        for line in netns.splitlines()
        if line.startswith("iomatrix-fleet-")
    ]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}" for line in links.splitlines() if ": iomxf" in line
    ]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        # the latter: --shared-backend's tgtd
        if b"iomatrix-fleet-demo." in argv or b"portal=10.231." in argv:
            found.append(f"process {proc.name}: {argv[:120]!r}")
    # The demo's directory, and the playbook's own for the source tarball (iomatrix-fleet-XXXX).
    found += [
        f"temp dir {p}"
        for p in sorted(set(map(str, Path("/tmp").glob("iomatrix-fleet-*"))) - before_tmp)
    ]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [f"loop {line}" for line in loops.splitlines() if "iomatrix-fleet-demo." in line]
    found += [
        f"mount {line}"
        for line in Path("/proc/mounts").read_text().splitlines()
        if "iomatrix-fleet-demo." in line
    ]
    for database in ("passwd", "group"):
        if subprocess.run(["getent", database, DEMO_USER], capture_output=True).returncode == 0:
            found.append(f"{database} entry {DEMO_USER}")
    return found


@root_only
def test_the_demo_sweeps_three_hosts_reports_the_bad_ones_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """One run of the demo for every bad host and the resume, as CI has time for one: hosts 4
    (unreachable), 5 (a device that does not exist), 6 (not root), 7 (its install fails: a
    wheelhouse without the dependencies and no package index) and 3, whose first sweep is stopped
    part-way with SIGTERM. Molecule-style, with --ansible-checks: --check first (says what it would
    do, makes nothing), converge, converge again, then --limit rack-a (finished hosts: changed=0,
    exit 0) and --limit fleet-host-5 (that host alone, exit non-zero). With --store postgresql
    (where Debian's postgresql is installed): the playbook publishes every host it fetched into a
    throw-away PostgreSQL, and recommend and history on the store answer as on the merged file."""
    before = set(map(str, Path("/tmp").glob("iomatrix-fleet-*")))
    kept = tmp_path / "kept"
    store = pg_cluster.available()
    started = time.monotonic()
    done = subprocess.run(
        [
            str(DEMO),
            "--with-unreachable",
            "--with-failing",
            "--with-nonroot",
            "--with-broken-install",
            "--interrupt-once",
            "--twice",
            "--ansible-checks",
            "--shared-backend",
            "--keep-results",
            str(kept),
            *(["--store", "postgresql"] if store else []),
        ],
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=REPO,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert leftovers(before) == []  # the demo's user included
    # --shared-backend's tgtd took its control socket with it: the demo's own, by the control port
    # it names (another tgtd on this host, with a control port of its own, is not the demo's to
    # judge)
    ports = [int(n) for n in re.findall(r"shared backend: tgtd on control port (\d+)", done.stdout)]
    assert ports, done.stdout[-2000:]
    assert [f for n in ports for f in tgtd_socket_files(n) if f.exists()] == []

    # --shared-backend: hosts 1-3 swept one tgtd (a LUN each, handed over as iscsi://) with one
    # start time, and the fleet answer says they ran together and for how long all three were
    # running at once.
    shared = " ".join((kept / "shared-answer.txt").read_text().split())
    assert "fleet-host-1, fleet-host-2, fleet-host-3 started their runs together at " in shared, (
        shared[:2000]
    )
    assert (
        "all 3 were running at once for " in shared
        and "each host's figures include the others' load" in shared
    )
    db = sqlite3.connect(f"file:{kept / 'shared.sqlite'}?mode=ro", uri=True)
    starts = db.execute(
        "SELECT h.hostname, json_extract(r.meta_json, '$.started_together.at'), r.status "
        "FROM runs r "
        "JOIN cells c ON c.id = r.cell_id JOIN sweeps s ON s.id = c.sweep_id "
        "JOIN hosts h ON h.id = s.host_id"
    ).fetchall()
    db.close()
    assert {h for h, _, _ in starts} == {"fleet-host-1", "fleet-host-2", "fleet-host-3"}
    # one common time
    assert len({at for _, at, _ in starts}) == 1 and None not in {at for _, at, _ in starts}
    assert sum(status == "ok" for *_, status in starts) >= 3 * 4  # 2 cells x 2 runs per host

    # Then clients on hosts 1-3 at once against one LUN they all log in to
    # ([[backing.client_host]]), driven from here by one fio --client: each run's clients are those
    # hosts, in order, with per-client rows and Jain's index. the terminal's lines joined
    rank = " ".join((kept / "shared-clients-rank.txt").read_text().split())
    assert "san: client 1, 2, … on 10.231.1.2, 10.231.2.2, 10.231.3.2" in rank, rank[-2000:]
    db = sqlite3.connect(f"file:{kept / 'shared-clients.sqlite'}?mode=ro", uri=True)
    runs = db.execute(
        "SELECT json_extract(meta_json, '$.client_hosts'), "
        "(SELECT count(DISTINCT client) FROM run_clients rc WHERE rc.run_id = r.id) FROM runs r "
        "WHERE r.status = 'ok'"
    ).fetchall()
    db.close()
    by_n = {len(json.loads(hosts_json)): clients for hosts_json, clients in runs}
    assert by_n.keys() == {1, 2, 3} and by_n[3] == 3 and by_n[2] == 2

    first = (kept / "summary-first.txt").read_text().splitlines()
    summary = (kept / "summary-again.txt").read_text().splitlines()
    for lines in (first, summary):
        assert [line.split(":")[0] for line in lines] == [
            f"fleet-host-{n}" for n in (1, 2, 3, 4, 5, 6, 7)
        ]
        assert lines[3].startswith("fleet-host-4: unreachable: ") and "10.231.4.2" in lines[3]
        # A host whose sweep iomatrix refuses (a device handed over that does not exist): one line,
        # iomatrix's own.
        assert (
            lines[4].startswith("fleet-host-5: failed at 'Wait for the sweep")
            and "refusing to use" in lines[4]
        )
        # A host reached as a user who is not root: refused before anything is installed, with the
        # fix.
        assert lines[5].startswith(
            f"fleet-host-6: failed at 'Check that the host runs the sweep as root': the sweep "
            f"would run as '{DEMO_USER}', not root"
        ), lines[5]
        assert "fix: set ansible_user to root, or become to true" in lines[5]
        # A host whose install fails (setup.sh's pip step: no package index, a wheelhouse without
        # the dependencies): the step, what pip lacked and the fix, in one line; both times (nothing
        # of the failed install was kept).
        assert lines[6].startswith(
            "fleet-host-7: failed at 'Check the install (scripts/setup.sh)': pip could not "
            "install the Python dependencies (No matching distribution found for "
        ), lines[6]
        assert "from the wheelhouse wheelhouse-pip-only.tar alone" in lines[6]
        assert "fix: put every dependency in it (python3 -m pip download" in lines[6]
    assert all(
        line.startswith(f"fleet-host-{n}: ok: sweep ")
        for n, line in zip((1, 2), first, strict=False)
    )
    assert all(
        line.startswith(f"fleet-host-{n}: ok: already finished earlier")
        for n, line in zip((1, 2), summary, strict=False)
    )  # the second pass did not sweep them again

    # fleet-host-3: stopped after a completed run, reported so, resumed by the second pass, which
    # kept its runs.
    assert (
        first[2].startswith("fleet-host-3: failed at 'Wait for the sweep")
        and "interrupted (exit status 130)" in first[2]
        and "re-running the playbook resumes it" in first[2]
    ), first[2]
    interrupted = sqlite3.connect(f"file:{kept / 'host3-interrupted.sqlite'}?mode=ro", uri=True)
    resumed = sqlite3.connect(f"file:{kept / 'fleet-host-3.sqlite'}?mode=ro", uri=True)
    ((sweep_id, status),) = interrupted.execute("SELECT id, status FROM sweeps").fetchall()
    assert status == "interrupted"
    assert resumed.execute("SELECT id, status FROM sweeps").fetchall() == [(sweep_id, "finished")]
    runs = (
        "SELECT id, cell_id, workload, attempt, status, started_at, finished_at FROM runs "
        "ORDER BY id"
    )
    runs_before, runs_after = interrupted.execute(runs).fetchall(), resumed.execute(runs).fetchall()
    ok_before = sum(r[4] == "ok" for r in runs_before)
    assert ok_before >= 1 and runs_after[: len(runs_before)] == runs_before  # kept as they were
    added = runs_after[len(runs_before) :]
    # the rest, after the stop
    assert added and min(r[5] for r in added) >= max(r[6] for r in runs_before)
    assert (
        summary[2].startswith("fleet-host-3: ok: sweep ")
        and f"(resumed: {ok_before} completed runs kept)" in summary[2]
    ), summary[2]
    interrupted.close()
    resumed.close()
    # Not run again: every cell x workload has the plan's 2 runs (a retry's replaced run left out).
    assert {
        ok
        for ok, _ in Store.open_existing(kept / "fleet-host-3.sqlite").run_counts(sweep_id).values()
    } == {2}
    merged_again = (kept / "merge-again.log").read_text()
    assert "fleet-host-3.sqlite: 1 sweep(s) added" in merged_again
    assert merged_again.count("0 sweep(s) added with 0 run(s)") == 2  # hosts 1 and 2: nothing new
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
    ok_runs = db.execute("SELECT COUNT(*) FROM runs WHERE status='ok'").fetchone()[0]
    # 2 cells x 1 workload x 2 repetitions per host, retries of disturbed runs on top
    assert ok_runs >= 3 * 4
    db.close()
    assert "fleet-host-4: unreachable" in done.stdout
    # The failed install removed the .venv it had begun (pip had installed nothing of iomatrix into
    # it), both times.
    left = (
        "fleet-host-7: its failed install left the source and the copied wheelhouse tar, "
        "no .venv, no unpacked "
        "wheels"
    )
    assert done.stdout.count(left) == 2, done.stdout[-4000:]

    # --check, before anything was installed: each host says what it would do; the demo checked
    # nothing was made.
    check = (kept / "check-summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in check] == [
        f"fleet-host-{n}" for n in (1, 2, 3, 4, 5, 6, 7)
    ]
    for n in (1, 2, 3):
        assert check[n - 1].startswith(f"fleet-host-{n}: check: would sweep as root; "), check[
            n - 1
        ]
        assert (
            "devices handed over: none; plan fleet-demo.toml, budget 3m; iomatrix would "
            "be installed" in check[n - 1]
        )
    assert "/dev/iomatrix-fleet-demo-missing (missing or not a block device" in check[4]
    assert check[5].startswith(
        "fleet-host-6: failed at 'Check that the host runs the sweep as root'"
    ), check[5]
    assert "--check made nothing on the hosts" in done.stdout
    # --limit rack-a on finished hosts: exactly those two, nothing changed (the recap), exit 0.
    assert [
        line.split(":")[0] for line in (kept / "summary-limit-rack-a.txt").read_text().splitlines()
    ] == ["fleet-host-1", "fleet-host-2"]
    recap = (kept / "ansible-limit-rack-a.log").read_text().split("PLAY RECAP")[-1]
    for n in (1, 2):
        assert (
            f"fleet-host-{n}" in recap
            and recap.split(f"fleet-host-{n}")[1].split()[2] == "changed=0"
        ), recap
    # --limit on a failing host: the summary is that host alone, the run failed.
    limited = (kept / "summary-limit-host-5.txt").read_text().splitlines()
    assert len(limited) == 1 and limited[0].startswith("fleet-host-5: failed at "), limited
    assert "--limit fleet-host-5 exited 0" not in done.stdout
    if store:
        central_store_answers_as_the_merged_file(kept, first, summary, done.stdout)
    print(
        "fleet demo (twice, with an unreachable, a failing, a non-root host, a failed "
        "install, one sweep resumed): "
        f"{took:.0f} s"
    )


def central_store_answers_as_the_merged_file(
    kept: Path, first: list[str], again: list[str], stdout: str
) -> None:
    """--store postgresql: each host fetched was published by the playbook (hosts 1 and 2 in the
    first pass, then nothing new; host 3, interrupted in the first pass, in the second), and
    recommend and history on the store give the merged file's answers (sweep ids aside: the store
    numbers sweeps in the order the hosts took turns)."""
    for n in (1, 2):
        assert re.search(
            r"; published to the central store: 1 sweep\(s\) added, 0 already there; [1-9][0-9]* "
            r"run\(s\) added, 0 already there$",
            first[n - 1],
        ), first[n - 1]
        assert (
            "; published to the central store: 0 sweep(s) added, 1 already there; 0 run(s) added"
            in again[n - 1]
        )
    assert "published" not in first[2]  # interrupted: not fetched, not published
    assert "; published to the central store: 1 sweep(s) added" in again[2], again[2]
    for what in ("recommend", "history"):
        on_store, on_file = (
            (kept / f"{where}-{what}.json").read_text() for where in ("store", "merged")
        )
        assert pg_cluster.same_answers(on_store, on_file) is None, what
        assert all(f"fleet-host-{n}" in on_file for n in (1, 2, 3)), what
        assert f"{what} on the store gives the merged file's answer" in stdout


@root_only
def test_the_demo_removes_everything_when_stopped(tmp_path: Path) -> None:
    before = set(map(str, Path("/tmp").glob("iomatrix-fleet-*")))
    # With the user who is not root: made before the playbook runs, it must be gone after the stop
    # too.
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
    assert demo.returncode == 143, "".join(seen) + rest
    assert "removed everything it made" in rest
    assert leftovers(before) == []
