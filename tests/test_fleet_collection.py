"""The iomatrix.fleet collection as Ansible users and Galaxy see it: ansible-lint at the production
profile, ansible-test sanity, ansible-doc documenting every role variable, and a built artifact that
installs and runs by FQCN. Skipped only where Ansible is not installed (the `fleet` extra:
scripts/setup.sh --fleet)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COLLECTION = REPO / "ansible" / "collections" / "ansible_collections" / "iomatrix" / "fleet"
ROLE = COLLECTION / "roles" / "sweep"
# the venv's console scripts: ansible-lint, ansible-test, ansible-galaxy ...
BIN = Path(sys.executable).parent
yaml = pytest.importorskip(
    "yaml", reason="PyYAML comes with ansible-core (scripts/setup.sh --fleet)"
)

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists() or not (BIN / "ansible-lint").exists(),
    reason="ansible-core and ansible-lint not installed (scripts/setup.sh --fleet)",
)


def ansible(
    tool: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 900
) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
        **(env or {}),
    }
    return subprocess.run(
        [str(BIN / tool), *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout
    )


def copy_collection(tmp_path: Path) -> Path:
    """The collection under a path ending in ansible_collections/iomatrix/fleet (ansible-test needs
    it), without the lint cache a run in the checkout leaves."""
    dest = tmp_path / "ansible_collections" / "iomatrix" / "fleet"
    shutil.copytree(
        COLLECTION, dest, ignore=shutil.ignore_patterns(".ansible", "output", "*.tar.gz")
    )
    return dest


# a minute or two on a loaded 2-core machine: with the slow tests, which CI runs (scripts/test)
@pytest.mark.slow
def test_ansible_lint_passes_at_the_production_profile(tmp_path: Path) -> None:
    # Offline: the collection is found where it was copied to, nothing is fetched from Galaxy.
    done = ansible(
        "ansible-lint",
        "--profile",
        "production",
        "--offline",
        cwd=copy_collection(tmp_path),
        env={"ANSIBLE_COLLECTIONS_PATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stderr + done.stdout


def test_every_role_variable_is_specified_typed_described_and_documented() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"][
        "main"
    ]["options"]
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert spec.get("type") and spec.get("description"), name
    doc = ansible(
        "ansible-doc",
        "-t",
        "role",
        "iomatrix.fleet.sweep",
        cwd=REPO,
        env={"ANSIBLE_COLLECTIONS_PATH": str(REPO / "ansible" / "collections")},
    )
    assert doc.returncode == 0, doc.stderr
    flat = " ".join(doc.stdout.split())
    assert "Sweep one host with iomatrix and fetch its results database." in flat
    for name in defaults:
        assert name in flat, name


def test_the_built_artifact_installs_and_its_playbook_runs_by_fqcn(tmp_path: Path) -> None:
    """No placeholder address, a changelog and runtime metadata; built, installed, found by FQCN
    elsewhere."""
    galaxy = (COLLECTION / "galaxy.yml").read_text()
    assert "example.invalid" not in galaxy
    assert (COLLECTION / "CHANGELOG.md").exists()
    assert "requires_ansible" in yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    built = ansible(
        "ansible-galaxy",
        "collection",
        "build",
        "--output-path",
        str(tmp_path),
        str(COLLECTION),
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (artifact,) = tmp_path.glob("iomatrix-fleet-*.tar.gz")
    installed = tmp_path / "installed"
    done = ansible(
        "ansible-galaxy",
        "collection",
        "install",
        "--offline",
        "-p",
        str(installed),
        str(artifact),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    root = installed / "ansible_collections" / "iomatrix" / "fleet"
    assert (root / "playbooks" / "sweep.yml").exists() and not (root / ".ansible-lint").exists()
    # not the checkout's (it points at ansible/collections)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n")
    syntax = ansible(
        "ansible-playbook",
        "-i",
        str(inventory),
        "iomatrix.fleet.sweep",
        "--syntax-check",
        cwd=tmp_path,
        env=env,
    )
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    doc = ansible("ansible-doc", "-t", "role", "iomatrix.fleet.sweep", cwd=tmp_path, env=env)
    assert doc.returncode == 0 and "iomatrix_install_profile" in doc.stdout, doc.stderr
    # Run from the artifact, away from any checkout: the playbook says in one line what to give it.
    run = ansible(
        "ansible-playbook", "-i", str(inventory), "iomatrix.fleet.sweep", cwd=tmp_path, env=env
    )
    assert run.returncode != 0
    assert (
        "no iomatrix git checkout at" in run.stdout and "fix: -e iomatrix_source_dir=" in run.stdout
    ), run.stdout


@pytest.mark.slow
def test_ansible_test_sanity_passes(tmp_path: Path) -> None:
    """ansible-test sanity on a copy of the collection. Its test environments are made in a private
    HOME; ansible-test bootstraps pip into them with a script from ci-files.testing.ansible.com,
    which a machine that reaches only its package index cannot fetch: that script is stood in for by
    Python's own ensurepip, and everything else comes from the package index as ansible-test
    asks."""
    home = tmp_path / "home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True)
    cert = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or ""
    bootstrap = (
        "import ensurepip, subprocess, sys\n"
        "ensurepip.bootstrap(upgrade=True)\n"
        "args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]\n"
        f"cert = {cert!r}\n"
        "subprocess.check_call([sys.executable, '-m', 'pip', 'install', *(['--cert', "
        "cert] if cert else []), *args])\n"
    )
    # ansible-test asks for the pip version its own bootstrap script carries: stand in for every one
    # it may name.
    for version in ("24_2", "24_3", "25_0", "25_1", "25_2", "25_3"):
        (cache / f"get_pip_{version}.py").write_text(bootstrap)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    done = ansible(
        "ansible-test",
        "sanity",
        "--python",
        python,
        cwd=copy_collection(tmp_path),
        env={"HOME": str(home)},
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert 'Running sanity test "validate-modules"' in done.stdout + done.stderr


INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
    iomatrix_plan: {tmp}/plan.toml
    iomatrix_time_budget: 3m
    iomatrix_project_dir: {tmp}/project
    iomatrix_install: false
    iomatrix_results_dir: {tmp}/results
    iomatrix_poll_interval: 1
    # nothing is installed (iomatrix_install: false): no fio built on the controller for the hosts
    iomatrix_fio: debian
    iomatrix_max_fail_percentage: 40
  children:
    gb:
      hosts:
        h1: {{iomatrix_state_dir: {tmp}/h1, iomatrix_allow_destroy: [/dev/iomatrix-test-missing]}}
        h2: {{iomatrix_state_dir: {tmp}/h2}}
"""


