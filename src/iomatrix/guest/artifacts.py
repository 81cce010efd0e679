"""Guest artifacts: a kernel and one initramfs, built once and cached.

The initramfs holds busybox, fio (the host's binary plus its shared-library closure), mkfs.ext4 and
mkfs.xfs (plus closures), the init script (`init.sh`, package data) and only the kernel modules a
guest run can need. Jobs reach the guest through fw_cfg (see `qemu.py`), so one initramfs serves
every run.

Cache layout (root: `cache_dir`, default `$IOMATRIX_CACHE/guest` or `~/.cache/iomatrix/guest`)::

    kernels/<package>_<version>/      unpacked Debian kernel package (+ the .deb)
    builds/<cache_key>/               vmlinuz, initramfs.cpio.<ext>, manifest.json
    accel.json                        accelerator probe results (accel.py)
    tarballs/                         filesystem-workload tarballs (tarball.py)

The cache key hashes the kernel version, the fio version, init.sh and the builder's format
version, so changing any of them builds a new initramfs.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from iomatrix.errors import MissingTool, UserError
from iomatrix.hostcmd import require

# Bump when the initramfs layout or the builder changes in a way init.sh's hash does not capture.
BUILD_FORMAT = 4
CLOUD_META_PACKAGE = "linux-image-cloud-amd64"

# Module roots the initramfs carries (their modules.dep closure is added). Names use '_' like lsmod.
MODULE_ROOTS = (
    "qemu_fw_cfg",
    "virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod",
    "ata_piix", "ahci", "nvme",
    "ext4", "xfs", "libcrc32c",
)
# What each bus / filesystem needs loaded in the guest (besides qemu_fw_cfg, which init loads itself).
BUS_MODULES = {
    "virtio-blk": ("virtio_pci", "virtio_blk"),
    "virtio-scsi": ("virtio_pci", "virtio_scsi", "sd_mod"),
    "ide": ("ata_piix", "sd_mod"),
    "sata": ("ahci", "sd_mod"),
    "nvme": ("nvme",),
}
FS_MODULES = {"ext4": ("ext4",), "xfs": ("libcrc32c", "xfs")}
# Host programs copied into the initramfs with their ldd closure: (host path candidates, guest path).
PROGRAMS = (
    (("/usr/bin/fio",), "usr/bin/fio"),
    (("/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"), "usr/sbin/mkfs.ext4"),
    (("/usr/sbin/mkfs.xfs", "/sbin/mkfs.xfs"), "usr/sbin/mkfs.xfs"),
)
PROGRAM_PACKAGES = {"fio": "fio", "mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs"}


@dataclass(frozen=True)
class GuestArtifacts:
    """A bootable guest: kernel + initramfs, and what they contain."""

    kernel: Path
    initramfs: Path
    kernel_version: str
    kernel_source: str  # where the kernel came from and why it was chosen
    fio_version: str
    modules: tuple[str, ...]  # module names carried in the initramfs (lsmod spelling)
    cache_key: str
    # module name -> ordered relative .ko paths to insmod (dependencies first); built-ins map to ().
    module_load: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    fio_source: str = ""  # static build or host closure, and why
    compression: str = "gzip"
    initramfs_bytes: int = 0
    build_seconds: float = 0.0

    def modules_for(self, names: Iterable[str]) -> list[str]:
        """Relative .ko paths to insmod, in dependency order, for the given module names."""
        out: list[str] = []
        for name in names:
            key = name.replace("-", "_")
            if key not in self.module_load:
                raise UserError(f"guest kernel {self.kernel_version} has no module '{name}'",
                                hint="rebuild the guest artifacts with a kernel that has it")
            for rel in self.module_load[key]:
                if rel not in out:
                    out.append(rel)
        return out

    def as_metadata(self) -> dict:
        return {
            "kernel": str(self.kernel),
            "initramfs": str(self.initramfs),
            "kernel_version": self.kernel_version,
            "kernel_source": self.kernel_source,
            "fio_version": self.fio_version,
            "modules": list(self.modules),
            "cache_key": self.cache_key,
            "fio_source": self.fio_source,
            "compression": self.compression,
            "initramfs_bytes": self.initramfs_bytes,
        }


# --------------------------------------------------------------------------- paths


def default_cache_dir() -> Path:
    env = os.environ.get("IOMATRIX_CACHE")
    if env:
        return Path(env).expanduser() / "guest"
    return Path.home() / ".cache" / "iomatrix" / "guest"


def init_script_text() -> str:
    return resources.files("iomatrix.guest").joinpath("init.sh").read_text()


def _noop(_msg: str) -> None:
    pass


# --------------------------------------------------------------------------- kernel version / modules


def bzimage_version(path: Path) -> str | None:
    """The release string embedded in a bzImage header (e.g. '6.1.0-56-cloud-amd64'), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(0x400)
            if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
                return None
            off = int.from_bytes(head[0x20E:0x210], "little")
            if off == 0:
                return None
            f.seek(off + 0x200)
            raw = f.read(256)
    except OSError:
        return None
    text = raw.split(b"\0", 1)[0].decode("ascii", "replace")
    return text.split(" ", 1)[0] or None


