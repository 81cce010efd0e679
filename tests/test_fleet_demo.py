"""scripts/fleet-demo: three hosts in network namespaces swept through Ansible, merged, and all of it removed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import root_only

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "scripts" / "fleet-demo"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.path.exists("/usr/sbin/ip") and not os.path.exists(
    "/sbin/ip"), reason="iproute2 not installed")]


def leftovers(before_tmp: set[str]) -> list[str]:
    """What a demo could have left: its namespaces, veths, processes, temporary directories, loops, mounts."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith("iomatrix-fleet-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if ": iomxf" in line]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"iomatrix-fleet-demo." in argv:
            found.append(f"process {proc.name}: {argv[:120]!r}")
    found += [f"temp dir {p}" for p in sorted(set(map(str, Path("/tmp").glob("iomatrix-fleet-demo.*"))) - before_tmp)]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [f"loop {line}" for line in loops.splitlines() if "iomatrix-fleet-demo." in line]
    found += [f"mount {line}" for line in Path("/proc/mounts").read_text().splitlines()
              if "iomatrix-fleet-demo." in line]
    return found


@root_only
def test_the_demo_sweeps_three_hosts_reports_the_bad_ones_and_leaves_nothing(tmp_path: Path) -> None:
    before = set(map(str, Path("/tmp").glob("iomatrix-fleet-demo.*")))
    kept = tmp_path / "kept"
    started = time.monotonic()
    done = subprocess.run([str(DEMO), "--with-unreachable", "--with-failing", "--twice", "--keep-results", str(kept)],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert leftovers(before) == []

    summary = (kept / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == [f"fleet-host-{n}" for n in (1, 2, 3, 4, 5)]
    assert summary[3].startswith("fleet-host-4: unreachable: ") and "10.231.4.2" in summary[3]
    # A host whose sweep iomatrix refuses (a device handed over that does not exist): its one line, iomatrix's own.
    assert summary[4].startswith("fleet-host-5: failed at 'Wait for the sweep") and "refusing to use" in summary[4]
    assert all(line.startswith(f"fleet-host-{n}: ok: already finished earlier") for n, line in
               zip((1, 2, 3), summary, strict=False))  # the second pass did not sweep again
    db = sqlite3.connect(f"file:{kept / 'merged.sqlite'}?mode=ro", uri=True)
    per_host = dict(db.execute("SELECT h.hostname, COUNT(*) FROM sweeps s JOIN hosts h ON h.id=s.host_id "
                               "WHERE s.status='finished' GROUP BY h.hostname"))
    assert per_host == {"fleet-host-1": 1, "fleet-host-2": 1, "fleet-host-3": 1}
    ok_runs = db.execute("SELECT COUNT(*) FROM runs WHERE status='ok'").fetchone()[0]
    assert ok_runs >= 3 * 4  # 2 cells x 1 workload x 2 repetitions per host, retries of disturbed runs on top
    db.close()
    assert "fleet-host-4: unreachable" in done.stdout
    print(f"fleet demo (twice, with an unreachable and a failing host): {took:.0f} s")


@root_only
def test_the_demo_removes_everything_when_stopped(tmp_path: Path) -> None:
    before = set(map(str, Path("/tmp").glob("iomatrix-fleet-demo.*")))
    demo = subprocess.Popen([str(DEMO)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
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
