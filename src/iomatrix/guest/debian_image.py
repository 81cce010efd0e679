"""A Debian 12 guest image built here with mmdebstrap, from Debian packages only, cached under the
cache root.

`ensure_debian_image()` returns a `DebianImage`: a qcow2 holding an ext4 root filesystem (no
partition table, no boot loader), the kernel and initramfs taken out of that same root (QEMU boots
them directly, as the built-in guest tier does: no firmware menu or GRUB under TCG), and what was
built: the qcow2's sha256, the distribution, the kernel version and the package list (`image.json`
beside the qcow2).

What goes in (`PACKAGES` on `--variant=minbase`): systemd as init with udev, Debian's cloud kernel,
the QEMU guest agent (every command and result travels through it: `guest.agent`), fio, and
e2fsprogs for a guest filesystem. No cloud-init: its Python start-up costs minutes under TCG and the
guest needs only a hostname and one script, so a NoCloud seed (a filesystem labelled cidata) is read
by a small unit of ours (`debian/iomatrix-seed*`), started by udev when such a filesystem appears.
The initramfs carries only the virtio and SCSI modules (`debian/ initramfs-hook`, MODULES=list).
Units that only cost boot time in a throw-away guest are masked (`MASKED_UNITS`).

Cache layout (root: `cache_root()/guest/images`)::

    debian-12-<key>/   image.qcow2, vmlinuz, initrd.img, image.json
    logs/debian-12-<key>.log   mmdebstrap's and the image tools' output of the last build of that key

`<key>` hashes every input: the suite, the package list, mmdebstrap's options, our files and the
masked units, the image size and the builder's format version. So the image is rebuilt only when one
of them changes (or on `rebuild=True`); the package versions the mirror served are recorded, not
keyed (a point release does not invalidate the cache by itself).

The build needs root (mmdebstrap --mode=root chroots, and the tree it makes is owned by root) and
writes only under the cache root: the staging directory beside the published one, TMPDIR inside it,
the log under logs/."""  # noqa: E501

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from iomatrix.errors import UserError
from iomatrix.guest.cache import default_cache_dir, entry_lock
from iomatrix.guest.realboot import BootImage
from iomatrix.hostcmd import require
from iomatrix.mountinfo import parse_mountinfo

SUITE = "bookworm"
# Bump when the build changes in a way the inputs below do not capture.
BUILD_FORMAT = 1
PACKAGES = (
    "systemd-sysv",
    "udev",
    "linux-image-cloud-amd64",
    "initramfs-tools",
    "qemu-guest-agent",
    "fio",
    "e2fsprogs",
)
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--mode=root",
    "--format=directory",
    # No manuals or translations in a guest nobody logs into (a third of minbase's files);
    # copyrights stay.
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
)
# Units that cost boot time and do nothing for a guest that lives one run: timers that would fire in
# it, the first-boot prompt (it would wait for a keyboard on the serial console), a getty on a
# screen that does not exist.
MASKED_UNITS = (
    "systemd-firstboot.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "dpkg-db-backup.timer",
    "getty@tty1.service",
)
IMAGE_SIZE_MIB = 2048  # the root filesystem's size; the qcow2 holds only what is written
ROOT_LABEL = "iomxroot"
HOSTNAME = "iomatrix-guest"
# Free space the build needs under the cache root: the tree (~0.6 GB), the raw filesystem's written
# blocks and the qcow2 (each about as much), with room to spare.
NEEDED_FREE_BYTES = 3 << 30
# Our files in the image: package data name -> (path in the image, mode).
OUR_FILES = {
    "initramfs-hook": ("etc/initramfs-tools/hooks/iomatrix", 0o755),
    "initramfs.conf": ("etc/initramfs-tools/conf.d/iomatrix.conf", 0o644),
    "iomatrix-seed@.service": ("etc/systemd/system/iomatrix-seed@.service", 0o644),
    "90-iomatrix-seed.rules": ("etc/udev/rules.d/90-iomatrix-seed.rules", 0o644),
    "iomatrix-seed": ("usr/local/sbin/iomatrix-seed", 0o755),
}
BUILD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DebianImage:
    """A built guest image: boot `kernel` + `initrd` with `cmdline`, root on `qcow2` (never written:
    each boot gets an overlay)."""

    qcow2: Path
    kernel: Path
    initrd: Path
    kernel_version: str
    sha256: str
    distribution: str
    cache_key: str
    # "name version", dpkg's list
    packages: tuple[str, ...] = field(default=(), hash=False, compare=False)
    build_seconds: float = 0.0
    cmdline: str = ""

    def boot_image(self) -> BootImage:
        return BootImage(
            self.qcow2, "qcow2", self.kernel, self.initrd, self.cmdline or kernel_cmdline()
        )

    def as_metadata(self) -> dict:
        """What a result records about its guest (the package list stays in image.json: it is
        long)."""
        return {
            "image": str(self.qcow2),
            "image_sha256": self.sha256,
            "distribution": self.distribution,
            "kernel_version": self.kernel_version,
            "cache_key": self.cache_key,
            "packages": len(self.packages),
        }


