"""Guest artifacts: a kernel and one initramfs, built once and cached.

The initramfs holds busybox, fio (a static build, else the host's binary plus its shared-library
closure), mkfs.ext4 and mkfs.xfs (plus closures), the init script (`init.sh`, package data) and only
the kernel modules a guest run can need. Jobs reach the guest through fw_cfg (see `job.py`), so one
initramfs serves every run. The parts: `kernel.py` (which kernel), `static_fio.py` (which fio),
`initramfs.py` (the archive); this module ties them into one cached build (`cache.py` has the
layout).

The cache key hashes the kernel version, the fio version, init.sh and the builder's format
version, so changing any of them builds a new initramfs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from iomatrix.errors import MissingTool, UserError
from iomatrix.guest.cache import default_cache_dir, entry_lock, staged_dir
from iomatrix.guest.initramfs import build_initramfs
from iomatrix.guest.kernel import (
    MODULE_ROOTS,
    extract_vmlinux,
    host_kernel,
    pick_kernel,
    resolve_cloud_package_cached,
)
from iomatrix.guest.static_fio import host_fio_version, static_fio, static_kind
from iomatrix.guest.static_tools import sources_text, static_tools

# Bump when the initramfs layout or the builder changes in a way init.sh's hash does not capture.
BUILD_FORMAT = 5  # 5: virtio_mmio for the microvm machine


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
    # static iomatrix tools in the initramfs (guest paths, see static_tools)
    tools: tuple[str, ...] = ()

    def modules_for(self, names: Iterable[str]) -> list[str]:
        """Relative .ko paths to insmod, in dependency order, for the given module names."""
        out: list[str] = []
        for name in names:
            key = name.replace("-", "_")
            if key not in self.module_load:
                raise UserError(
                    f"guest kernel {self.kernel_version} has no module '{name}'",
                    hint="rebuild the guest artifacts with a kernel that has it",
                )
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
            "tools": list(self.tools),
        }


def init_script_text() -> str:
    return resources.files("iomatrix.guest").joinpath("init.sh").read_text()


def kind_scripts() -> dict[str, str]:
    """The job-kind scripts (`guest/kinds/kind-<kind>.sh`) by file name: /init sources the one named
    by IOMX_KIND for kinds it does not run itself, so a tier adds a guest job without editing
    /init."""
    kinds = resources.files("iomatrix.guest").joinpath("kinds")
    return {
        f.name: f.read_text()
        for f in sorted(kinds.iterdir(), key=lambda f: f.name)
        if f.name.startswith("kind-") and f.name.endswith(".sh")
    }


def guest_script_text() -> str:
    """Everything scripted that goes into the initramfs, as one text: the cache key hashes it, so a
    change to /init or to any kind script rebuilds the initramfs."""
    return (
        init_script_text()
        + "".join(f"\0{name}\0{text}" for name, text in kind_scripts().items())
        + sources_text()
    )


def _tools_marker(tools: dict[str, Path]) -> str:
    return "\0tools=" + ",".join(sorted(tools))


def has_guest_tool(artifacts: GuestArtifacts, guest_path: str) -> bool:
    """Whether the initramfs of `artifacts` carries the static tool `guest_path` (see
    static_tools.TOOLS)."""
    return guest_path in artifacts.tools


def _noop(_msg: str) -> None:
    pass


def _cache_key(
    kernel_version: str, fio_version: str, init_text: str, fio_kind: str = "static"
) -> str:
    h = hashlib.sha256()
    # The module roots are part of the key: adding a driver to MODULE_ROOTS must rebuild the
    # initramfs.
    for part in (
        f"format={BUILD_FORMAT}",
        kernel_version,
        fio_version,
        fio_kind,
        init_text,
        ",".join(MODULE_ROOTS),
        os.environ.get("IOMATRIX_INITRAMFS_COMPRESSION", ""),
    ):
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
            kernel=build / m.get("kernel", "vmlinuz"),
            initramfs=build / m["initramfs"],
            kernel_version=m["kernel_version"],
            kernel_source=m["kernel_source"],
            fio_version=m["fio_version"],
            modules=tuple(m["modules"]),
            cache_key=m["cache_key"],
            module_load={k: tuple(v) for k, v in m["module_load"].items()},
            fio_source=m.get("fio_source", ""),
            compression=m["compression"],
            initramfs_bytes=m["initramfs_bytes"],
            build_seconds=m.get("build_seconds", 0.0),
            tools=tuple(m.get("tools", ())),
        )
    except (OSError, ValueError, KeyError):
        return None
    if not (art.kernel.is_file() and art.initramfs.is_file()):
        return None
    return art


def ensure_artifacts(
    cache_dir: Path | None = None,
    kernel: Path | None = None,
    rebuild: bool = False,
    log: Callable[[str], None] | None = None,
    *,
    modules: Path | None = None,
    static_fio_build: bool = True,
) -> GuestArtifacts:
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
    scripts = kind_scripts()
    fio_version = host_fio_version()
    tree = pick_kernel(cache_dir, kernel, modules, log)
    if rebuild:
        for f in (cache_dir / "fio-static").glob("failed_*.txt"):
            f.unlink()
    fio_bin, fio_why = static_fio(cache_dir, log, build=static_fio_build)
    tools, _tools_note = static_tools(cache_dir, log)
    # Which static tools made it in is part of the build: installing gcc later rebuilds with them.
    key = _cache_key(
        tree.version,
        fio_version,
        guest_script_text() + _tools_marker(tools),
        static_kind(fio_bin) if fio_bin else "closure",
    )
    build = cache_dir / "builds" / key
    if not rebuild:
        art = _from_manifest(build)
        if art is not None:
            return art
    (cache_dir / "builds").mkdir(parents=True, exist_ok=True)
    with entry_lock(build, f"the guest initramfs {key}", log):
        # built by another process while this one waited for the lock
        if not rebuild and (art := _from_manifest(build)) is not None:
            return art
        log(f"building guest initramfs for kernel {tree.version} ({tree.source})")
        with staged_dir(build, f".{key}-") as tmp:
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
            names, module_load, compression = build_initramfs(
                tree=tree,
                init_text=init_text,
                out=initramfs,
                fio=fio_bin,
                log=log,
                scripts=scripts,
                tools=tools,
            )
            final_name = "initramfs.cpio" + (f".{compression}" if compression != "none" else "")
            initramfs.rename(tmp / final_name)
            seconds = time.monotonic() - start
            manifest = {
                "initramfs": final_name,
                "kernel": kernel_file,
                "kernel_version": tree.version,
                "kernel_source": tree.source,
                "fio_version": fio_version,
                "fio_source": fio_why,
                "modules": list(names),
                "cache_key": key,
                "module_load": {k: list(v) for k, v in module_load.items()},
                "compression": compression,
                "initramfs_bytes": (tmp / final_name).stat().st_size,
                "build_seconds": round(seconds, 2),
                "tools": sorted(tools),
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    art = _from_manifest(build)
    assert art is not None
    log(f"guest artifacts ready in {time.monotonic() - start:.1f} s: {build}")
    return art


def _check_readable(cache_dir: Path) -> None:
    """A cache this user may not look into (e.g. root's, through a shared HOME) is a clear error; an
    absent one is simply empty."""
    for d in (cache_dir, *(cache_dir / sub for sub in ("builds", "kernels"))):
        try:
            if d.is_dir():
                os.listdir(d)
        except PermissionError:
            raise UserError(
                f"guest cache {cache_dir} cannot be read by this user ({d}: permission denied)",
                hint="run as the user who built it (e.g. root), or set IOMATRIX_CACHE to a "
                "directory "
                "you own",
            ) from None


def artifact_info(cache_dir: Path | None = None) -> dict:
    """What is cached, what `ensure_artifacts()` would use, and why (no download, no build)."""
    cache_dir = (cache_dir or default_cache_dir()).expanduser()
    _check_readable(cache_dir)
    info: dict = {"cache_dir": str(cache_dir)}
    builds = []
    for b in sorted((cache_dir / "builds").glob("*")) if (cache_dir / "builds").is_dir() else []:
        art = _from_manifest(b)
        if art is not None:
            builds.append(art.as_metadata() | {"build_seconds": art.build_seconds})
    info["cached_builds"] = builds
    kernels = (
        sorted(p.name for p in (cache_dir / "kernels").glob("*") if (p / ".unpacked").is_file())
        if (cache_dir / "kernels").is_dir()
        else []
    )
    info["cached_kernels"] = kernels
    host, why = host_kernel()
    if host is not None:
        info["would_use"] = {
            "kernel": str(host.vmlinuz),
            "kernel_version": host.version,
            "why": why,
        }
    else:
        try:
            pkg, version = resolve_cloud_package_cached(cache_dir)
            cached = f"{pkg}_{version}" in kernels
            info["would_use"] = {
                "kernel": f"{pkg} {version}",
                "kernel_version": pkg.removeprefix("linux-image-"),
                "why": f"{why}; Debian cloud kernel ({'cached' if cached else 'to download'})",
            }
        except UserError as e:
            info["would_use"] = {"kernel": None, "why": f"{why}; {e.one_line()}"}
    try:
        info["fio_version"] = host_fio_version()
        fio_bin, fio_why = static_fio(cache_dir, _noop, build=False)
        info["fio_source"] = fio_why
        tools, _note = static_tools(cache_dir, _noop, build=False)
        key = _cache_key(
            info["would_use"].get("kernel_version") or "?",
            info["fio_version"],
            guest_script_text() + _tools_marker(tools),
            "static" if fio_bin else "closure",
        )
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