def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """modules.dep → {relative .ko path: [relative dependency paths, as listed]}."""
    deps: dict[str, list[str]] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        mod, _, rest = line.partition(":")
        deps[mod.strip()] = rest.split()
    return deps


def module_name(relpath: str) -> str:
    base = relpath.rsplit("/", 1)[-1]
    base = re.sub(r"\.ko(\.(xz|zst|gz))?$", "", base)
    return base.replace("-", "_")


def load_order(roots: Iterable[str], deps: dict[str, list[str]]) -> list[str]:
    """Relative .ko paths to load for `roots` (module names), dependencies before dependants.

    modules.dep lists a module's full dependency set; we topologically sort it (depth first over
    each dependency's own entry) so the result does not rely on the listing order.
    """
    by_name = {module_name(p): p for p in deps}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(path: str) -> None:
        if state.get(path) == 2:
            return
        if state.get(path) == 1:
            raise ValueError(f"dependency cycle at {path}")
        state[path] = 1
        for dep in reversed(deps.get(path, [])):
            visit(dep)
        state[path] = 2
        order.append(path)

    for root in roots:
        path = by_name.get(root.replace("-", "_"))
        if path is None:
            raise KeyError(root)
        visit(path)
    return order


def builtin_modules(text: str) -> set[str]:
    return {module_name(line.strip()) for line in text.splitlines() if line.strip()}


# --------------------------------------------------------------------------- kernel sources


@dataclass
class _KernelTree:
    vmlinuz: Path
    moddir: Path  # .../lib/modules/<version>
    version: str
    source: str


def _check_tree(tree: _KernelTree) -> list[str]:
    """Names of required modules that are neither built in nor present as .ko."""
    dep_file = tree.moddir / "modules.dep"
    if not dep_file.is_file():
        return ["modules.dep"]
    deps = parse_modules_dep(dep_file.read_text())
    have = {module_name(p) for p in deps}
    builtin_file = tree.moddir / "modules.builtin"
    if builtin_file.is_file():
        have |= builtin_modules(builtin_file.read_text())
    needed = ("qemu_fw_cfg", "virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod", "ata_piix", "ext4")
    return [m for m in needed if m not in have]


def _user_kernel(kernel: Path, modules: Path | None, cache_dir: Path, log: Callable[[str], None]) -> _KernelTree:
    kernel = kernel.expanduser()
    if not kernel.exists():
        raise UserError(f"guest kernel {kernel} does not exist", hint="pass a vmlinuz file, a .deb or an "
                        "unpacked kernel package directory")
    if kernel.suffix == ".deb":
        root = cache_dir / "kernels" / kernel.stem
        _unpack_deb(kernel, root, log)
        return _tree_from_root(root, f"user-given package {kernel}")
    if kernel.is_dir():
        return _tree_from_root(kernel, f"user-given kernel tree {kernel}")
    version = bzimage_version(kernel)
    if version is None:
        m = re.match(r"vmlinuz-(.+)$", kernel.name)
        version = m.group(1) if m else None
    if version is None:
        raise UserError(f"{kernel} is not a bzImage kernel (no version in its header)",
                        hint="pass a vmlinuz file built for x86_64")
    if modules is None:
        for cand in (kernel.parent.parent / "lib" / "modules" / version, Path("/lib/modules") / version):
            if cand.is_dir():
                modules = cand
                break
    if modules is None:
        raise UserError(f"no modules found for guest kernel {kernel} (version {version})",
                        hint=f"also pass the modules directory (…/lib/modules/{version})")
    tree = _KernelTree(kernel, modules.expanduser(), version, f"user-given kernel {kernel}, modules {modules}")
    _depmod(tree)
    return tree


