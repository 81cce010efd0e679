"""Tiny static programs iomatrix writes itself and ships in the initramfs (today: the durability
writer).

Each is one C file under ``iomatrix/guest/`` compiled with ``gcc -static`` once per source version
and cached in ``tools/`` (the key is the source's hash, so the initramfs cache key covers it through
the source text). Without gcc or a static libc the program is left out and the tier that needs it
says so."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from iomatrix.guest.cache import entry_lock

# guest path in the initramfs → C source file in the iomatrix.guest package
TOOLS = {"usr/bin/iomx-durwriter": "durwriter.c"}
TOOL_PACKAGES = "build-essential (gcc and the static libc, libc6-dev)"


def tool_sources() -> dict[str, str]:
    """Guest path → C source text."""
    pkg = resources.files("iomatrix.guest")
    return {guest: pkg.joinpath(src).read_text() for guest, src in TOOLS.items()}


def sources_text() -> str:
    """All tool sources as one text, for the initramfs cache key."""
    return "".join(f"\0{guest}\0{text}" for guest, text in sorted(tool_sources().items()))


def static_tools(
    cache_dir: Path, log: Callable[[str], None], build: bool = True
) -> tuple[dict[str, Path], str]:
    """({guest path: built static binary}, note). Missing compilers leave a tool out (note says
    why)."""
    out: dict[str, Path] = {}
    notes: list[str] = []
    for guest, text in sorted(tool_sources().items()):
        name = guest.rsplit("/", 1)[-1]
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        binary = cache_dir / "tools" / f"{name}-{digest}"
        if binary.is_file():
            out[guest] = binary
            continue
        if not build:
            notes.append(f"{name} not built yet")
            continue
        gcc = shutil.which("gcc")
        if gcc is None:
            notes.append(f"{name} not built (no gcc; apt-get install {TOOL_PACKAGES})")
            continue
        binary.parent.mkdir(parents=True, exist_ok=True)
        # one compile per source at a time, in files of this process's own
        with entry_lock(binary, f"the guest tool {name}", log):
            if not binary.is_file():
                note = _compile(gcc, text, binary, name, log)
                if note:
                    notes.append(note)
                    continue
        out[guest] = binary
    return out, "; ".join(notes) or "all built"


def _compile(gcc: str, text: str, binary: Path, name: str, log: Callable[[str], None]) -> str:
    """Compile `text` statically into `binary`; '' when built, else why not (one line)."""
    src = binary.with_name(f".{binary.name}.{os.getpid()}.c")
    tmp = binary.with_name(f".{binary.name}.{os.getpid()}.tmp")
    src.write_text(text)
    try:
        res = subprocess.run(
            [gcc, "-static", "-O2", "-s", "-o", str(tmp), str(src)], capture_output=True, text=True
        )
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            return f"{name} not built ({last}; apt-get install {TOOL_PACKAGES})"
        tmp.rename(binary)
    finally:
        src.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    log(f"built static {name} for the guest")
    return ""
