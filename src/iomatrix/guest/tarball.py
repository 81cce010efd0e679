"""The source tree for filesystem workloads, generated deterministically (nothing is downloaded).

Seed 001 used a Linux kernel tarball; we generate a stand-in with the same character: a nested tree
of many small files plus a few large ones (~3000 files, ~64 MiB by default). It is a plain,
uncompressed tar: under TCG, gunzip inside the guest would dominate the timed extract, and an
uncompressed archive can be attached as a raw read-only disk and read with `tar -xf /dev/vdX`.
Same `size_hint` and format version ⇒ byte-identical file.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
from pathlib import Path

from iomatrix.guest.cache import default_cache_dir

TARBALL_FORMAT = 1
DEFAULT_SIZE = 64 << 20
_SEED = 20120501  # fixed: the content never changes for a given size
_MTIME = 1_335_830_400


def _plan(size_hint: int) -> list[tuple[str, int]]:
    """(path, size) of every file: ~47 small files per MiB of size_hint (half the bytes), the rest
    in four large files."""
    rng = random.Random(_SEED ^ size_hint)
    small_budget = size_hint // 2
    n_small = max(50, size_hint * 3000 // DEFAULT_SIZE)
    weights = [rng.lognormvariate(0, 1.2) for _ in range(n_small)]
    total_w = sum(weights)
    files: list[tuple[str, int]] = []
    for i, w in enumerate(weights):
        d1, d2 = rng.randrange(12), rng.randrange(8)
        depth3 = f"/sub{rng.randrange(4)}" if rng.random() < 0.3 else ""
        size = max(1, int(small_budget * w / total_w))
        files.append((f"tree/dir{d1:02d}/mod{d2}{depth3}/file{i:05d}.c", size))
    rest = size_hint - sum(s for _p, s in files)
    for i in range(4):
        files.append((f"tree/blobs/large{i}.bin", max(1, rest // 4)))
    return files


def write_tarball(path: Path, size_hint: int = DEFAULT_SIZE) -> None:
    rng = random.Random(_SEED + size_hint)
    # One pool of random bytes, sliced per file: deterministic, cheap, not trivially compressible.
    pool = rng.randbytes(4 << 20)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
            dirs: set[str] = set()
            for name, size in _plan(size_hint):
                parts = name.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        info = tarfile.TarInfo(d)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
                        tar.addfile(info)
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = size, 0o644, _MTIME
                off = rng.randrange(len(pool))
                data = (pool[off:] + pool[:off]) * (size // len(pool) + 1)
                tar.addfile(info, io.BytesIO(data[:size]))
        tmp.rename(path)
    finally:
        tmp.unlink(missing_ok=True)


def ensure_tarball(cache_dir: Path | None = None, size_hint: int = DEFAULT_SIZE) -> Path:
    """Path of the cached workload tarball for `size_hint` bytes, generated on first use."""
    root = (cache_dir or default_cache_dir()).expanduser() / "tarballs"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"tree-{size_hint >> 20}MiB-v{TARBALL_FORMAT}.tar"
    if not path.is_file():
        write_tarball(path, size_hint)
    return path
