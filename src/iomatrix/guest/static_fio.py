"""A static fio for the initramfs, built once from Debian's source package of the host's fio
version.

A static fio keeps the initramfs at a few MB instead of ~35 MB for the host binary's library
closure, which saves about a second of boot under TCG. The build uses a private deb-src list (the
host's apt configuration is not touched) and is cached in `fio-static/`; a failed build is
remembered so it is not retried on every run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from iomatrix.guest.cache import entry_lock
from iomatrix.hostcmd import require

# The configure flags both fio builds share (this static one for the guest, and the host build of
# iomatrix.fio.host_build): --disable-native, since the binary runs on CPUs other than the
# builder's; every engine with a library a sweep never uses off (numa too: no plan or allowed job
# option binds fio to NUMA nodes).
CONFIGURE_DISABLED = [
    "--disable-native",
    "--disable-numa",
    "--disable-rdma",
    "--disable-rados",
    "--disable-rbd",
    "--disable-http",
    "--disable-gfapi",
    "--disable-libnfs",
    "--disable-pmem",
    "--disable-xnvme",
    "--disable-libzbc",
    "--disable-tcmalloc",
    "--disable-dfs",
]
FIO_CONFIGURE = ["--build-static", *CONFIGURE_DISABLED]
STATIC_FIO_PACKAGES = "build-essential dpkg-dev libaio-dev zlib1g-dev"
# fio's job coordinator (backend.c, run_threads) sleeps a fixed 100 ms before it looks whether a job
# group has started, and again while a `stonewall` group waits for the one before it: ~0.1 s of
# every run, ~0.25 s of a read run with its prefill, spent idle. Under TCG that is a fifth of a
# guest run's overhead. The guest's fio polls every 10 ms there instead, the interval fio itself
# uses while jobs run; nothing a job measures changes (its runtime and latencies are timed by the
# job itself). Recorded in the artifacts' `fio_source`.
START_POLL_FROM, START_POLL_TO = "do_usleep(100000);", "do_usleep(10000);"
START_POLL_SITES = 2  # fio 3.x: the wait for a group's start, the wait between groups
START_POLL_SUFFIX = "-poll10ms"
UNPATCHED_SUFFIX = "-unpatched"
START_POLL_NOTE = "job start-up polled every 10 ms instead of 100 ms"
UNPATCHED_NOTE = "unpatched: its backend.c does not have the two start-up sleeps iomatrix shortens"


def _debian_mirror() -> tuple[str, str]:
    """(mirror URI, suite) of the host's Debian main archive, for a private deb-src list."""
    uri, suite = "http://deb.debian.org/debian", "bookworm"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                suite = line.split("=", 1)[1].strip('"') or suite
    except OSError:
        pass
    for src in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = src.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
            r"^deb\s+(\S+/debian)\s", text, re.M
        )
        if m:
            uri = m.group(1)
            break
    return uri, suite


def host_fio_package_version() -> str | None:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "fio"], capture_output=True, text=True
    )
    return out.stdout.strip() or None if out.returncode == 0 else None


def static_fio(
    cache_dir: Path, log: Callable[[str], None], build: bool = True
) -> tuple[Path | None, str]:
    """A static fio built from Debian's source package of the host's fio version (cached).

    Returns (path, why). A static fio keeps the initramfs at a few MB instead of ~35 MB for the
    host binary's library closure, which saves about a second of boot under TCG. When it cannot be
    built (no compiler, no libaio-dev, no source), returns (None, reason) and the closure is used.
    """
    version = host_fio_package_version()
    if version is None:
        return None, "host fio is not a Debian package: using its library closure"
    root = cache_dir / "fio-static"
    binary = root / f"fio_{version}{START_POLL_SUFFIX}"
    failed = root / f"failed_{version}.txt"
    # (A plain fio_<version> is an older iomatrix's unpatched build: rebuilt, not used.)
    for cached, note in (
        (binary, START_POLL_NOTE),
        (root / f"fio_{version}{UNPATCHED_SUFFIX}", UNPATCHED_NOTE),
    ):
        if cached.is_file():
            return cached, f"static fio built from Debian source fio {version} ({note})"
    if not build:
        return None, f"no static fio {version} cached"
    missing = [
        t for t in ("gcc", "make", "dpkg-source", "apt-get", "strip") if shutil.which(t) is None
    ]
    if not Path("/usr/lib/x86_64-linux-gnu/libaio.a").is_file():
        missing.append("libaio.a")
    if missing:
        return None, (
            f"static fio not built (missing {', '.join(missing)}; apt-get install "
            f"{STATIC_FIO_PACKAGES}): using the host fio's library closure"
        )
    if failed.is_file():  # do not retry a failed build on every run (rebuild=True clears this)
        return None, failed.read_text().strip()
    root.mkdir(parents=True, exist_ok=True)
    # One build per version at a time: a second builder waits and takes the first one's result.
    with entry_lock(binary, f"the static fio {version}", log):
        for cached, note in (
            (binary, START_POLL_NOTE),
            (root / f"fio_{version}{UNPATCHED_SUFFIX}", UNPATCHED_NOTE),
        ):
            if cached.is_file():
                return cached, f"static fio built from Debian source fio {version} ({note})"
        if failed.is_file():
            return None, failed.read_text().strip()
        path, why = _build_static_fio(root, binary, version, log)
        if path is None:
            failed.write_text(why + "\n")
        return path, why