# What these tests check is the role's handling of a sweep (its lines, the fetched database, the
# resume, the publish), never a figure: each run is fio's shortest (0.1 s), without sync +
# drop_caches before it (which also emptied the page cache of every other test running beside), and
# a run the loaded host disturbed is not run again (issue 67).
QUICK_RUNS = "runtime = 0.1\nkeep_caches_warm = true\nretry_disturbed = false\n"


def local_install(tmp_path: Path) -> None:
    """What the role would install in iomatrix_project_dir, standing in for it: this checkout's
    iomatrix (the hosts are this machine, reached by a local connection), and a tiny bare-metal plan
    of one run per cell."""
    bin_dir = tmp_path / "project" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "iomatrix").write_text(f'#!/bin/sh\nexec {BIN / "iomatrix"} "$@"\n')
    (bin_dir / "iomatrix").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    (tmp_path / "plan.toml").write_text(
        'tier = ["baremetal"]\ncache = ["none"]\nworkloads = ["rand-read-4k"]\n'
        f'size = "16M"\n{QUICK_RUNS}[repetitions]\nmin = 1\nmax = 1\n'
        '[[backing]]\ntype = "dir"\n'
    )


@pytest.mark.slow
def test_a_groups_failures_leave_its_later_hosts_unswept_and_fail_the_run(tmp_path: Path) -> None:
    """iomatrix_max_fail_percentage, an inventory variable (per group): with one host at a time, the
    group's first host fails (a device handed over that does not exist: iomatrix refuses it), so the
    second is left unswept in one line, and the run exits non-zero. Both hosts are this machine (a
    local connection), swept by the iomatrix of this checkout."""
    if os.geteuid() != 0:
        pytest.skip("the role refuses a host whose user is not root")
    local_install(tmp_path)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY.format(python=sys.executable, tmp=tmp_path))
    done = ansible(
        "ansible-playbook",
        "-i",
        str(inventory),
        "-e",
        "iomatrix_serial=1",
        str(REPO / "ansible" / "sweep.yml"),
        cwd=tmp_path,
        env={"ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg")},
    )
    assert done.returncode != 0, done.stdout[-3000:]
    h1, h2 = (tmp_path / "results" / "summary.txt").read_text().splitlines()
    assert h1.startswith("h1: failed at 'Wait for the sweep") and "iomatrix-test-missing" in h1, h1
    assert h2.startswith(
        "h2: not swept: 1 of 1 hosts of group 'gb' swept before it failed, more than "
        "iomatrix_max_fail_percentage=40%"
    ), h2
    assert not (tmp_path / "h2").exists()  # nothing made on the host left out