def _tree_from_root(root: Path, source: str) -> _KernelTree:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise UserError(f"no boot/vmlinuz-* in {root}", hint="pass an unpacked linux-image package")
    vmlinuz = kernels[-1]
    version = vmlinuz.name[len("vmlinuz-"):]
    moddir = root / "lib" / "modules" / version
    if not moddir.is_dir():
        raise UserError(f"no lib/modules/{version} in {root}", hint="pass an unpacked linux-image package")
    tree = _KernelTree(vmlinuz, moddir, version, source)
    _depmod(tree)
    return tree


def _depmod(tree: _KernelTree) -> None:
    if (tree.moddir / "modules.dep").is_file():
        return
    base = tree.moddir.parent.parent.parent  # <root>/lib/modules/<v> -> <root>
    subprocess.run([require("depmod"), "-b", str(base), tree.version], check=True, capture_output=True)


def _host_kernel() -> tuple[_KernelTree | None, str]:
    release = os.uname().release
    vmlinuz = Path("/boot") / f"vmlinuz-{release}"
    moddir = Path("/lib/modules") / release
    if not vmlinuz.is_file():
        return None, f"host kernel not usable: /boot/vmlinuz-{release} is absent"
    if not os.access(vmlinuz, os.R_OK):
        return None, f"host kernel not usable: {vmlinuz} is not readable"
    if not moddir.is_dir():
        return None, f"host kernel not usable: {moddir} is absent"
    tree = _KernelTree(vmlinuz, moddir, release, f"host kernel {vmlinuz} with {moddir}")
    missing = _check_tree(tree)
    if missing:
        return None, f"host kernel not usable: lacks {', '.join(missing)}"
    return tree, "host kernel has every module the guest needs"


def _resolve_cloud_package() -> tuple[str, str]:
    """(package, version) behind linux-image-cloud-amd64, via apt-cache."""
    if shutil.which("apt-cache") is None:
        raise UserError("no usable guest kernel and apt-cache is missing (not a Debian host?)",
                        hint="pass --kernel with a vmlinuz and its modules")
    out = subprocess.run(["apt-cache", "depends", CLOUD_META_PACKAGE], capture_output=True, text=True)
    m = re.search(r"Depends:\s*(linux-image-\S+)", out.stdout)
    if out.returncode != 0 or m is None:
        raise UserError(f"apt-cache knows no {CLOUD_META_PACKAGE}",
                        hint="run apt-get update (bookworm main must be in sources.list) or pass --kernel")
    pkg = m.group(1)
    pol = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True)
    vm = re.search(r"Candidate:\s*(\S+)", pol.stdout)
    if vm is None or vm.group(1) == "(none)":
        raise UserError(f"apt has no candidate version of {pkg}", hint="run apt-get update or pass --kernel")
    return pkg, vm.group(1)