def _build_static_fio(
    root: Path, binary: Path, version: str, log: Callable[[str], None]
) -> tuple[Path | None, str]:
    return build_from_debian_source(
        root,
        binary,
        version,
        log,
        configure=FIO_CONFIGURE,
        patch=True,
        what="static fio",
        fallback="using the host fio's closure",
    )


def build_from_debian_source(
    root: Path,
    binary: Path,
    version: str,
    log: Callable[[str], None],
    *,
    configure: list[str],
    patch: bool,
    what: str,
    fallback: str,
    check: Callable[[Path], str | None] | None = None,
) -> tuple[Path | None, str]:
    """Build fio `version` from Debian's source package with `configure` into `binary` (the guest's
    static fio, the fleet hosts' fio). `patch`: shorten the start-up sleeps (patch_start_poll;
    `binary` gets the unpatched suffix when the source is not the one read). `check(built)`: None,
    or why the build is unfit. Returns (path, why), or (None, why the build failed + `fallback`)."""
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    start = time.monotonic()
    try:
        uri, suite = _debian_mirror()
        (work / "src.list").write_text(f"deb-src {uri} {suite} main\n")
        (work / "lists" / "partial").mkdir(parents=True)
        apt = [
            "apt-get",
            "-q",
            f"-oDir::Etc::SourceList={work / 'src.list'}",
            "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={work / 'lists'}",
        ]
        log(f"building {what} from Debian's source package of fio {version} (once, ~1 min)")
        steps = [
            ([*apt, "update"], work),
            ([*apt, "source", "--download-only", f"fio={version}"], work),
        ]
        for argv, cwd in steps:
            res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["no output"])[-1]
                return None, f"{what} not built ({argv[-2]} {argv[-1]}: {last}): {fallback}"
        dsc = next(iter(sorted(work.glob("fio_*.dsc"))), None)
        if dsc is None:
            return None, f"{what} not built (no fio source downloaded): {fallback}"
        src = work / "src"
        res = subprocess.run(
            ["dpkg-source", "-x", str(dsc), str(src)], cwd=work, capture_output=True, text=True
        )
        if res.returncode != 0:
            last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
            return None, f"{what} not built (dpkg-source: {last}): {fallback}"
        note = START_POLL_NOTE if patch else "unpatched, as Debian builds it"
        if patch and not patch_start_poll(src / "backend.c"):
            # Not the code we read: fio as it is (still a second of boot less than the host
            # closure).
            binary, note = root / f"fio_{version}{UNPATCHED_SUFFIX}", UNPATCHED_NOTE
        for argv, cwd in (
            (["./configure", *configure], src),
            (["make", f"-j{os.cpu_count() or 2}", "fio"], src),
            (["strip", "-o", str(work / "fio"), "fio"], src),
        ):
            res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
            if res.returncode != 0:
                last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
                return None, f"{what} not built ({argv[0]}: {last}): {fallback}"
        ver = subprocess.run(
            [str(work / "fio"), "--version"], capture_output=True, text=True
        ).stdout.strip()
        if not ver.startswith("fio-"):
            return None, f"{what} not built (the result does not run): {fallback}"
        unfit = check(work / "fio") if check else None
        if unfit:
            return None, f"{what} not built ({unfit}): {fallback}"
        (work / "fio").rename(binary)
        log(f"{what} {ver} built in {time.monotonic() - start:.0f} s")
        return binary, f"{what} built from Debian source fio {version} ({note})"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def static_kind(binary: Path) -> str:
    """The initramfs cache key's word for a static fio: which build it is (patched or not), so an
    initramfs never carries another build of the same version."""
    return "static" + next(
        (sfx for sfx in (START_POLL_SUFFIX, UNPATCHED_SUFFIX) if binary.name.endswith(sfx)), ""
    )


def patch_start_poll(backend_c: Path) -> bool:
    """Shorten fio's start-up sleeps (START_POLL_FROM → START_POLL_TO) in `backend_c`; False, and
    the file untouched, unless it has exactly the START_POLL_SITES expected (another fio version:
    change nothing we have not read)."""
    text = backend_c.read_text()
    if text.count(START_POLL_FROM) != START_POLL_SITES:
        return False
    backend_c.write_text(text.replace(START_POLL_FROM, START_POLL_TO))
    return True


def host_fio_version() -> str:
    """The host fio's `--version` (e.g. 'fio-3.33'); raises MissingTool without fio."""
    out = subprocess.run([require("fio"), "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip() or "unknown"