PUBLISH_INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
    iomatrix_plan: {tmp}/plan.toml
    iomatrix_time_budget: 3m
    iomatrix_project_dir: {tmp}/project
    iomatrix_install: false
    iomatrix_results_dir: {tmp}/results
    iomatrix_poll_interval: 1
    # nothing is installed (iomatrix_install: false): no fio built on the controller for the hosts
    iomatrix_fio: debian
  hosts:
    h1: {{iomatrix_state_dir: {tmp}/h1}}
"""


@pytest.mark.slow
def test_the_role_publishes_each_host_and_the_next_run_catches_up_a_failed_publish(
    tmp_path: Path,
) -> None:
    """iomatrix_publish_url: a store that is down fails the host's line in one sentence, without the
        URL's password
    anywhere in Ansible's output, and leaves the host's database and its fetched copy whole; the
    next run (the sweep finished: not swept again) publishes it into a real PostgreSQL, and a third
    adds nothing and changes nothing. The host is this machine (a local connection), swept by this
    checkout's iomatrix."""
    from tests import pg_cluster

    if os.geteuid() != 0 or not pg_cluster.available():
        pytest.skip("root and Debian's postgresql 15 needed")
    psycopg = pytest.importorskip("psycopg")
    local_install(tmp_path)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(PUBLISH_INVENTORY.format(python=sys.executable, tmp=tmp_path))
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg")}
    playbook = str(REPO / "ansible" / "sweep.yml")

    def publish_run(url: str) -> subprocess.CompletedProcess[str]:
        return ansible(
            "ansible-playbook",
            "-i",
            str(inventory),
            "-e",
            f"iomatrix_publish_url={url}",
            playbook,
            cwd=tmp_path,
            env=env,
        )

    # ExitStack first: the pool's exit waits for the store's start, whose stop the stack then owns.
    with contextlib.ExitStack() as stack, socket.socket() as held:
        # The store that is down: a port this test holds bound and never listens on (a connection
        # to it is refused), so the real store, started while the first run sweeps (its initdb
        # beside the sweep, issue 67), cannot be given that port.
        held.bind(("127.0.0.1", 0))
        down = f"postgresql://lab:s3cret@127.0.0.1:{held.getsockname()[1]}/iomatrix"
        with ThreadPoolExecutor(1) as pool:
            started = pool.submit(stack.enter_context, pg_cluster.cluster())
            first = publish_run(down)
        cluster = started.result()
        assert first.returncode != 0, first.stdout[-3000:]
        assert "s3cret" not in first.stdout + first.stderr
        (line,) = (tmp_path / "results" / "summary.txt").read_text().splitlines()
        assert line.startswith(
            "h1: failed at 'Check the publish': publishing to the central store failed (nothing "
            "written there; the next playbook run publishes it, kept in "
            f"{tmp_path}/results/h1.sqlite): cannot reach the PostgreSQL store "
            "postgresql://lab@127.0.0.1:"
        ), line
        fetched = tmp_path / "results" / "h1.sqlite"
        with contextlib.closing(sqlite3.connect(f"file:{fetched}?mode=ro", uri=True)) as db:
            ok = db.execute("SELECT count(*) FROM runs WHERE status='ok'").fetchone()[0]
            # every run of the sweep (a disturbed one is not run again here), as the publish counts
            runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
            assert db.execute("SELECT status FROM sweeps").fetchall() == [("finished",)] and ok > 0
        store = pg_cluster.create_database(cluster, "fleet")
        again = publish_run(store)
        assert again.returncode == 0, again.stdout[-3000:]
        (line,) = (tmp_path / "results" / "summary.txt").read_text().splitlines()
        assert line.startswith("h1: ok: already finished earlier"), line
        assert line.endswith(
            f"published to the central store: 1 sweep(s) added, 0 already there; {runs} run(s) "
            "added, 0 already there"
        ), line
        with psycopg.connect(store) as conn:
            assert conn.execute("SELECT count(*) FROM runs WHERE status='ok'").fetchone()[0] == ok
        third = publish_run(store)
        assert third.returncode == 0, third.stdout[-3000:]
        assert (
            "0 sweep(s) added, 1 already there; 0 run(s) added"
            in (tmp_path / "results" / "summary.txt").read_text()
        )
        assert re.search(r"^h1 +: ok=[0-9]+ +changed=0 ", third.stdout, re.MULTILINE), third.stdout[
            -2000:
        ]