@contextlib.contextmanager
def _staged_dir(dest: Path, prefix: str) -> Iterator[Path]:
    """A scratch directory beside `dest` that replaces `dest` only if the block completes, so a
    half-built cache entry is never visible (and an interrupted build leaves nothing behind)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _unpack_deb(deb: Path, root: Path, log: Callable[[str], None]) -> None:
    if (root / ".unpacked").is_file():
        return
    require("dpkg-deb")
    with _staged_dir(root, ".unpack-") as tmp:
        log(f"unpacking {deb.name}")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True, capture_output=True)
        (tmp / ".unpacked").write_text(str(deb) + "\n")


def _resolve_cloud_package_cached(cache_dir: Path, max_age: float = 86400.0) -> tuple[str, str]:
    """_resolve_cloud_package(), remembered for a day (apt-cache costs ~1 s per call)."""
    memo = cache_dir / "kernels" / "resolved.json"
    try:
        m = json.loads(memo.read_text())
        if time.time() - m["when"] < max_age:
            return m["package"], m["version"]
    except (OSError, ValueError, KeyError):
        pass
    pkg, version = _resolve_cloud_package()
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(json.dumps({"package": pkg, "version": version, "when": time.time()}) + "\n")
    return pkg, version


def _cloud_kernel(cache_dir: Path, log: Callable[[str], None], why: str) -> _KernelTree:
    pkg, version = _resolve_cloud_package_cached(cache_dir)
    root = cache_dir / "kernels" / f"{pkg}_{version}"
    if not (root / ".unpacked").is_file():
        if shutil.which("apt-get") is None:
            raise MissingTool("apt-get", "apt")
        dl = cache_dir / "kernels" / "download"
        dl.mkdir(parents=True, exist_ok=True)
        log(f"downloading {pkg} {version} with apt-get download")
        res = subprocess.run(["apt-get", "download", f"{pkg}={version}"], cwd=dl, capture_output=True, text=True)
        debs = sorted(dl.glob(f"{pkg}_*.deb"))
        if res.returncode != 0 or not debs:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"apt-get download {pkg} failed: {last}",
                            hint="check network access to the Debian mirror, or pass --kernel")
        _unpack_deb(debs[-1], root, log)
        for d in debs:
            d.unlink()
    return _tree_from_root(root, f"Debian {pkg} {version} (resolved from {CLOUD_META_PACKAGE}; {why})")


def _pick_kernel(cache_dir: Path, kernel: Path | None, modules: Path | None,
                 log: Callable[[str], None]) -> _KernelTree:
    if kernel is not None:
        tree = _user_kernel(kernel, modules, cache_dir, log)
    else:
        host, why = _host_kernel()
        tree = host if host is not None else _cloud_kernel(cache_dir, log, why)
    missing = _check_tree(tree)
    if missing:
        raise UserError(f"guest kernel {tree.version} lacks {', '.join(missing)}",
                        hint="use a kernel with virtio, SCSI, ATA, fw_cfg and ext4 (e.g. Debian's cloud kernel)")
    return tree


# --------------------------------------------------------------------------- static fio

FIO_CONFIGURE = ["--build-static", "--disable-native", "--disable-numa", "--disable-rdma", "--disable-rados",
                 "--disable-rbd", "--disable-http", "--disable-gfapi", "--disable-libnfs", "--disable-pmem",
                 "--disable-xnvme", "--disable-libzbc", "--disable-tcmalloc", "--disable-dfs"]
STATIC_FIO_PACKAGES = "build-essential dpkg-dev libaio-dev zlib1g-dev"


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
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(r"^deb\s+(\S+/debian)\s", text, re.M)
        if m:
            uri = m.group(1)
            break
    return uri, suite


def _host_fio_package_version() -> str | None:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "fio"], capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def static_fio(cache_dir: Path, log: Callable[[str], None], build: bool = True) -> tuple[Path | None, str]:
    """A static fio built from Debian's source package of the host's fio version (cached).

    Returns (path, why). A static fio keeps the initramfs at a few MB instead of ~35 MB for the
    host binary's library closure, which saves about a second of boot under TCG. When it cannot be
    built (no compiler, no libaio-dev, no source), returns (None, reason) and the closure is used.
    """
    version = _host_fio_package_version()
    if version is None:
        return None, "host fio is not a Debian package: using its library closure"
    root = cache_dir / "fio-static"
    binary = root / f"fio_{version}"
    failed = root / f"failed_{version}.txt"
    if binary.is_file():
        return binary, f"static fio built from Debian source fio {version}"
    if not build:
        return None, f"no static fio {version} cached"
    missing = [t for t in ("gcc", "make", "dpkg-source", "apt-get", "strip") if shutil.which(t) is None]
    if not Path("/usr/lib/x86_64-linux-gnu/libaio.a").is_file():
        missing.append("libaio.a")
    if missing:
        return None, (f"static fio not built (missing {', '.join(missing)}; apt-get install "
                      f"{STATIC_FIO_PACKAGES}): using the host fio's library closure")
    if failed.is_file():  # do not retry a failed build on every run (rebuild=True clears this)
        return None, failed.read_text().strip()
    path, why = _build_static_fio(root, binary, version, log)
    if path is None:
        failed.write_text(why + "\n")
    return path, why


def _build_static_fio(root: Path, binary: Path, version: str,
                      log: Callable[[str], None]) -> tuple[Path | None, str]:
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    start = time.monotonic()
    try:
        uri, suite = _debian_mirror()
        (work / "src.list").write_text(f"deb-src {uri} {suite} main\n")
        (work / "lists" / "partial").mkdir(parents=True)
        apt = ["apt-get", "-q", f"-oDir::Etc::SourceList={work / 'src.list'}", "-oDir::Etc::SourceParts=/dev/null",
               f"-oDir::State::Lists={work / 'lists'}"]
        log(f"building a static fio {version} from Debian's source package (once, ~1 min)")
        steps = [([*apt, "update"], work), ([*apt, "source", "--download-only", f"fio={version}"], work)]
        for argv, cwd in steps:
            res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["no output"])[-1]
                return None, f"static fio not built ({argv[-2]} {argv[-1]}: {last}): using the host fio's closure"
        dsc = next(iter(sorted(work.glob("fio_*.dsc"))), None)
        if dsc is None:
            return None, "static fio not built (no fio source downloaded): using the host fio's closure"
        src = work / "src"
        for argv, cwd in (
            (["dpkg-source", "-x", str(dsc), str(src)], work),
            (["./configure", *FIO_CONFIGURE], src),
            (["make", f"-j{os.cpu_count() or 2}", "fio"], src),
            (["strip", "-o", str(work / "fio"), "fio"], src),
        ):
            res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
            if res.returncode != 0:
                last = ((res.stderr or res.stdout).strip().splitlines() or ["no output"])[-1]
                return None, f"static fio not built ({argv[0]}: {last}): using the host fio's closure"
        ver = subprocess.run([str(work / "fio"), "--version"], capture_output=True, text=True).stdout.strip()
        if not ver.startswith("fio-"):
            return None, "static fio not built (the result does not run): using the host fio's closure"
        (work / "fio").rename(binary)
        log(f"static fio {ver} built in {time.monotonic() - start:.0f} s")
        return binary, f"static fio built from Debian source fio {version}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- initramfs


def _fio_version() -> str:
    try:
        out = subprocess.run([require("fio"), "--version"], capture_output=True, text=True, timeout=10)
    except MissingTool:
        raise
    return out.stdout.strip() or "unknown"


def _ldd_closure(binary: str) -> list[str]:
    """Absolute paths of the shared libraries `binary` loads (including the dynamic loader)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    libs: list[str] = []
    for line in out.stdout.splitlines():
        line = line.strip()
        m = re.match(r"\S+ => (/\S+) \(", line) or re.match(r"(/\S+) \(", line)
        if m:
            libs.append(m.group(1))
    return libs


