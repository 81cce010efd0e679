"""The guest initramfs: busybox, fio, mkfs.ext4/mkfs.xfs, init.sh and the kernel modules a run
needs.

Written as a deterministic cpio 'newc' archive (no root needed for device nodes), compressed with
the fastest-to-decompress format the kernel supports. Host programs come with their ldd closure;
fio is the static build when one exists.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from iomatrix.errors import MissingTool
from iomatrix.guest.kernel import (
    MODULE_ROOTS,
    KernelTree,
    builtin_modules,
    load_order,
    module_name,
    parse_modules_dep,
)
from iomatrix.hostcmd import require

# Host programs copied into the initramfs with their ldd closure: (host path candidates, guest
# path).
PROGRAMS = (
    (("/usr/bin/fio",), "usr/bin/fio"),
    (("/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"), "usr/sbin/mkfs.ext4"),
    (("/usr/sbin/mkfs.xfs", "/sbin/mkfs.xfs"), "usr/sbin/mkfs.xfs"),
)
PROGRAM_PACKAGES = {"fio": "fio", "mkfs.ext4": "e2fsprogs", "mkfs.xfs": "xfsprogs"}


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

    def _entry(
        self,
        name: str,
        mode: int,
        data: bytes = b"",
        rdev: tuple[int, int] = (0, 0),
        nlink: int = 1,
    ) -> None:
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
        return subprocess.run(
            [require("zstd"), "-dc", str(path)], capture_output=True, check=True
        ).stdout
    return data


def _compress(data: bytes, kernel_config: str, log: Callable[[str], None]) -> tuple[bytes, str]:
    """Compress the cpio for the fastest boot the kernel supports.

    Decompression speed, not size, is what costs boot time under TCG: prefer lz4, then zstd, gzip.
    """
    choices = [
        ("lz4", "CONFIG_RD_LZ4=y", ["lz4", "-l", "-9", "-c"]),
        ("zstd", "CONFIG_RD_ZSTD=y", ["zstd", "-10", "-c", "-T0"]),
        ("gzip", "CONFIG_RD_GZIP=y", None),
    ]
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


def build_initramfs(
    tree: KernelTree,
    init_text: str,
    out: Path,
    fio: Path | None,
    log: Callable[[str], None],
    scripts: dict[str, str] | None = None,
    tools: dict[str, Path] | None = None,
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], str]:
    """Write the initramfs to `out`; `scripts` (file name → text) go to /usr/lib/iomatrix/ for /init
    to source; `tools` (guest path → static binary) are iomatrix's own static programs
    (guest/static_tools.py)."""
    cpio = CpioWriter()
    for d in (
        "dev",
        "proc",
        "sys",
        "tmp",
        "mnt",
        "run",
        "etc",
        "root",
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "lib64",
    ):
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3)
    cpio.file("init", init_text.encode(), 0o755)
    for name, text in (scripts or {}).items():
        cpio.file(f"usr/lib/iomatrix/{name}", text.encode(), 0o644)

    _add_busybox(cpio)
    for guest_path, binary in sorted((tools or {}).items()):
        cpio.file(guest_path, binary.read_bytes(), 0o755)  # static: no libraries
    _add_programs(cpio, fio)
    if os.path.exists("/etc/mke2fs.conf"):
        cpio.file("etc/mke2fs.conf", Path("/etc/mke2fs.conf").read_bytes())
    cpio.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    cpio.file("etc/group", b"root:x:0:\n")
    module_load, shipped = _add_modules(cpio, tree)

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


def _add_busybox(cpio: CpioWriter) -> None:
    """busybox, and a link for each of its applets but those a real program below provides."""
    busybox = require("busybox")
    cpio.file("bin/busybox", Path(busybox).read_bytes(), 0o755)
    applets = subprocess.run(
        [busybox, "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    # Real programs below take precedence over busybox applets of the same name.
    real = {guest for _cands, guest in PROGRAMS}
    for applet in applets:
        if applet in real or applet == "bin/busybox":
            continue
        cpio.symlink(applet, "/bin/busybox")
    cpio.symlink("bin/sh", "/bin/busybox")


def _add_programs(cpio: CpioWriter, fio: Path | None) -> None:
    """The host's programs the guest runs (PROGRAMS) with their libraries, `fio` (static) in place
    of the host's where given."""
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
        # at the path ldd resolved: the loader searches there
        cpio.file(lib, Path(lib).read_bytes(), 0o755)


def _add_modules(cpio: CpioWriter, tree: KernelTree) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """Kernel modules: the closure of MODULE_ROOTS that exists as .ko (built-ins need nothing),
    stored uncompressed with their modules.dep: (each root's load order, the module files
    shipped)."""
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
    kept_dep = "".join(
        f"{re.sub(r'[.](xz|zst|gz)$', '', p)}: "
        f"{' '.join(re.sub(r'[.](xz|zst|gz)$', '', d) for d in deps[p])}\n"
        for p in sorted(shipped)
    )
    cpio.file(f"{kroot}/modules.dep", kept_dep.encode())
    return module_load, shipped
