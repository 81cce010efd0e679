"""scripts/setup.sh beside another setup.sh and beside scripts/test, and its .venv made whole or not
at all (issue 69).

Each test runs the real setup.sh (and scripts/test) in a copy of this checkout under tmp_path, with
a .venv made cheaply: `python -m venv --without-pip`, and a .pth file that puts the copy's src/ and
the test interpreter's own site-packages (pip, pytest, the dependencies) on its path, with the
stamps setup.sh writes after a pip install. setup.sh then finds its Python environment up to date
and installs nothing: no apt-get, no pip download. A host that lacks a Debian package setup.sh
would install skips these tests instead (they never install anything system-wide)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"
# The interpreter behind the tests' venv (a venv's bin/python is a link to it): the copies' venvs
# are made with it, so the test venv's compiled packages load in them.
BASE_PYTHON = os.path.realpath(sys.executable)
WAITS = "setup: waiting for another scripts/setup.sh on this host"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setup.sh runs as root")


def _packages(fleet: bool) -> list[str]:
    """The Debian packages setup.sh checks for a full install (with --fleet's): its arrays, read
    from the script."""
    text = SETUP.read_text()
    arrays = {m[1]: m[2].split() for m in re.finditer(r"(?m)^(\w+)=\(([^)]*)\)", text)}
    protocols = [k for k in arrays if k.endswith("_packages") and k != "minimal_packages"]
    names = arrays["packages"] + [p for k in protocols for p in arrays[k]]
    if fleet:
        extra = re.search(r"then packages\+=\(([^)$]*)\); fi", text)
        assert extra is not None, "setup.sh's --fleet packages line moved"
        names += extra[1].split()
    return names


def _skip_unless_installed(fleet: bool) -> None:
    names = _packages(fleet)
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Status}\n", *names],
        capture_output=True,
        text=True,
    ).stdout
    installed = {ln.split()[0] for ln in out.splitlines() if ln.endswith("install ok installed")}
    missing = sorted(set(names) - installed)
    if missing:
        pytest.skip(f"setup.sh would install {len(missing)} Debian packages here: {missing[:5]}")


def _project_sha(pyproject: Path) -> str:
    """What setup.sh stamps a venv with: the sha256 of pyproject.toml's [project] and
    [build-system] tables (its project_sha)."""
    d = tomllib.loads(pyproject.read_text())
    what = {k: d.get(k) for k in ("project", "build-system")}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def fill_venv(venv: Path, checkout: Path) -> None:
    """Make `venv` (made by `python -m venv --without-pip`) serve setup.sh as if pip had installed
    iomatrix with every extra: the checkout's src/ and this interpreter's site-packages on its path,
    the console scripts setup.sh and scripts/test call, and setup.sh's stamps."""
    (site,) = (venv / "lib").glob("python3*/site-packages")
    paths = dict.fromkeys(
        [str(checkout / "src"), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    (site / "iomatrix-test-checkout.pth").write_text("".join(f"{p}\n" for p in paths))
    bin_dir = venv / "bin"
    script = bin_dir / "iomatrix"
    script.write_text(
        f"#!{bin_dir}/python\nimport sys\nfrom iomatrix.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    here = Path(sys.executable).parent
    for tool in ("ruff", "ansible-playbook"):
        if (here / tool).exists():
            (bin_dir / tool).symlink_to(here / tool)
    (venv / ".iomatrix-installed").write_text("charts\ndev\nfleet\npostgresql\n")
    (venv / ".iomatrix-project-sha256").write_text(_project_sha(checkout / "pyproject.toml") + "\n")


def make_checkout(tmp: Path, *, tests: bool = False) -> Path:
    """A copy of this checkout's scripts, pyproject.toml and src/ (with tests/ and bench/ when
    scripts/test runs in it), and its .venv; no bytecode, so setup.sh's compileall has work."""
    co = tmp / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ["scripts", "src", *(["tests", "bench"] if tests else [])]:
        shutil.copytree(ROOT / d, co / d, ignore=ignore, symlinks=True)
    shutil.copy2(ROOT / "pyproject.toml", co / "pyproject.toml")
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(co / ".venv")], check=True)
    fill_venv(co / ".venv", co)
    return co


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_"))}
    env.pop("PYTHONPATH", None)  # the copy's own src/, through its .venv, as a user's checkout
    return env | {"COLUMNS": "100", **extra}


def _start(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a kill ends it and all it started
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"still running after {timeout} s:\n{out}")
    return out


def _venv_lock(co: Path) -> Path:
    """The lock file setup.sh takes for `co`'s .venv (its take_lock 9 line): one per checkout."""
    lock_dir = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
    digest = hashlib.sha256(str(co).encode()).hexdigest()[:16]
    return lock_dir / f"iomatrix-setup-venv-{digest}.lock"


def test_two_setups_at_once_in_one_checkout_wait_for_the_venvs_lock_and_both_succeed(
    tmp_path: Path,
) -> None:
    """The test holds the checkout's venv lock, as a setup making the .venv would, and starts two
    setups: each says it waits (naming the checkout's .venv), neither touches the .venv while the
    lock is held, and both finish once it is released, one after the other. Holding the lock here
    (rather than racing two setups and hoping one is still compiling when the other arrives) makes
    the wait certain on a loaded host."""
    _skip_unless_installed(fleet=False)
    co = make_checkout(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in (co / ".venv").rglob("*") if p.is_file()}
    logs = [tmp_path / f"setup-{i}.log" for i in range(2)]
    with _venv_lock(co).open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        procs = []
        for log in logs:
            with log.open("w") as out:
                procs.append(
                    subprocess.Popen(
                        [str(co / "scripts/setup.sh"), "--no-guest"],
                        cwd=co,
                        env=_env(tmp_path),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        text=True,
                        start_new_session=True,
                    )
                )
        try:
            deadline = time.monotonic() + 300  # apt's checks first: seconds, minutes when loaded
            while not all(WAITS in log.read_text() for log in logs):
                dead = [p for p in procs if p.poll() is not None]
                assert not dead, [log.read_text() for log in logs]
                assert time.monotonic() < deadline, [log.read_text() for log in logs]
                time.sleep(0.2)
            after_wait = {p: p.stat().st_mtime_ns for p in (co / ".venv").rglob("*") if p.is_file()}
            assert after_wait == before, "a setup touched the .venv while another held its lock"
        except BaseException:
            for p in procs:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            raise
        fcntl.flock(held, fcntl.LOCK_UN)
    for p, log in zip(procs, logs, strict=True):
        try:
            p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            pytest.fail(f"still running after 600 s:\n{log.read_text()}")
        out = log.read_text()
        assert p.returncode == 0, out
        assert out.rstrip().endswith("setup: done"), out
        assert "Python environment up to date" in out, out
        assert "installing" not in out, out  # neither apt-get nor pip ran
        assert f"({co}/.venv, lock " in out, out
    after = {p: p.stat().st_mtime_ns for p in (co / ".venv").rglob("*") if p.is_file()}
    assert after == before, "the .venv changed"


@pytest.mark.slow
def test_setup_beside_scripts_test_both_pass(tmp_path: Path) -> None:
    """scripts/test (its own setup.sh --fleet, ruff, then a subset of the tests) and setup.sh
    --fleet started together in one checkout, sharing ~/.cache/iomatrix's guest build as they do on
    a host."""
    _skip_unless_installed(fleet=True)
    co = make_checkout(tmp_path, tests=True)
    env = _env(tmp_path)
    subset = [
        "tests/test_guest_build_shared_cache.py",
        # (it reads the copy's setup.sh)
        "tests/test_protocol_packages.py::test_setup_sh_installs_every_protocols_packages_and_no_other",
        "-m",
        "not slow",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
    ]
    runner = _start([str(co / "scripts/test"), *subset], env, co)
    time.sleep(0.2)  # the test's setup.sh first, as a user starting both would
    setup = _start([str(co / "scripts/setup.sh"), "--fleet"], env, co)
    test_out, setup_out = _finish(runner), _finish(setup)
    assert setup.returncode == 0, setup_out
    assert setup_out.rstrip().endswith("setup: done"), setup_out
    assert runner.returncode == 0, test_out
    assert re.search(r"\d+ passed", test_out) and " failed" not in test_out, test_out
    for out in (test_out, setup_out):
        assert "installing" not in out, out
        assert "Traceback" not in out, out


def _python3_wrapper(bin_dir: Path, checkout: Path, hang: bool) -> None:
    """A `python3` first on setup.sh's PATH: the interpreter itself for everything but
    `-m venv DIR`, which it makes cheaply (fill_venv); with `hang`, it makes the half of a venv a
    killed `python -m venv` leaves (a python, no pip, no stamps), says so in DIR/../made-half and
    waits to be killed."""
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "python3"
    fill = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
        "from pathlib import Path; from tests.test_setup_side_by_side import fill_venv; "
        f"fill_venv(Path(sys.argv[1]), Path({str(checkout)!r}))"
    )
    then = (
        f'touch "{checkout}/made-half"; sleep 600'
        if hang
        else f'{sys.executable} -c {_sh_quote(fill)} "$3"'
    )
    wrapper.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f'    {BASE_PYTHON} -m venv --without-pip "${{@:3}}" || exit\n'
        f"    {then}\n"
        "    exit\n"
        "fi\n"
        f'exec {BASE_PYTHON} "$@"\n'
    )
    wrapper.chmod(0o755)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_a_setup_killed_while_making_the_venv_leaves_none_and_the_next_run_makes_it(
    tmp_path: Path,
) -> None:
    """Before the venv was staged, the half venv a kill left (a python without pip) had the next
    setup.sh skip making one and fail at `python -m pip`, every time after."""
    _skip_unless_installed(fleet=False)
    co = make_checkout(tmp_path)
    shutil.rmtree(co / ".venv")
    bin_dir = tmp_path / "bin"
    _python3_wrapper(bin_dir, co, hang=True)
    env = _env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}")
    setup = _start([str(co / "scripts/setup.sh"), "--no-guest"], env, co)
    deadline = time.monotonic() + 120
    while not (co / "made-half").exists() and setup.poll() is None:
        assert time.monotonic() < deadline, "setup.sh never reached its venv step"
        time.sleep(0.05)
    os.killpg(setup.pid, signal.SIGKILL)
    out = _finish(setup)
    assert "setup: creating .venv" in out, out
    # the half venv is not where the next run would take it for one
    assert not (co / ".venv").exists(), sorted(p.name for p in co.iterdir())

    _python3_wrapper(bin_dir, co, hang=False)
    again = _start([str(co / "scripts/setup.sh"), "--no-guest"], env, co)
    out = _finish(again)
    assert again.returncode == 0, out
    assert "setup: creating .venv" in out and "Python environment up to date" in out, out
    venv = co / ".venv"
    assert (venv / "pyvenv.cfg").is_file() and not venv.is_symlink()
    check = [str(venv / "bin/python"), "-c", "import iomatrix, pip; print(iomatrix.__file__)"]
    imported = subprocess.run(check, capture_output=True, text=True, env=_env(tmp_path))
    assert imported.stdout.strip() == str(co / "src/iomatrix/__init__.py"), imported
    # nothing of the killed run's staging is left, and no path in the venv names it
    assert sorted(p.name for p in co.iterdir() if p.name.startswith(".venv")) == [".venv"]
    for f in [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]:
        if f.is_file() and not f.is_symlink():
            assert ".venv.new" not in f.read_text(errors="replace"), f
