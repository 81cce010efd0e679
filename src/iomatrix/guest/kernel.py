"""The guest kernel: which one, where it comes from, and which of its modules the guest needs.

Sources, in order: a kernel the user names (vmlinuz + modules, a linux-image .deb, or an unpacked
package directory), the host's /boot kernel if it has every module the guest needs, else Debian's
cloud kernel fetched with `apt-get download` and unpacked into the cache (`kernels/`). Also: the
kernel release from a bzImage header, modules.dep parsing and load order, and extracting the ELF
vmlinux from a bzImage for a PVH boot.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import MissingTool, UserError
from iomatrix.guest.cache import entry_lock, staged_dir
from iomatrix.hostcmd import require

CLOUD_META_PACKAGE = "linux-image-cloud-amd64"

# Module roots the initramfs carries (their modules.dep closure is added). Names use '_' like lsmod.
MODULE_ROOTS = (
    "qemu_fw_cfg",
    "virtio_pci",
    "virtio_mmio",
    "virtio_blk",
    "virtio_scsi",
    "sd_mod",
    "ata_piix",
    "ahci",
    "nvme",
    "ext4",
    "xfs",
    "libcrc32c",
    "virtio_net",  # the private network between the guests of a consolidation tile
)
# What each bus / filesystem needs loaded in the guest (besides qemu_fw_cfg, which init loads
# itself).
BUS_MODULES = {
    "virtio-blk": ("virtio_pci", "virtio_blk"),
    "virtio-scsi": ("virtio_pci", "virtio_scsi", "sd_mod"),
    "virtio-scsi-single": ("virtio_pci", "virtio_scsi", "sd_mod"),
    "ide": ("ata_piix", "sd_mod"),
    "sata": ("ahci", "sd_mod"),
    "nvme": ("nvme",),
}
# On the microvm machine the virtio devices sit on virtio-mmio (found through ACPI), not PCI.
MMIO_BUS_MODULES = {
    "virtio-blk": ("virtio_mmio", "virtio_blk"),
    "virtio-scsi": ("virtio_mmio", "virtio_scsi", "sd_mod"),
    "virtio-scsi-single": ("virtio_mmio", "virtio_scsi", "sd_mod"),
}
FS_MODULES = {"ext4": ("ext4",), "xfs": ("libcrc32c", "xfs")}
# A virtio network card (guest-to-guest links of the consolidation tier).
NET_MODULES = ("virtio_pci", "virtio_net")


# --------------------------------------------------------------------------- kernel version /
# modules


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
class KernelTree:
    vmlinuz: Path
    moddir: Path  # .../lib/modules/<version>
    version: str
    source: str


def missing_modules(tree: KernelTree) -> list[str]:
    """Names of required modules that are neither built in nor present as .ko."""
    dep_file = tree.moddir / "modules.dep"
    if not dep_file.is_file():
        return ["modules.dep"]
    deps = parse_modules_dep(dep_file.read_text())
    have = {module_name(p) for p in deps}
    builtin_file = tree.moddir / "modules.builtin"
    if builtin_file.is_file():
        have |= builtin_modules(builtin_file.read_text())
    needed = (
        "qemu_fw_cfg",
        "virtio_pci",
        "virtio_blk",
        "virtio_scsi",
        "sd_mod",
        "ata_piix",
        "ext4",
    )
    return [m for m in needed if m not in have]


def user_kernel(
    kernel: Path, modules: Path | None, cache_dir: Path, log: Callable[[str], None]
) -> KernelTree:
    kernel = kernel.expanduser()
    if not kernel.exists():
        raise UserError(
            f"guest kernel {kernel} does not exist",
            hint="pass a vmlinuz file, a .deb or an unpacked kernel package directory",
        )
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
        raise UserError(
            f"{kernel} is not a bzImage kernel (no version in its header)",
            hint="pass a vmlinuz file built for x86_64",
        )
    if modules is None:
        for cand in (
            kernel.parent.parent / "lib" / "modules" / version,
            Path("/lib/modules") / version,
        ):
            if cand.is_dir():
                modules = cand
                break
    if modules is None:
        raise UserError(
            f"no modules found for guest kernel {kernel} (version {version})",
            hint=f"also pass the modules directory (…/lib/modules/{version})",
        )
    tree = KernelTree(
        kernel, modules.expanduser(), version, f"user-given kernel {kernel}, modules {modules}"
    )
    _depmod(tree)
    return tree


def _tree_from_root(root: Path, source: str) -> KernelTree:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise UserError(f"no boot/vmlinuz-* in {root}", hint="pass an unpacked linux-image package")
    vmlinuz = kernels[-1]
    version = vmlinuz.name[len("vmlinuz-") :]
    moddir = root / "lib" / "modules" / version
    if not moddir.is_dir():
        raise UserError(
            f"no lib/modules/{version} in {root}", hint="pass an unpacked linux-image package"
        )
    tree = KernelTree(vmlinuz, moddir, version, source)
    _depmod(tree)
    return tree


def _depmod(tree: KernelTree) -> None:
    if (tree.moddir / "modules.dep").is_file():
        return
    base = tree.moddir.parent.parent.parent  # <root>/lib/modules/<v> -> <root>
    subprocess.run(
        [require("depmod"), "-b", str(base), tree.version], check=True, capture_output=True
    )


def _depmod_unpacked(root: Path) -> None:
    """modules.dep for each kernel of a package unpacked at `root` (Debian's package leaves it to
    its postinst), written while `root` is still private: a reader never sees it half-written."""
    for vmlinuz in (root / "boot").glob("vmlinuz-*"):
        version = vmlinuz.name[len("vmlinuz-") :]
        if (root / "lib" / "modules" / version).is_dir():
            _depmod(KernelTree(vmlinuz, root / "lib" / "modules" / version, version, ""))


def host_kernel() -> tuple[KernelTree | None, str]:
    release = os.uname().release
    vmlinuz = Path("/boot") / f"vmlinuz-{release}"
    moddir = Path("/lib/modules") / release
    if not vmlinuz.is_file():
        return None, f"host kernel not usable: /boot/vmlinuz-{release} is absent"
    if not os.access(vmlinuz, os.R_OK):
        return None, f"host kernel not usable: {vmlinuz} is not readable"
    if not moddir.is_dir():
        return None, f"host kernel not usable: {moddir} is absent"
    tree = KernelTree(vmlinuz, moddir, release, f"host kernel {vmlinuz} with {moddir}")
    missing = missing_modules(tree)
    if missing:
        return None, f"host kernel not usable: lacks {', '.join(missing)}"
    return tree, "host kernel has every module the guest needs"


def _resolve_cloud_package() -> tuple[str, str]:
    """(package, version) behind linux-image-cloud-amd64, via apt-cache."""
    if shutil.which("apt-cache") is None:
        raise UserError(
            "no usable guest kernel and apt-cache is missing (not a Debian host?)",
            hint="pass --kernel with a vmlinuz and its modules",
        )
    out = subprocess.run(
        ["apt-cache", "depends", CLOUD_META_PACKAGE], capture_output=True, text=True
    )
    m = re.search(r"Depends:\s*(linux-image-\S+)", out.stdout)
    if out.returncode != 0 or m is None:
        raise UserError(
            f"apt-cache knows no {CLOUD_META_PACKAGE}",
            hint="run apt-get update (bookworm main must be in sources.list) or pass --kernel",
        )
    pkg = m.group(1)
    pol = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True)
    vm = re.search(r"Candidate:\s*(\S+)", pol.stdout)
    if vm is None or vm.group(1) == "(none)":
        raise UserError(
            f"apt has no candidate version of {pkg}", hint="run apt-get update or pass --kernel"
        )
    return pkg, vm.group(1)


def _unpack_deb(deb: Path, root: Path, log: Callable[[str], None]) -> None:
    if (root / ".unpacked").is_file():
        return
    require("dpkg-deb")
    with entry_lock(root, f"the unpacked kernel package {root.name}", log):
        if (root / ".unpacked").is_file():  # unpacked by another process meanwhile
            return
        with staged_dir(root, ".unpack-") as tmp:
            log(f"unpacking {deb.name}")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True, capture_output=True)
            _depmod_unpacked(tmp)
            (tmp / ".unpacked").write_text(str(deb) + "\n")


def resolve_cloud_package_cached(cache_dir: Path, max_age: float = 86400.0) -> tuple[str, str]:
    """_resolve_cloud_package(), remembered for a day (apt-cache costs ~1 s per call)."""
    memo = cache_dir / "kernels" / "resolved.json"
    try:
        m = json.loads(memo.read_text())
        if time.time() - m["when"] < max_age:
            return m["package"], m["version"]
    except (OSError, ValueError, KeyError):
        pass
    pkg, version = _resolve_cloud_package()
    # Only a memo: a cache this user cannot write (another user's, or no home) just means asking apt
    # again.
    # Written whole and renamed: another process reading it at that moment sees the old or the new.
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"package": pkg, "version": version, "when": time.time()}) + "\n")
        tmp.replace(memo)
    return pkg, version


def _download_and_unpack(
    kernels: Path, pkg: str, version: str, root: Path, log: Callable[[str], None]
) -> None:
    """`apt-get download` the package into a private directory under `kernels`, then unpack it into
    `root` (the caller holds `root`'s lock)."""
    with tempfile.TemporaryDirectory(prefix=".download-", dir=kernels) as tmp:
        dl = Path(tmp)
        log(f"downloading {pkg} {version} with apt-get download")
        res = subprocess.run(
            ["apt-get", "download", f"{pkg}={version}"], cwd=dl, capture_output=True, text=True
        )
        debs = sorted(dl.glob(f"{pkg}_*.deb"))
        if res.returncode != 0 or not debs:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(
                f"apt-get download {pkg} failed: {last}",
                hint="check network access to the Debian mirror, or pass --kernel",
            )
        log(f"unpacking {debs[-1].name}")
        with staged_dir(root, ".unpack-") as stage:
            subprocess.run(
                ["dpkg-deb", "-x", str(debs[-1]), str(stage)], check=True, capture_output=True
            )
            _depmod_unpacked(stage)
            (stage / ".unpacked").write_text(str(debs[-1].name) + "\n")


def _cloud_kernel(cache_dir: Path, log: Callable[[str], None], why: str) -> KernelTree:
    pkg, version = resolve_cloud_package_cached(cache_dir)
    root = cache_dir / "kernels" / f"{pkg}_{version}"
    if not (root / ".unpacked").is_file():
        if shutil.which("apt-get") is None:
            raise MissingTool("apt-get", "apt")
        # Downloaded and unpacked under the entry's lock, into a directory of this process's own: a
        # second builder waits, then finds the kernel unpacked.
        with entry_lock(root, f"the guest kernel {pkg} {version}", log):
            if not (root / ".unpacked").is_file():
                _download_and_unpack(cache_dir / "kernels", pkg, version, root, log)
    return _tree_from_root(
        root, f"Debian {pkg} {version} (resolved from {CLOUD_META_PACKAGE}; {why})"
    )


def pick_kernel(
    cache_dir: Path, kernel: Path | None, modules: Path | None, log: Callable[[str], None]
) -> KernelTree:
    if kernel is not None:
        tree = user_kernel(kernel, modules, cache_dir, log)
    else:
        host, why = host_kernel()
        tree = host if host is not None else _cloud_kernel(cache_dir, log, why)
    missing = missing_modules(tree)
    if missing:
        raise UserError(
            f"guest kernel {tree.version} lacks {', '.join(missing)}",
            hint="use a kernel with virtio, SCSI, ATA, fw_cfg and ext4 (e.g. Debian's cloud "
            "kernel)",
        )
    return tree


# --------------------------------------------------------------------------- vmlinux

# compressed payload inside a bzImage: (magic, decompressor argv or None for python)
_KERNEL_MAGICS = (
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