class CpioWriter:
    """Minimal cpio 'newc' writer (no root needed for device nodes, deterministic output)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._ino = 1
        self._seen: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
               nlink: int = 1) -> None:
        name = name.lstrip("/")
        if name in self._seen:
            return
        self._seen.add(name)
        namez = name.encode() + b"\0"
        fields = [self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0]
        self._ino += 1
        hdr = b"070701" + b"".join(b"%08X" % v for v in fields)
        buf = hdr + namez
        buf += b"\0" * (-len(buf) % 4)
        buf += data
        buf += b"\0" * (-len(buf) % 4)
        self._parts.append(buf)

    def dir(self, name: str) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self._entry("/".join(parts[:i]), 0o040755, nlink=2)

    def _parent(self, name: str) -> None:
        parent = os.path.dirname(name.strip("/"))
        if parent:
            self.dir(parent)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._parent(name)
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._parent(name)
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name: str, major: int, minor: int) -> None:
        self._entry(name, 0o020600, rdev=(major, minor))

    def getvalue(self) -> bytes:
        trailer = CpioWriter()
        trailer._ino = 0
        trailer._entry("TRAILER!!!", 0)
        return b"".join(self._parts) + trailer._parts[0]


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".xz":
        import lzma
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        return subprocess.run([require("zstd"), "-dc", str(path)], capture_output=True, check=True).stdout
    return data


def _compress(data: bytes, kernel_config: str, log: Callable[[str], None]) -> tuple[bytes, str]:
    """Compress the cpio for the fastest boot the kernel supports.

    Decompression speed, not size, is what costs boot time under TCG: prefer lz4, then zstd, gzip.
    """
    choices = [("lz4", "CONFIG_RD_LZ4=y", ["lz4", "-l", "-9", "-c"]),
               ("zstd", "CONFIG_RD_ZSTD=y", ["zstd", "-10", "-c", "-T0"]),
               ("gzip", "CONFIG_RD_GZIP=y", None)]
    forced = os.environ.get("IOMATRIX_INITRAMFS_COMPRESSION")
    for name, flag, argv in choices:
        if forced and name != forced:
            continue
        if kernel_config and flag not in kernel_config and not forced:
            continue
        if argv is None:
            return gzip.compress(data, compresslevel=6, mtime=0), "gzip"
        if shutil.which(argv[0]) is None:
            continue
        out = subprocess.run(argv, input=data, capture_output=True, check=True).stdout
        return out, name
    if forced == "none":
        return data, "none"
    return gzip.compress(data, compresslevel=6, mtime=0), "gzip"


def _build_initramfs(tree: _KernelTree, init_text: str, out: Path, fio: Path | None,
                     log: Callable[[str], None]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], str]:
    cpio = CpioWriter()
    for d in ("dev", "proc", "sys", "tmp", "mnt", "run", "etc", "root", "bin", "sbin", "usr/bin", "usr/sbin",
              "lib64"):
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3)
    cpio.file("init", init_text.encode(), 0o755)

    busybox = require("busybox")
    cpio.file("bin/busybox", Path(busybox).read_bytes(), 0o755)
    applets = subprocess.run([busybox, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    # Real programs below take precedence over busybox applets of the same name.
    real = {guest for _cands, guest in PROGRAMS}
    for applet in applets:
        if applet in real or applet == "bin/busybox":
            continue
        cpio.symlink(applet, "/bin/busybox")
    cpio.symlink("bin/sh", "/bin/busybox")

    libs: set[str] = set()
    for candidates, guest in PROGRAMS:
        if guest == "usr/bin/fio" and fio is not None:
            cpio.file(guest, fio.read_bytes(), 0o755)  # static: no libraries
            continue
        host = next((c for c in candidates if os.path.exists(c)), None)
        if host is None:
            prog = guest.rsplit("/", 1)[-1]
            raise MissingTool(prog, PROGRAM_PACKAGES.get(prog, prog))
        cpio.file(guest, Path(host).read_bytes(), 0o755)
        libs.update(_ldd_closure(host))
    for lib in sorted(libs):
        cpio.file(lib, Path(lib).read_bytes(), 0o755)  # at the path ldd resolved: the loader searches there
    if os.path.exists("/etc/mke2fs.conf"):
        cpio.file("etc/mke2fs.conf", Path("/etc/mke2fs.conf").read_bytes())
    cpio.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    cpio.file("etc/group", b"root:x:0:\n")

    # Kernel modules: the closure of MODULE_ROOTS that exists as .ko (built-ins need nothing).
    deps = parse_modules_dep((tree.moddir / "modules.dep").read_text())
    builtin_file = tree.moddir / "modules.builtin"
    builtins = builtin_modules(builtin_file.read_text()) if builtin_file.is_file() else set()
    available = {module_name(p) for p in deps}
    module_load: dict[str, tuple[str, ...]] = {}
    shipped: set[str] = set()
    for root in MODULE_ROOTS:
        if root in available:
            order = load_order([root], deps)
            # In the initramfs modules are stored uncompressed (busybox insmod cannot decompress).
            module_load[root] = tuple(re.sub(r"\.(xz|zst|gz)$", "", p) for p in order)
            shipped.update(order)
        elif root in builtins:
            module_load[root] = ()
    kroot = f"lib/modules/{tree.version}"
    for rel in sorted(shipped):
        dst = re.sub(r"\.(xz|zst|gz)$", "", rel)
        cpio.file(f"{kroot}/{dst}", _read_module(tree.moddir / rel))
    kept_dep = "".join(f"{re.sub(r'[.](xz|zst|gz)$', '', p)}: "
                       f"{' '.join(re.sub(r'[.](xz|zst|gz)$', '', d) for d in deps[p])}\n"
                       for p in sorted(shipped))
    cpio.file(f"{kroot}/modules.dep", kept_dep.encode())

    config = tree.vmlinuz.parent / f"config-{tree.version}"
    config_text = config.read_text() if config.is_file() else ""
    raw = cpio.getvalue()
    data, compression = _compress(raw, config_text, log)
    log(f"initramfs: {len(raw) / 1e6:.1f} MB cpio, {len(data) / 1e6:.1f} MB {compression}")
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.rename(out)
    names = tuple(sorted(module_name(p) for p in shipped))
    return names, module_load, compression


_KERNEL_MAGICS = (  # compressed payload inside a bzImage: (magic, decompressor argv or None for python)
    (b"\x02\x21\x4c\x18", ["lz4", "-dc"]),
    (b"\x28\xb5\x2f\xfd", ["zstd", "-dc"]),
    (b"\xfd7zXZ\x00", None),
    (b"\x1f\x8b\x08", None),
)


def extract_vmlinux(bzimage: Path) -> bytes | None:
    """The uncompressed ELF vmlinux inside a bzImage, or None (like scripts/extract-vmlinux).

    Booting the ELF through its PVH entry point skips the firmware's real-mode kernel setup and the
    in-guest decompression: ~0.5 s less per run under TCG.
    """
    import lzma
    import zlib

    data = bzimage.read_bytes()
    for magic, argv in _KERNEL_MAGICS:
        pos = data.find(magic)
        while 0 <= pos < len(data):
            out = b""
            try:
                if argv is not None:
                    if shutil.which(argv[0]) is None:
                        break
                    out = subprocess.run(argv, input=data[pos:], capture_output=True).stdout
                elif magic.startswith(b"\xfd"):
                    out = lzma.LZMADecompressor().decompress(data[pos:])
                else:
                    out = zlib.decompressobj(31).decompress(data[pos:])
            except (lzma.LZMAError, zlib.error):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            pos = data.find(magic, pos + 1)
    return None


def _cache_key(kernel_version: str, fio_version: str, init_text: str, fio_kind: str = "static") -> str:
    h = hashlib.sha256()
    for part in (f"format={BUILD_FORMAT}", kernel_version, fio_version, fio_kind, init_text,
                 os.environ.get("IOMATRIX_INITRAMFS_COMPRESSION", "")):
        h.update(part.encode())
        h.update(b"\0")
    init_hash = hashlib.sha256(init_text.encode()).hexdigest()[:8]
    fio = re.sub(r"[^A-Za-z0-9.]+", "", fio_version.replace("fio-", ""))
    return f"{kernel_version}_fio{fio}-{fio_kind}_init{init_hash}_{h.hexdigest()[:8]}"


def _from_manifest(build: Path) -> GuestArtifacts | None:
    mf = build / "manifest.json"
    if not mf.is_file():
        return None
    try:
        m = json.loads(mf.read_text())
        art = GuestArtifacts(
            kernel=build / m.get("kernel", "vmlinuz"), initramfs=build / m["initramfs"],
            kernel_version=m["kernel_version"],
            kernel_source=m["kernel_source"], fio_version=m["fio_version"], modules=tuple(m["modules"]),
            cache_key=m["cache_key"], module_load={k: tuple(v) for k, v in m["module_load"].items()},
            fio_source=m.get("fio_source", ""), compression=m["compression"],
            initramfs_bytes=m["initramfs_bytes"],
            build_seconds=m.get("build_seconds", 0.0))
    except (OSError, ValueError, KeyError):
        return None
    if not (art.kernel.is_file() and art.initramfs.is_file()):
        return None
    return art


def ensure_artifacts(cache_dir: Path | None = None, kernel: Path | None = None, rebuild: bool = False,
                     log: Callable[[str], None] | None = None, *, modules: Path | None = None,
                     static_fio_build: bool = True) -> GuestArtifacts:
    """Return cached guest artifacts, building them first if needed (or if `rebuild`).

    `kernel`: a vmlinuz (then `modules`, its lib/modules/<version> directory, unless it sits in an
    unpacked tree or /lib/modules), a linux-image .deb, or an unpacked package directory. Without
    it: the host's /boot kernel if usable, else Debian's cloud kernel fetched with apt-get download.
    fio: a static build of the host's fio version from Debian's source package when it can be built
    (`static_fio_build`), else the host fio with its library closure.
    """
    log = log or _noop
    cache_dir = (cache_dir or default_cache_dir()).expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    init_text = init_script_text()
    fio_version = _fio_version()
    tree = _pick_kernel(cache_dir, kernel, modules, log)
    if rebuild:
        for f in (cache_dir / "fio-static").glob("failed_*.txt"):
            f.unlink()
    fio_bin, fio_why = static_fio(cache_dir, log, build=static_fio_build)
    key = _cache_key(tree.version, fio_version, init_text, "static" if fio_bin else "closure")
    build = cache_dir / "builds" / key
    if not rebuild:
        art = _from_manifest(build)
        if art is not None:
            return art
    log(f"building guest initramfs for kernel {tree.version} ({tree.source})")
    (cache_dir / "builds").mkdir(parents=True, exist_ok=True)
    with _staged_dir(build, f".{key}-") as tmp:
        shutil.copyfile(tree.vmlinuz, tmp / "vmlinuz")
        config = tree.vmlinuz.parent / f"config-{tree.version}"
        kernel_file = "vmlinuz"
        if config.is_file() and "CONFIG_PVH=y" in config.read_text():
            elf = extract_vmlinux(tree.vmlinuz)
            if elf is not None:
                (tmp / "vmlinux").write_bytes(elf)
                kernel_file = "vmlinux"
                log("kernel: booting the uncompressed vmlinux through its PVH entry")
        initramfs = tmp / "initramfs.cpio"
        names, module_load, compression = _build_initramfs(tree, init_text, initramfs, fio_bin, log)
        final_name = f"initramfs.cpio.{compression}" if compression != "none" else "initramfs.cpio"
        initramfs.rename(tmp / final_name)
        seconds = time.monotonic() - start
        manifest = {
            "initramfs": final_name, "kernel": kernel_file, "kernel_version": tree.version,
            "kernel_source": tree.source,
            "fio_version": fio_version, "fio_source": fio_why, "modules": list(names), "cache_key": key,
            "module_load": {k: list(v) for k, v in module_load.items()}, "compression": compression,
            "initramfs_bytes": (tmp / final_name).stat().st_size, "build_seconds": round(seconds, 2),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    art = _from_manifest(build)
    assert art is not None
    log(f"guest artifacts ready in {time.monotonic() - start:.1f} s: {build}")
    return art


def artifact_info(cache_dir: Path | None = None) -> dict:
    """What is cached, what `ensure_artifacts()` would use, and why (no download, no build)."""
    cache_dir = (cache_dir or default_cache_dir()).expanduser()
    info: dict = {"cache_dir": str(cache_dir)}
    builds = []
    for b in sorted((cache_dir / "builds").glob("*")) if (cache_dir / "builds").is_dir() else []:
        art = _from_manifest(b)
        if art is not None:
            builds.append(art.as_metadata() | {"build_seconds": art.build_seconds})
    info["cached_builds"] = builds
    kernels = sorted(p.name for p in (cache_dir / "kernels").glob("*") if (p / ".unpacked").is_file()) \
        if (cache_dir / "kernels").is_dir() else []
    info["cached_kernels"] = kernels
    host, why = _host_kernel()
    if host is not None:
        info["would_use"] = {"kernel": str(host.vmlinuz), "kernel_version": host.version, "why": why}
    else:
        try:
            pkg, version = _resolve_cloud_package_cached(cache_dir)
            cached = f"{pkg}_{version}" in kernels
            info["would_use"] = {"kernel": f"{pkg} {version}", "kernel_version": pkg.removeprefix("linux-image-"),
                                 "why": f"{why}; Debian cloud kernel ({'cached' if cached else 'to download'})"}
        except UserError as e:
            info["would_use"] = {"kernel": None, "why": f"{why}; {e.one_line()}"}
    try:
        info["fio_version"] = _fio_version()
        fio_bin, fio_why = static_fio(cache_dir, _noop, build=False)
        info["fio_source"] = fio_why
        key = _cache_key(info["would_use"].get("kernel_version") or "?", info["fio_version"], init_script_text(),
                         "static" if fio_bin else "closure")
        info["cache_key"] = key
        info["up_to_date"] = _from_manifest(cache_dir / "builds" / key) is not None
    except MissingTool as e:
        info["fio_version"] = None
        info["up_to_date"] = False
        info["problem"] = e.one_line()
    accel_file = cache_dir / "accel.json"
    if accel_file.is_file():
        with contextlib.suppress(ValueError):
            info["accel_probes"] = json.loads(accel_file.read_text())
    return info
