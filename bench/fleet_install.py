"""What a fleet host's install costs, measuring-only against full (not a test): size on disk and
time.

    python bench/fleet_install.py [--profiles measure,full] [--rev HEAD] [--target-fraction 0.25]

For each install profile of the iomatrix.fleet role (`iomatrix_install_profile`): a fresh minimal
Debian 12 (`debootstrap --variant=minbase bookworm`, not timed, as bench/quickstart.py
--fresh-debian makes it), then the role's own installer (roles/sweep/files/install.sh) run in a
chroot exactly as the role runs it on a host: `install.sh /opt/iomatrix SOURCE.tar.gz ''
--measure-only --fio-binary=/opt/iomatrix/.fio` for `measure` (scripts/setup.sh --measure-only:
QEMU's storage daemon and qemu-img, the Python dependencies without matplotlib, and the fio the role
copies: built once here as the playbook builds it on the controller, `python -m
iomatrix.fio.host_build`, its build time printed apart: once per fleet, not per host; `--fio debian`
installs Debian's fio package instead, the role's `iomatrix_fio: debian`) and without the options
for `full` (scripts/setup.sh: test tools, Chromium, build tools, the guest kernel and static fio).
The source is `git archive REV` of this repository, as the playbook makes it.

Printed per profile: the install's wall time, and the size it added to the fresh system (du of the
chroot after minus before, apt's downloaded .deb files and pip's cache left out: caches, not the
install). Exit status 0 when the measuring install is within `--target-fraction` (default a quarter)
of the full one in both size and time."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same fresh machine as its bench
from quickstart import make_fresh_debian, unmount_fresh_debian

HERE = Path(__file__).resolve().parent.parent
INSTALLER = (
    HERE / "ansible/collections/ansible_collections/iomatrix/fleet/roles/sweep/files/install.sh"
)
CACHES = ("var/cache/apt/archives", "root/.cache/pip", "var/lib/apt/lists")


def size_mb(root: Path) -> float:
    """MB on disk under `root` (one filesystem: the bound /proc, /sys, /dev not counted), caches
    left out."""
    out = subprocess.run(
        ["du", "-sxm", *(f"--exclude={root / c}" for c in CACHES), str(root)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.split()[0])


def controller_fio() -> Path:
    """The fio the playbook builds on the controller (cached; built now if it is not), its build
    time printed."""
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "iomatrix.fio.host_build"],
        capture_output=True,
        text=True,
        check=True,
    )
    built = json.loads(done.stdout)
    print(
        f"controller: {built['why']} ({time.monotonic() - t0:.0f} s; once per fleet, not per host)",
        flush=True,
    )
    if not built["path"]:
        raise SystemExit("fleet install bench: no fio for the hosts (see above); or --fio debian")
    return Path(built["path"])


def install(profile: str, tarball: Path, fio: Path | None) -> tuple[float, float, int]:
    """(seconds, MB added, exit status) of the role's install of `profile` on a fresh Debian 12;
    `fio`: the controller's fio a measuring install is given (None: Debian's fio package)."""
    with tempfile.TemporaryDirectory(prefix="iomatrix-fleet-install-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        try:
            make_fresh_debian(root)
            before = size_mb(root)
            project = root / "opt/iomatrix"
            project.mkdir(parents=True)
            shutil.copy(tarball, project / ".source.tar.gz")
            shutil.copy(INSTALLER, project / ".install.sh")
            option = ["--measure-only"] if profile == "measure" else []
            if profile == "measure" and fio is not None:
                shutil.copy(fio, project / ".fio")  # the role's copy task
                option.append("--fio-binary=/opt/iomatrix/.fio")
            env = {
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": "/root",
                "DEBIAN_FRONTEND": "noninteractive",
                "LANG": "C.UTF-8",
            }
            t0 = time.monotonic()
            # install.sh takes its lock with flock (util-linux) and unpacks with tar and gzip: all
            # in minbase.
            proc = subprocess.Popen(
                [
                    "chroot",
                    str(root),
                    "/bin/sh",
                    "/opt/iomatrix/.install.sh",
                    "/opt/iomatrix",
                    "/opt/iomatrix/.source.tar.gz",
                    "",
                    *option,
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            steps = []  # when each step setup.sh announces began: where the time goes
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(("setup: ", "iomatrix-install: ")) and not line.startswith(
                    "setup: done"
                ):
                    steps.append(f"{time.monotonic() - t0:5.1f} s  {line.strip()[:90]}")
            stderr = proc.stderr.read() if proc.stderr else ""
            done = subprocess.CompletedProcess(proc.args, proc.wait(), "", stderr)
            took = time.monotonic() - t0
            print(
                f"{profile}: steps (seconds from the start):\n  " + "\n  ".join(steps), flush=True
            )
            if done.returncode != 0:
                print(
                    f"{profile}: install failed ({done.returncode}): {done.stderr.strip()[-600:]}"
                )
            elif profile == "measure":
                debian_fio = subprocess.run(
                    ["chroot", str(root), "dpkg-query", "-W", "-f=${Status}", "fio"],
                    capture_output=True,
                    text=True,
                ).stdout
                copied = (project / ".venv/bin/fio").is_file()
                print(
                    "measure: fio "
                    f"{'copied from the controller (.venv/bin/fio)' if copied else 'not copied'}"
                    ", "
                    "Debian's fio package "
                    f"{'installed' if 'ok installed' in debian_fio else 'not installed'}"
                )
                # What the first command on the host pays for the bytecode a --no-compile install
                # did not make: the modules a report imports (the CLI, the store, the statistics
                # with scipy.stats), twice.
                probe = [
                    "chroot",
                    str(root),
                    "/opt/iomatrix/.venv/bin/python",
                    "-c",
                    "import iomatrix.cli, iomatrix.report.query, iomatrix.stats.blocked, "
                    "iomatrix.stats.compare",
                ]
                firsts = []
                for _ in range(2):
                    t1 = time.monotonic()
                    subprocess.run(probe, env=env, check=True)
                    firsts.append(time.monotonic() - t1)
                print(
                    f"measure: importing what a report imports: {firsts[0]:.1f} s the "
                    "first time (writes its "
                    f".pyc files), {firsts[1]:.1f} s after",
                    flush=True,
                )
            return took, size_mb(root) - before, done.returncode
        finally:
            left = unmount_fresh_debian(root)
            if left:
                raise SystemExit(f"fleet install bench: still mounted, not removed: {left}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="measure,full")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--target-fraction", type=float, default=0.25)
    ap.add_argument(
        "--fio",
        choices=("controller", "debian"),
        default="controller",
        help="the measuring install's fio, as the role's iomatrix_fio (default: controller)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("fleet install bench: run as root (debootstrap, chroot)")
    with tempfile.TemporaryDirectory(prefix="iomatrix-fleet-src-") as tmp:
        tarball = Path(tmp) / "source.tar.gz"
        subprocess.run(
            ["git", "-C", str(HERE), "archive", "--format=tar.gz", "-o", str(tarball), args.rev],
            check=True,
        )
        results = {}
        fio = (
            controller_fio()
            if args.fio == "controller" and "measure" in args.profiles.split(",")
            else None
        )
        for profile in args.profiles.split(","):
            load = os.getloadavg()[0]
            took, added, status = install(profile, tarball, fio)
            results[profile] = (took, added, status)
            print(
                f"{profile}: {took:.0f} s, {added:.0f} MB added to a fresh Debian 12 "
                f"(exit {status}; "
                f"load {load:.1f} → {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    if {"measure", "full"} <= set(results) and all(r[2] == 0 for r in results.values()):
        (mt, ms, _), (ft, fs, _) = results["measure"], results["full"]
        print(
            f"measure / full: time {mt / ft:.2f}, size {ms / fs:.2f} (target ≤ "
            f"{args.target_fraction:.2f} each)"
        )
        return 0 if mt / ft <= args.target_fraction and ms / fs <= args.target_fraction else 1
    return 1


if __name__ == "__main__":
    sys.exit(main())