# --------------------------------------------------------------------------- inputs and key


def our_files() -> dict[str, bytes]:
    """Our files for the image, by package data name."""
    base = resources.files("iomatrix.guest").joinpath("debian")
    return {name: base.joinpath(name).read_bytes() for name in sorted(OUR_FILES)}


def build_inputs() -> dict:
    """Everything the image is made from, as recorded in image.json and hashed into its key."""
    return {
        "suite": SUITE,
        "packages": list(PACKAGES),
        "mmdebstrap_options": list(MMDEBSTRAP_OPTIONS),
        "masked_units": list(MASKED_UNITS),
        "image_size_mib": IMAGE_SIZE_MIB,
        "root_label": ROOT_LABEL,
        "hostname": HOSTNAME,
        "build_format": BUILD_FORMAT,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in our_files().items()},
    }


def cache_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def images_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()).expanduser() / "images"


def image_dir(key: str, cache_dir: Path | None = None) -> Path:
    return images_dir(cache_dir) / f"debian-12-{key}"


def kernel_cmdline(root: str = "/dev/vda") -> str:
    """The Debian guest's kernel command line: root on the first virtio disk, the console on ttyS0
    (kept in the run's console.log), a panic powers the guest off (QEMU runs with -no-reboot), and
    the same TCG-friendly switches as the built-in guest (no mitigations, no timer check, the TSC
    trusted). getty-static (gettys on tty2-6 when logind is absent) is masked: it waited a minute
    for the consoles under TCG."""
    return (
        f"root={root} rw console=ttyS0 loglevel=4 panic=-1 mitigations=off tsc=reliable "
        "no_timer_check "
        "random.trust_cpu=on i8042.noaux i8042.nopnp systemd.mask=getty-static.service"
    )


# --------------------------------------------------------------------------- the build's commands
# (pure)


def host_sources(apt_dir: Path = Path("/etc/apt")) -> list[Path]:
    """The host's apt source files: the packages come from the mirror this host is configured with,
    and the image's apt points there too."""
    files = [apt_dir / "sources.list"] if (apt_dir / "sources.list").is_file() else []
    d = apt_dir / "sources.list.d"
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".list", ".sources") and p.is_file())
    return [p for p in files if p.read_text(errors="replace").strip()]


_SUITE_RE = re.compile(rf"^{SUITE}(-updates|-security)?$")


def _deb822_entries(text: str) -> list[str]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if (
            "deb" not in fields.get("types", "").split()
            or fields.get("enabled", "yes").lower() == "no"
        ):
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                if _SUITE_RE.match(suite):
                    entries.append(f"deb {uri} {suite} {fields.get('components', 'main')}")
    return entries