@pytest.mark.slow
def test_an_interrupted_sweep_is_reported_so_and_the_next_run_resumes_it(tmp_path: Path) -> None:
    """A sweep stopped with SIGTERM during the playbook run, once it stored a completed run (what
    the fleet demo's --interrupt-once does to its third host over SSH): the host's line says it was
    interrupted and that re-running the playbook resumes it; the next run resumes that same sweep,
    its completed runs kept as they were and only the rest run after them, says how many it kept,
    and the sweep ends with the plan's runs. The host is this machine (a local connection), swept
    by this checkout's iomatrix; moved here from the demo's test, whose second playbook run over
    SSH cost it a minute (issue 67)."""
    import psutil

    from iomatrix.store import Store

    if os.geteuid() != 0:
        pytest.skip("the role refuses a host whose user is not root")
    local_install(tmp_path)
    # 2 cells x 2 runs of 1 s: a sweep long enough to be stopped after its first run (the page
    # cache kept warm, as local_install's plan: no sync + drop_caches before each run)
    (tmp_path / "plan.toml").write_text(
        'tier = ["baremetal"]\ncache = ["none", "writeback"]\nworkloads = ["rand-read-4k"]\n'
        'size = "16M"\nruntime = 1\nkeep_caches_warm = true\nretry_disturbed = false\n'
        '[repetitions]\nmin = 2\nmax = 2\n[[backing]]\ntype = "dir"\n'
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(PUBLISH_INVENTORY.format(python=sys.executable, tmp=tmp_path))
    playbook = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(REPO / "ansible/sweep.yml"),
    ]
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
    }
    db_path = tmp_path / "h1" / "results.sqlite"
    copy = tmp_path / "interrupted.sqlite"

    def ok_runs() -> int:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
                return int(db.execute("SELECT COUNT(*) FROM runs WHERE status='ok'").fetchone()[0])
        except sqlite3.Error:  # not made yet, or its tables not yet
            return 0

    def sweeps() -> list[psutil.Process]:
        """The `iomatrix run` of this test's host (started by Ansible's async wrapper, detached)."""
        found = []
        for p in psutil.process_iter(["cmdline"]):
            argv = p.info["cmdline"] or []
            if "run" in argv and str(db_path) in argv:
                found.append(p)
        return found

    log = tmp_path / "first.log"  # a file, not a pipe: nothing reads it while the test waits
    with log.open("w") as out_file:
        first = subprocess.Popen(
            playbook, cwd=tmp_path, env=env, stdout=out_file, stderr=subprocess.STDOUT, text=True
        )
    try:
        deadline = time.monotonic() + 600
        while not ok_runs() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped = sweeps()
        assert stopped, "the sweep ended, or never stored a run, before it could be stopped"
        for p in stopped:
            p.send_signal(signal.SIGTERM)
        psutil.wait_procs(stopped, timeout=120)
        with (
            contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as src,
            contextlib.closing(sqlite3.connect(copy)) as dst,
        ):
            src.backup(dst)  # the database as the stop left it
        first.wait(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode != 0, log.read_text()[-3000:]
    (line,) = (tmp_path / "results" / "summary.txt").read_text().splitlines()
    assert line.startswith("h1: failed at 'Wait for the sweep") and (
        "interrupted (exit status 130)" in line and "re-running the playbook resumes it" in line
    ), line

    again = subprocess.run(
        playbook, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout[-3000:]
    with contextlib.closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as before:
        ((sweep_id, status),) = before.execute("SELECT id, status FROM sweeps").fetchall()
        runs_before = before.execute(RUNS).fetchall()
    assert status == "interrupted"
    resumed = tmp_path / "results" / "h1.sqlite"  # the copy the playbook fetched
    with contextlib.closing(sqlite3.connect(f"file:{resumed}?mode=ro", uri=True)) as after:
        assert after.execute("SELECT id, status FROM sweeps").fetchall() == [(sweep_id, "finished")]
        runs_after = after.execute(RUNS).fetchall()
    ok_before = sum(r[4] == "ok" for r in runs_before)
    assert ok_before >= 1 and runs_after[: len(runs_before)] == runs_before  # kept as they were
    added = runs_after[len(runs_before) :]
    assert added and min(r[5] for r in added) >= max(r[6] for r in runs_before)  # run after
    (line,) = (tmp_path / "results" / "summary.txt").read_text().splitlines()
    assert (
        line.startswith("h1: ok: sweep ") and f"(resumed: {ok_before} completed runs kept)" in line
    )
    # not run again: every cell x workload has the plan's 2 runs
    counts = Store.open_existing(resumed).run_counts(sweep_id)
    assert len(counts) == 2 and {ok for ok, _ in counts.values()} == {2}, counts


RUNS = (
    "SELECT id, cell_id, workload, attempt, status, started_at, finished_at FROM runs ORDER BY id"
)


RACKS_INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
    iomatrix_plan: {tmp}/plan.toml
    iomatrix_time_budget: 3m
    iomatrix_project_dir: {tmp}/project
    iomatrix_install: false
    iomatrix_results_dir: {tmp}/results
    iomatrix_poll_interval: 1
    iomatrix_start_together: true
    # A host set up after the common time starts at once and records how late it was: the one time
    # for both is what is checked, not that both were ready before it.
    iomatrix_start_delay: 2
  children:
    rack-a:
      hosts:
        h1: {{iomatrix_state_dir: {tmp}/h1}}
        h2: {{iomatrix_state_dir: {tmp}/h2}}
    rack-b:
      hosts:
        h5: {{iomatrix_state_dir: {tmp}/h5, iomatrix_allow_destroy: [/dev/iomatrix-test-missing]}}
    rack-c:
      hosts:
        h9: {{iomatrix_state_dir: {tmp}/h9}}
"""


@pytest.mark.slow
def test_check_mode_makes_nothing_hosts_start_together_and_limit_runs_only_the_hosts_chosen(
    tmp_path: Path,
) -> None:
    """The playbook as an Ansible user runs it (moved here from the fleet demo's --ansible-checks
    and --shared-backend passes, on this machine's local connection instead of SSH hosts), both runs
    with --limit rack-a,h5 (a group and a host): --check says per host what it would do (the install
    it would make, the device handed over that is missing) and makes nothing; the real run starts
    rack-a's two hosts at one time the controller chose (iomatrix_start_together), which the fleet
    answer says, fails rack-b's host and so exits non-zero; each run's summary holds exactly the
    hosts chosen, and rack-c's host, left out, gets nothing. (A re-run of finished hosts changes
    nothing and exits 0:
    test_the_role_publishes_each_host_and_the_next_run_catches_up_a_failed_publish.)"""
    if os.geteuid() != 0:
        pytest.skip("the role refuses a host whose user is not root")
    local_install(tmp_path)
    # two runs per cell: the fleet answer reads a confidence interval (recommend --min-runs 2)
    plan = tmp_path / "plan.toml"
    plan.write_text(plan.read_text().replace("min = 1\nmax = 1", "min = 2\nmax = 2"))
    assert "max = 2" in plan.read_text()
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(RACKS_INVENTORY.format(python=sys.executable, tmp=tmp_path))
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg")}
    playbook = str(REPO / "ansible" / "sweep.yml")
    results = tmp_path / "results"
    left_out = tmp_path / "h9"

    def playbook_run(*options: str) -> subprocess.CompletedProcess[str]:
        return ansible(
            "ansible-playbook",
            "-i",
            str(inventory),
            "--limit",
            "rack-a,h5",
            *options,
            playbook,
            cwd=tmp_path,
            env=env,
        )

    # --check with the install on, into a directory not made yet: it says it would install there
    fresh = tmp_path / "fresh-install"
    check = playbook_run(
        "--check", "-e", "iomatrix_install=true", "-e", f"iomatrix_project_dir={fresh}"
    )
    assert check.returncode == 0, check.stdout[-3000:]
    lines = (results / "summary-check.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["h1", "h2", "h5"], lines
    for line in lines[:2]:
        assert line.startswith(f"{line.split(':')[0]}: check: would sweep as root; "), line
        assert (
            "devices handed over: none; plan plan.toml, budget 3m; iomatrix would be installed in "
            f"{fresh} (measure)" in line
        ), line
    assert "/dev/iomatrix-test-missing (missing or not a block device" in lines[2], lines[2]
    made = [p for p in (fresh, tmp_path / "h1", tmp_path / "h2", tmp_path / "h5") if p.exists()]
    assert made == [] and [p.name for p in results.iterdir()] == ["summary-check.txt"]

    first = playbook_run()
    assert first.returncode != 0, first.stdout[-3000:]  # h5 failed
    h1, h2, h5 = (results / "summary.txt").read_text().splitlines()
    assert h1.startswith("h1: ok: sweep ") and h2.startswith("h2: ok: sweep "), (h1, h2)
    # iomatrix's own refusal of the device, in the host's one line
    assert h5.startswith("h5: failed at 'Wait for the sweep") and "iomatrix-test-missing" in h5
    assert "refusing to use" in h5, h5
    # the host --limit left out: no task ran on it, nothing fetched from it
    assert not left_out.exists() and not (results / "h9.sqlite").exists()
    assert not re.search(r"^h9 +:", first.stdout.split("PLAY RECAP")[-1], re.MULTILINE)
    merged = tmp_path / "merged.sqlite"
    merge = subprocess.run(
        [
            str(BIN / "iomatrix"),
            "merge",
            str(merged),
            str(results / "h1.sqlite"),
            str(results / "h2.sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert merge.returncode == 0, merge.stderr
    answer = subprocess.run(
        [str(BIN / "iomatrix"), "recommend", "--db", str(merged), "--min-runs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    # One start time for both, chosen on the controller (whether their short runs then overlapped
    # is the host's timing, not the role's)
    flat = " ".join(answer.stdout.split())
    assert "h1, h2 started their runs together at " in flat, answer.stdout[-2000:] + answer.stderr
    with contextlib.closing(sqlite3.connect(f"file:{merged}?mode=ro", uri=True)) as db:
        starts = db.execute(
            "SELECT json_extract(meta_json, '$.started_together.at') FROM runs"
        ).fetchall()
    assert len(starts) >= 2 and len(set(starts)) == 1 and starts[0][0] is not None, starts
