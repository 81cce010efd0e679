"""fio for a fleet's measuring hosts: built once on the controller, copied to each host by the
Ansible role.

Debian's fio package links every engine it can build into its one binary (librbd and librados,
GlusterFS, RDMA, PMEM): 87 MB of libraries on a host whose sweeps use libaio, io_uring, psync and
nbd. This build is the same fio version from the same Debian source package as the controller's,
configured without those engines, unpatched (the start-up poll patch is the guest initramfs's only),
so a host measures with fio as Debian builds it. It links libaio, libnbd and zlib, which a host
installs with apt (scripts/setup.sh --fio-binary); the binary itself is a few MB.

The trade-off, said where the user chooses it (the role's `iomatrix_fio`, docs/fleet.md): apt does
not manage the copied binary, so the host gets no security update of fio from the distribution (fio
is a benchmark a sweep starts, not a service). `iomatrix_fio: debian` installs Debian's package
instead. A host whose libraries do not run this build (another distribution release) gets Debian's
package too, with the reason printed.

    python -m iomatrix.fio.host_build [--no-build]

prints one JSON object: {"path": PATH or null, "why": "..."}. The build is cached under the iomatrix
cache (`~/.cache/iomatrix/fio-host/`, or `$IOMATRIX_CACHE/fio-host/`); a failed build is remembered
(as the guest's static fio does) and not retried on every run."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.guest.cache import cache_root, entry_lock
from iomatrix.guest.static_fio import (
    CONFIGURE_DISABLED,
    build_from_debian_source,
    host_fio_package_version,
)

# --enable-libnbd: fio builds its nbd engine only when asked. Not --build-static: Debian ships
# libnbd as a shared library only. The rest as the guest's static fio (CONFIGURE_DISABLED).
HOST_CONFIGURE = ["--enable-libnbd", *CONFIGURE_DISABLED]
# What the controller needs to build it (the full install has all but pkgconf and libnbd-dev:
# setup.sh --fleet).
BUILD_PACKAGES = "build-essential dpkg-dev pkgconf libaio-dev libnbd-dev zlib1g-dev"
# The engines iomatrix runs: bare metal (libaio, io_uring, psync), the block layer's NBD client
# (nbd).
ENGINES = ("libaio", "io_uring", "psync", "nbd")
# The shared libraries it may need: the C library's (libc6; libmvec is its vector maths), and those
# of the Debian packages setup.sh --fio-binary installs on a host (libaio1, libnbd0, zlib1g).
RUNTIME_LIBRARIES = (
    "libc.so.6",
    "libm.so.6",
    "libmvec.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libaio.so.1",
    "libnbd.so.0",
    "libz.so.1",
    "ld-linux-x86-64.so.2",
)
CACHE_NAME = "fio-host"


def needed_libraries(binary: Path) -> list[str] | None:
    """The DT_NEEDED entries of an ELF binary (readelf, binutils), or None when they cannot be
    read."""
    res = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    return [
        line.rsplit("[", 1)[1].rstrip("]") for line in res.stdout.splitlines() if "(NEEDED)" in line
    ]


def unfit(binary: Path) -> str | None:
    """Why a built fio cannot serve a measuring host (an engine missing, a library a host would not
    have), or None."""
    res = subprocess.run([str(binary), "--enghelp"], capture_output=True, text=True, timeout=30)
    have = {line.strip() for line in res.stdout.splitlines()}
    missing = [e for e in ENGINES if e not in have]
    if missing:
        return f"without the {', '.join(missing)} engine{'s' if len(missing) > 1 else ''}"
    needed = needed_libraries(binary)
    if needed is None:
        return "readelf could not read it"
    extra = [lib for lib in needed if lib not in RUNTIME_LIBRARIES]
    if extra:
        return f"it links {', '.join(extra)}, which a measuring host does not install"
    return None


def host_fio(
    cache_dir: Path, log: Callable[[str], None], build: bool = True
) -> tuple[Path | None, str]:
    """(path, why) of the hosts' fio built from Debian's source of the controller's fio version
    (cached), or (None, why not: the hosts then install Debian's fio package)."""
    version = host_fio_package_version()
    fallback = "the hosts install Debian's fio package"
    if version is None:
        return None, f"the controller's fio is not a Debian package: {fallback}"
    root = cache_dir / CACHE_NAME
    binary = root / f"fio_{version}"
    failed = root / f"failed_{version}.txt"
    built = (
        f"fio for the hosts built from Debian source fio {version} (unpatched, as Debian builds it)"
    )
    if binary.is_file():
        return binary, built
    if not build:
        return None, f"no fio for the hosts cached (fio {version}): {fallback}"
    missing = [
        t
        for t in ("gcc", "make", "dpkg-source", "apt-get", "strip", "readelf", "pkg-config")
        if shutil.which(t) is None
    ]
    missing += [h for h in ("libaio.h", "libnbd.h") if not Path("/usr/include", h).is_file()]
    if missing:
        return None, (
            f"fio for the hosts not built (missing {', '.join(missing)}; apt-get install "
            f"{BUILD_PACKAGES}): {fallback}"
        )
    if failed.is_file():  # not retried on every run; removing the file retries
        return None, failed.read_text().strip()
    # One build at a time (two CI runs side by side: test_fleet_host_fio and a fleet demo's
    # playbook): a second builder waits, saying so, and takes the first one's result.
    try:
        with entry_lock(binary, f"the fio for the hosts {version}", log):
            if binary.is_file():  # built by the process we waited for
                return binary, built
            if failed.is_file():
                return None, failed.read_text().strip()
            path, why = build_from_debian_source(
                root,
                binary,
                version,
                log,
                configure=HOST_CONFIGURE,
                patch=False,
                what="fio for the hosts",
                fallback=fallback,
                check=unfit,
            )
            if path is None:
                failed.write_text(why + f" (remove {failed} to try again)\n")
            return path, why
    except UserError as err:  # the other build outlasted the wait, or the cache is not writable
        return None, f"fio for the hosts not built ({err.one_line()}): {fallback}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m iomatrix.fio.host_build", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--no-build", action="store_true", help="only a cached build (check mode: nothing is built)"
    )
    args = ap.parse_args(argv)
    path, why = host_fio(cache_root(), lambda m: print(m, file=sys.stderr), build=not args.no_build)
    print(json.dumps({"path": str(path) if path else None, "why": why}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