def _one_line_entries(text: str) -> list[str]:
    entries = []
    for line in text.splitlines():
        line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()  # type: ignore[assignment]
        if len(line) >= 4 and line[0] == "deb" and _SUITE_RE.match(line[2]):
            entries.append(" ".join(line))
    return entries


def debian_entries(files: list[Path]) -> list[str]:
    """The host's Debian bookworm sources as one-line entries ("deb URI SUITE COMPONENTS", options
    dropped: mmdebstrap adds the archive's signed-by itself): the mirror this host uses, and nothing
    from another archive (a vendor's repository the host also names stays out of the image)."""
    entries: list[str] = []
    for p in files:
        text = p.read_text(errors="replace")
        for e in _deb822_entries(text) if p.suffix == ".sources" else _one_line_entries(text):
            if e not in entries:
                entries.append(e)
    if not entries:
        where = ", ".join(map(str, files)) or "/etc/apt/sources.list, /etc/apt/sources.list.d/"
        raise UserError(
            f"the host's apt sources name no Debian {SUITE} entry ({where})",
            hint=f"add a Debian {SUITE} mirror to /etc/apt/sources.list.d/",
        )
    return entries


def mmdebstrap_argv(rootfs: Path, overlay: Path, entries: list[str]) -> list[str]:
    """mmdebstrap's command line: minbase plus PACKAGES into `rootfs` from the `entries`
    (debian_entries), our files copied in before any package is installed (so the kernel's initramfs
    is made with our hook: one initramfs build, not two)."""
    return [
        "mmdebstrap",
        *MMDEBSTRAP_OPTIONS,
        f"--include={','.join(PACKAGES)}",
        f'--setup-hook=cp -a {shlex.quote(str(overlay))}/. "$1"/',
        SUITE,
        str(rootfs),
        *entries,
    ]


def write_overlay(overlay: Path) -> None:
    """Our files as a tree laid over the image's root before any package is installed (owned by
    root, as the build runs)."""
    for name, data in our_files().items():
        rel, mode = OUR_FILES[name]
        dest = overlay / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(mode)


