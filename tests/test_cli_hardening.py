"""CLI edges: locks between two real sweeps, usage, version, ranges, workdir and db checks, crash
log."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from iomatrix.cli import main
from tests.conftest import DATA, iomatrix_argv, root_only, run_cli

SCHEMA1 = DATA / "schema1" / "iomatrix-schema1.sqlite"


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# A sweep whose locks the tests below hold while others are refused: what is checked is who holds
# which lock, never a figure, so short runs on a small file, and no retry of a run the loaded host
# disturbed (at load 1-3 most short runs are flagged, each retry one run more to wait for). Two
# rounds, so that the first sweep still runs when its lock is seen (it is frozen then).
HELD_PLAN = (
    'tier = ["baremetal"]\nworkloads = ["rand-read-4k"]\nsize = "4M"\nruntime = 0.5\n'
    "retry_disturbed = false\n[repetitions]\nmin = 2\nmax = 2\n"
)


def test_second_sweep_on_the_same_db_or_workdir_names_the_first(tmp_path: Path) -> None:
    plan = tmp_path / "slow.toml"
    # The first sweep is frozen (SIGSTOP) while the others are refused, so its length need not
    # cover them.
    plan.write_text(HELD_PLAN)
    db, work = tmp_path / "r.sqlite", tmp_path / "w"
    first = subprocess.Popen(
        [*iomatrix_argv(), "run", str(plan), "--db", str(db), "--workdir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = tmp_path / "r.sqlite.lock"
        deadline = time.monotonic() + 120
        while not (lock.exists() and lock.read_text().strip()):
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # Freeze the first sweep while it holds its locks, so the checks below never race its end on
        # a slow host.
        os.kill(first.pid, signal.SIGSTOP)
        try:
            same_db = run_cli("run", str(plan), "--db", str(db), "--workdir", str(tmp_path / "w2"))
            one_line_error(same_db, "results database", "in use by process", str(first.pid))
            same_work = run_cli(
                "run", str(plan), "--db", str(tmp_path / "other.sqlite"), "--workdir", str(work)
            )
            one_line_error(same_work, "working directory", "in use by process", str(first.pid))
            assert not (tmp_path / "other.sqlite").exists()
        finally:
            os.kill(first.pid, signal.SIGCONT)
    finally:
        _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    # Once the first is done, the lock is free: the same command resumes (and finds nothing left to
    # do).
    again = run_cli("run", str(plan), "--db", str(db), "--workdir", str(work))
    assert again.returncode == 0, again.stdout + again.stderr


def _wait_for_holder(first: subprocess.Popen[str], lock: Path) -> None:
    """Until the sweep `first` has written its pid into `lock` (bounded)."""
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip()):
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_hard_link_to_a_database_a_sweep_writes_is_refused_with_the_holder(
    tmp_path: Path,
) -> None:
    from iomatrix.locks import identity_held

    # Issue 50: `ln x.sqlite hard.sqlite`, then a second sweep on hard.sqlite, was not refused (the
    # lock was keyed on the name): it wrote its runs through its own -wal, and afterwards the file
    # held only the other sweep's.
    plan = tmp_path / "l.toml"
    plan.write_text(HELD_PLAN)
    db, work = tmp_path / "x.sqlite", tmp_path / "w"
    (tmp_path / "elsewhere").mkdir()
    hard = tmp_path / "elsewhere" / "hard.sqlite"
    first = subprocess.Popen(
        [*iomatrix_argv(), "run", str(plan), "--db", str(db), "--workdir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_holder(first, tmp_path / "x.sqlite.lock")
        deadline = time.monotonic() + 120
        while not identity_held(db):  # the new file, once created, is held by its inode
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        # holds its locks while the second is refused, however slow the host
        os.kill(first.pid, signal.SIGSTOP)
        try:
            os.link(db, hard)
            second = run_cli("run", str(plan), "--db", str(hard), "--workdir", str(tmp_path / "w2"))
            one_line_error(
                second,
                f"results database {hard} is in use by process {first.pid}",
                "iomatrix",
                "same file",
            )
            assert not (tmp_path / "elsewhere" / "hard.sqlite-wal").exists()
            if os.geteuid() == 0 and shutil.which("unshare"):
                # A bind mount of the file itself, in a mount namespace of its own (gone with the
                # command).
                (tmp_path / "mnt.sqlite").touch()
                bound = subprocess.run(
                    [
                        "unshare",
                        "--mount",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        'mount --bind "$1" "$2" && shift 2 && exec "$@"',
                        "sh",
                        str(db),
                        str(tmp_path / "mnt.sqlite"),
                        *iomatrix_argv(),
                        "run",
                        str(plan),
                        "--db",
                        str(tmp_path / "mnt.sqlite"),
                        "--workdir",
                        str(tmp_path / "w3"),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                one_line_error(bound, "mnt.sqlite is in use by process", str(first.pid))
        finally:
            os.kill(first.pid, signal.SIGCONT)
    finally:
        _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    with sqlite3.connect(db) as con:  # the first sweep, whole, and nothing else
        assert con.execute("SELECT status, COUNT(*) FROM sweeps").fetchone() == ("finished", 1)
        runs = con.execute("SELECT COUNT(*), SUM(status='ok') FROM runs").fetchone()
        assert runs[0] == runs[1] >= 2
    con.close()
    # Once the sweep is done, the link is a usable name for the same file: a sweep through it adds
    # to the file.
    again = run_cli("run", str(plan), "--db", str(hard), "--workdir", str(work))
    assert again.returncode == 0, again.stdout + again.stderr
    with sqlite3.connect(db) as con:
        assert (
            con.execute(
                "SELECT COUNT(*), SUM(r.status='ok') FROM runs r JOIN cells c ON c.id=r.cell_id "
                "WHERE c.sweep_id=1"
            ).fetchone()
            == runs
        )
        assert con.execute("SELECT COUNT(*) FROM sweeps WHERE status='finished'").fetchone()[0] == 2
    con.close()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("rank", "--top", "0"), ("--top 0", "1 or more")),
        (("rank", "--min-runs", "1"), ("--min-runs 1", "2 or more")),
        (("rank", "--max-noise", "-1"), ("--max-noise", "above 0")),
        (("results", "--metric", "bogus"), ("no metric 'bogus'", "read.iops", "'all'")),
        (("monitor", "--run", "1", "--fields", "bogus"), ("'bogus'", "cpu.")),
    ],
)
def test_report_options_out_of_range(
    tmp_path: Path,
    args: tuple[str, ...],
    needles: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "r.sqlite"
    shutil.copyfile(SCHEMA1, db)
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), err


@pytest.mark.parametrize("workdir", ["/dev/null", "FILE", "/proc/iomatrix", "/sys/kernel/iomatrix"])
def test_bad_workdir_or_db_creates_nothing(tmp_path: Path, workdir: str) -> None:
    (tmp_path / "FILE").write_text("x")
    proc = run_cli(
        "run", "quick", "--db", str(tmp_path / "r.sqlite"), "--workdir", workdir, cwd=tmp_path
    )
    one_line_error(proc, "--workdir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


def test_db_that_is_a_directory_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    proc = run_cli("run", "quick", "--db", "d", cwd=tmp_path)
    one_line_error(proc, "a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert not list((tmp_path / "d").iterdir())


def test_run_without_a_plan_prints_usage_and_version_works(tmp_path: Path) -> None:
    proc = run_cli("run", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: iomatrix run: Missing argument 'PLAN'. — see 'iomatrix run --help'"
    )
    assert list(tmp_path.iterdir()) == []
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("iomatrix ")


def test_unexpected_error_is_one_line_with_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An internal failure (a bug: an exception no code expects) while a report opens its database.
    db = tmp_path / "r.sqlite"
    shutil.copyfile(SCHEMA1, db)
    from iomatrix.store import Store

    def bug(path: Path) -> Store:
        raise ZeroDivisionError("a bug in the report code")

    monkeypatch.setattr(Store, "open_existing", staticmethod(bug))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as exit_:
        main(["results", "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "internal error" in lines[0] and "full traceback in" in lines[0], err
    logs = list((tmp_path / "cache" / "iomatrix" / "logs").glob("crash-*.log"))
    assert len(logs) == 1 and "Traceback" in logs[0].read_text()
    assert str(logs[0]) in lines[0]


def test_damaged_json_in_a_database_is_skipped_by_a_report_naming_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    shutil.copyfile(SCHEMA1, db)
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET phases_json='not json' WHERE id=(SELECT MIN(id) FROM runs)")
    con.commit()
    con.close()
    main(["results", "--db", str(db)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "damaged" in ln]
    assert len(lines) == 1 and "1 damaged row skipped" in lines[0], err
    assert "runs row 1 holds 'not json' in column phases_json, not JSON" in lines[0]
    # A sweep does not add runs to it: refused in one line naming the same place.
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "run",
                str(DATA / "schema1" / "tiny.toml"),
                "--db",
                str(db),
                "--workdir",
                str(tmp_path / "w"),
            ]
        )
    assert exit_.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert (
        len(lines) == 1
        and "is damaged: runs row 1 holds 'not json' in column phases_json" in lines[0]
    ), lines


def test_non_root_warning_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import iomatrix.commands.run as run_command

    def stop_before_the_sweep(*_: object, **__: object) -> None:
        raise SystemExit(0)

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # The warning is printed once the plan is accepted, before the sweep starts (a refused plan
    # prints only its error): stop where the sweep would start.
    monkeypatch.setattr(run_command, "_run_locked", stop_before_the_sweep)
    plan = tmp_path / "p.toml"
    plan.write_text('tier = ["baremetal"]\nworkloads = ["rand-read-4k"]\nsize = "4M"\n')
    with pytest.raises(SystemExit):
        main(
            ["run", str(plan), "--db", str(tmp_path / "r.sqlite"), "--workdir", str(tmp_path / "w")]
        )
    assert "cannot be dropped" in capsys.readouterr().err


@root_only
def test_all_failed_sweep_exits_3_and_says_how_many(tmp_path: Path) -> None:
    # A real ENOSPC: 4 MiB of writes into an 8 MiB tmpfs that something else fills once it is
    # mounted (a plan that cannot fit is refused before it runs: test_enospc.py).
    import threading

    from tests.test_enospc import fill_when_mounted

    plan = tmp_path / "full.toml"
    plan.write_text(
        'tier = ["baremetal"]\ncache = ["writeback"]\nworkloads = ["seq-write-1m"]\nsize = "4M"\n'
        'runtime = 1\n[repetitions]\nmin = 1\nmax = 1\n[[backing]]\ntype = "tmpfs"\nsize = "8M"\n'
    )
    stop = threading.Event()
    filler = threading.Thread(
        target=fill_when_mounted, args=(tmp_path / "w", stop, 1 << 20), daemon=True
    )
    filler.start()
    try:
        proc = run_cli(
            "run", str(plan), "--db", str(tmp_path / "r.sqlite"), "--workdir", str(tmp_path / "w")
        )
    finally:
        stop.set()
        filler.join(timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "every run failed (3 runs)" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@root_only
def test_database_made_immutable_mid_sweep_stops_with_one_line_and_keeps_every_run(
    tmp_path: Path,
) -> None:
    # SQLite writes its WAL index through a shared mapping: an immutable -shm used to end in SIGBUS.
    plan = tmp_path / "p.toml"
    # 5 rounds: 2 stored before the file turns immutable, 3 left for the sweep to fail on and the
    # resume to run; no retries of runs the loaded host disturbed (each one more run to wait for,
    # and no part of what is checked).
    plan.write_text(
        'tier = ["baremetal"]\ncache = ["none"]\nworkloads = ["rand-read-4k"]\nsize = "16M"\n'
        "runtime = 1\nretry_disturbed = false\n[repetitions]\nmin = 5\nmax = 5\n"
    )
    db = tmp_path / "r.sqlite"
    files = [str(db), f"{db}-wal", f"{db}-shm"]
    sweep = subprocess.Popen(
        [*iomatrix_argv(), "run", str(plan), "--db", str(db), "--workdir", str(tmp_path / "w")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_ok_run_ids(db)) < 2:
            assert sweep.poll() is None, sweep.stderr.read() if sweep.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.2)
        if subprocess.run(["chattr", "+i", *files], capture_output=True).returncode != 0:
            sweep.kill()
            pytest.skip("filesystem does not support chattr +i")
        # write the -shm pages back, so the next write to them faults
        subprocess.run(["sync"], check=True)
        kept = _ok_run_ids(db)
        _, err = sweep.communicate(timeout=300)
        proc = subprocess.CompletedProcess(sweep.args, sweep.returncode, "", err)
        one_line_error(
            proc, "became unwritable during the sweep", "runs recorded so far are kept", "chattr -i"
        )
        # Still readable while immutable, with every run committed before the change.
        assert set(kept) <= set(_ok_run_ids(db)), kept
        results = run_cli("results", "--db", str(db))
        assert results.returncode == 0 and "read.iops" in results.stdout, results.stderr
    finally:
        subprocess.run(["chattr", "-i", *files], capture_output=True)
        if sweep.poll() is None:
            sweep.kill()
    resumed = run_cli("run", str(plan), "--db", str(db), "--workdir", str(tmp_path / "w"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {len(kept)} completed runs kept" in resumed.stdout
    # 5 runs, plus the retries of runs the rest of the host disturbed (none here: retry_disturbed =
    # false).
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    retries = con.execute(
        "SELECT COUNT(*) FROM runs WHERE status='ok' AND retry_of IS NOT NULL"
    ).fetchone()[0]
    con.close()
    assert len(_ok_run_ids(db)) == 5 + retries


def _ok_run_ids(db: Path) -> list[int]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return [r[0] for r in con.execute("SELECT id FROM runs WHERE status='ok' ORDER BY id")]
        finally:
            con.close()
    except sqlite3.Error:
        return []


def _as_nobody(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`iomatrix ARGS` as the real unprivileged user nobody (setpriv), with this checkout's
    source."""
    import sysconfig

    import iomatrix

    python = shutil.which(
        f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin"
    )
    if python is None or shutil.which("setpriv") is None:
        pytest.skip(
            "needs setpriv and a system Python of this version (the venv's lives under /root)"
        )
    src = str(Path(iomatrix.__file__).parents[1])
    path = f"{src}:{sysconfig.get_paths()['purelib']}"
    return subprocess.run(
        [
            "setpriv",
            "--reuid",
            "nobody",
            "--regid",
            "nogroup",
            "--clear-groups",
            "env",
            "-i",
            f"PATH={os.environ['PATH']}",
            f"PYTHONPATH={path}",
            *(f"{k}={v}" for k, v in env.items()),
            python,
            "-c",
            "from iomatrix.cli import main; main()",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )


@root_only
def test_guest_info_as_a_non_root_user(tmp_path: Path) -> None:
    # No home at all: nothing cached, and info still says what a build would use.
    proc = _as_nobody("guest", "info", env={"HOME": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert (
        "cache dir: /nonexistent/.cache/iomatrix/guest" in proc.stdout
        and "would use:" in proc.stdout
    )
    # Someone else's cache (root's, mode 0700): one line naming it and the fix.
    top = Path(tempfile.mkdtemp(prefix="iomx-nonroot-"))
    try:
        top.chmod(0o755)
        cache = top / "cache"
        (cache / "guest" / "builds").mkdir(parents=True)
        cache.chmod(0o700)
        proc = _as_nobody(
            "guest", "info", env={"HOME": "/nonexistent", "IOMATRIX_CACHE": str(cache)}
        )
        one_line_error(proc, "cannot be read by this user", "IOMATRIX_CACHE")
    finally:
        shutil.rmtree(top, ignore_errors=True)
