"""The guest cache directory: where it lives and how an entry is published.

Layout (root: `default_cache_dir()`, `$IOMATRIX_CACHE/guest` or `~/.cache/iomatrix/guest`)::

    kernels/<package>_<version>/      unpacked Debian kernel package (kernel.py)
    fio-static/fio_<version>          static fio built from Debian's source package (static_fio.py)
    builds/<cache_key>/               vmlinuz or vmlinux, initramfs.cpio.<ext>, manifest.json (artifacts.py)
    accel.json                        accelerator probe results (accel.py)
    tarballs/                         filesystem-workload tarballs (tarball.py)
"""  # noqa: E501

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def cache_root() -> Path:
    """iomatrix's cache: `$IOMATRIX_CACHE` or `~/.cache/iomatrix` (the guest's artifacts, the fleet
    hosts' fio)."""
    env = os.environ.get("IOMATRIX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "iomatrix"


def default_cache_dir() -> Path:
    return cache_root() / "guest"


@contextlib.contextmanager
def staged_dir(dest: Path, prefix: str) -> Iterator[Path]:
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