def finish_rootfs(rootfs: Path) -> None:
    """After the packages: the unit masks (made now, not before: a package's postinst may unmask or
    enable its units), the hostname, the root filesystem in fstab (by label: the root is the first
    disk, but a label does not depend on it)."""
    units = rootfs / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in MASKED_UNITS:
        (units / unit).unlink(missing_ok=True)
        (units / unit).symlink_to("/dev/null")
    (rootfs / "etc/hostname").write_text(HOSTNAME + "\n")
    (rootfs / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n")
    # no fsck: a fresh overlay
    (rootfs / "etc/fstab").write_text(f"LABEL={ROOT_LABEL} / ext4 rw,noatime 0 0\n")


def boot_files(rootfs: Path) -> tuple[Path, Path, str]:
    """(vmlinuz, initrd, kernel version) of the one kernel in the tree."""
    kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise UserError(
            f"the built tree has {len(kernels)} kernels in /boot, expected one",
            hint="rebuild with `iomatrix guest build debian --rebuild`",
        )
    version = kernels[0].name[len("vmlinuz-") :]
    initrd = rootfs / "boot" / f"initrd.img-{version}"
    if not initrd.is_file():
        raise UserError(
            f"the built tree has no /boot/initrd.img-{version} (initramfs-tools did not run)",
            hint="rebuild with `iomatrix guest build debian --rebuild` and read the build log",
        )
    return kernels[0], initrd, version


def package_list(rootfs: Path) -> list[str]:
    """'name version' of every installed package (dpkg's database in the tree, read from the
    host)."""
    out = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={rootfs}/var/lib/dpkg",
            "-W",
            "-f",
            "${db:Status-Abbrev} ${Package} ${Version}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(" ".join(line.split()[1:3]) for line in out.splitlines() if line.startswith("ii"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- errors


def failure_line(log_text: str) -> str:
    """The line of a build log that says what went wrong: the last 'E:'/'error' line, else the last
    line."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if (
            ln.startswith(("E:", "mmdebstrap: error"))
            or " error" in ln.lower()
            or ln.lower().startswith("error")
        ):
            return ln
    return lines[-1] if lines else "no output"


def is_out_of_space(log_text: str) -> bool:
    return "No space left on device" in log_text or "ENOSPC" in log_text


def check_preconditions(where: Path, euid: int | None = None) -> None:
    """Root, mmdebstrap and room: each refused with one line before anything is written."""
    if shutil.which("mmdebstrap") is None:
        raise UserError(
            "mmdebstrap is not installed (it builds the Debian guest image)",
            hint="run scripts/setup.sh --real-guest, or apt-get install mmdebstrap",
        )
    for program in ("qemu-img", "mke2fs", "dpkg-query"):
        require(program)
    if (os.geteuid() if euid is None else euid) != 0:
        raise UserError(
            "building the Debian guest image needs root (mmdebstrap --mode=root, a "
            "root-owned tree)",
            hint="run it as root, e.g. sudo iomatrix guest build debian",
        )
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < NEEDED_FREE_BYTES:
        raise UserError(
            f"no space for the Debian guest image: {free / 2**30:.1f} GiB free under {probe}, "
            f"the build needs {NEEDED_FREE_BYTES / 2**30:.0f} GiB",
            hint="free space there, or point IOMATRIX_CACHE at a larger filesystem",
        )


# --------------------------------------------------------------------------- cache


def load_image(directory: Path) -> DebianImage | None:
    """The published image in `directory`, or None if there is none (or it is incomplete)."""
    try:
        meta = json.loads((directory / "image.json").read_text())
    except (OSError, ValueError):
        return None
    files = [directory / n for n in ("image.qcow2", "vmlinuz", "initrd.img")]
    if not all(p.is_file() for p in files):
        return None
    return DebianImage(
        qcow2=files[0],
        kernel=files[1],
        initrd=files[2],
        kernel_version=meta["kernel_version"],
        sha256=meta["sha256"],
        distribution=meta["distribution"],
        cache_key=meta["cache_key"],
        packages=tuple(meta.get("packages", ())),
        build_seconds=meta.get("build_seconds", 0.0),
        # a boot-time choice: this release's, not the build's
        cmdline=kernel_cmdline(),
    )


def cached_image(cache_dir: Path | None = None) -> DebianImage | None:
    """The image the current inputs make, if it is built (nothing is built or downloaded)."""
    return load_image(image_dir(cache_key(build_inputs()), cache_dir))


def _mounts_under(path: Path) -> list[str]:
    real = os.path.realpath(path).rstrip("/") + "/"
    return sorted(
        (m["mountpoint"] for m in parse_mountinfo() if m["mountpoint"].startswith(real)),
        key=len,
        reverse=True,
    )


def remove_tree(path: Path) -> None:
    """Remove a build's staging tree, but never through a mount left inside it (mmdebstrap mounts
    /proc, /sys and /dev into the chroot and unmounts them when it ends; a killed build may leave
    them): such mounts are unmounted first, and a tree that still has one is left in place with its
    name in the error."""
    for mp in _mounts_under(path):
        subprocess.run(["umount", "--lazy", mp], capture_output=True)
    left = _mounts_under(path)
    if left:
        raise UserError(
            f"cannot remove the staging tree {path}: {left[0]} is still mounted",
            hint=f"umount -R {left[0]}, then remove {path}",
        )
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _staging(dest: Path) -> Iterator[Path]:
    """A scratch directory beside `dest`, renamed to `dest` when the block completes, else
    removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".staging-{dest.name}-{os.getpid()}"
    if tmp.exists():
        remove_tree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        if dest.exists():
            remove_tree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            remove_tree(tmp)


def _run_logged(argv: list[str], log: Path, env: dict[str, str], what: str) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            rc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=BUILD_TIMEOUT_S,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    if rc != 0:
        text = log.read_text(errors="replace")[-20000:]
        if is_out_of_space(text):
            raise UserError(
                f"no space left while building the Debian guest image ({what}); log: {log}",
                hint="free space under the cache root, or point IOMATRIX_CACHE at a larger "
                "filesystem",
            )
        status = "timed out" if rc == -1 else f"exit {rc}"
        raise UserError(
            f"building the Debian guest image failed: {what} ({status}): {failure_line(text)}",
            hint=f"full log: {log}",
        )


def _build(stage: Path, log: Path, inputs: dict, key: str, say: Callable[[str], None]) -> None:
    """mmdebstrap the tree, then the image and its boot files, all inside `stage`."""
    entries = debian_entries(host_sources())
    env = dict(os.environ, TMPDIR=str(stage / "tmp"), LC_ALL="C.UTF-8")
    (stage / "tmp").mkdir()
    overlay, rootfs = stage / "overlay", stage / "rootfs"
    write_overlay(overlay)
    say(f"mmdebstrap: Debian {SUITE} minbase with {', '.join(PACKAGES)} (log: {log})")
    _run_logged(mmdebstrap_argv(rootfs, overlay, entries), log, env, "mmdebstrap")
    finish_rootfs(rootfs)
    vmlinuz, initrd, version = boot_files(rootfs)
    shutil.copy2(vmlinuz, stage / "vmlinuz")
    shutil.copy2(initrd, stage / "initrd.img")
    packages = package_list(rootfs)
    debian_version = (rootfs / "etc/debian_version").read_text().strip()
    say(f"ext4 root filesystem ({IMAGE_SIZE_MIB} MiB) and qcow2")
    raw = stage / "root.raw"
    _run_logged(
        [
            "mke2fs",
            "-q",
            "-F",
            "-t",
            "ext4",
            "-L",
            ROOT_LABEL,
            "-d",
            str(rootfs),
            str(raw),
            f"{IMAGE_SIZE_MIB}M",
        ],
        log,
        env,
        "mke2fs",
    )
    remove_tree(rootfs)
    _run_logged(
        ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(stage / "image.qcow2")],
        log,
        env,
        "qemu-img convert",
    )
    raw.unlink()
    shutil.rmtree(overlay)
    shutil.rmtree(stage / "tmp", ignore_errors=True)
    meta = {
        "distribution": f"Debian {debian_version} ({SUITE})",
        "debian_version": debian_version,
        "kernel_version": version,
        "sha256": sha256_of(stage / "image.qcow2"),
        "bytes": (stage / "image.qcow2").stat().st_size,
        "cache_key": key,
        "cmdline": kernel_cmdline(),
        "inputs": inputs,
        "packages": packages,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (stage / "image.json").write_text(json.dumps(meta, indent=2) + "\n")


def ensure_debian_image(
    cache_dir: Path | None = None, rebuild: bool = False, log: Callable[[str], None] | None = None
) -> DebianImage:
    """The Debian guest image for the current inputs: the cached one, else built now (minutes: the
    packages are downloaded from the host's mirror)."""
    say = log or (lambda _m: None)
    inputs = build_inputs()
    key = cache_key(inputs)
    dest = image_dir(key, cache_dir)
    if not rebuild and (img := load_image(dest)) is not None:
        return img
    check_preconditions(dest.parent)
    logs = images_dir(cache_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # a second builder waits for the first (saying so), then takes its image
    with entry_lock(dest, "the Debian guest image", say):
        # built by another process meanwhile
        if not rebuild and (img := load_image(dest)) is not None:
            return img
        build_log = logs / f"debian-12-{key}.log"
        build_log.write_text(f"iomatrix guest build debian, key {key}\n")
        t0 = time.monotonic()
        with _staging(dest) as stage:
            _build(stage, build_log, inputs, key, say)
            meta = json.loads((stage / "image.json").read_text())
            meta["build_seconds"] = round(time.monotonic() - t0, 1)
            (stage / "image.json").write_text(json.dumps(meta, indent=2) + "\n")
    img = load_image(dest)
    assert img is not None
    return img
