"""/proc/self/mountinfo, parsed once for every module that needs it."""

from __future__ import annotations

import os
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def parse_mountinfo(text: str | None = None) -> list[dict[str, str]]:
    """Entries of /proc/self/mountinfo: devnum "M:m", mountpoint, fstype, source, options."""
    if text is None:
        text = MOUNTINFO.read_text()
    entries = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if len(f) < 6 or len(r) < 2:
            continue
        entries.append(
            {
                "devnum": f[2],
                "root": unescape(f[3]),
                "mountpoint": unescape(f[4]),
                "mount_options": f[5],
                "fstype": r[0],
                "source": unescape(r[1]),
                "super_options": r[2] if len(r) > 2 else "",
            }
        )
    return entries


def unescape(s: str) -> str:
    """Undo mountinfo's octal escapes (\\ooo) of space, tab, newline and backslash."""
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def innermost_mount(
    path: str | Path, entries: list[dict[str, str]] | None = None
) -> dict[str, str] | None:
    """The mountinfo entry of the filesystem holding `path`: the innermost mount point containing
    its real path, and of several mounts on that point the last mounted (the one visible)."""
    real = os.path.realpath(path)
    best: dict[str, str] | None = None
    for m in parse_mountinfo() if entries is None else entries:
        mp = m["mountpoint"]
        inside = real == mp or real.startswith(mp.rstrip("/") + "/")
        if inside and (best is None or len(mp) >= len(best["mountpoint"])):
            best = m
    return best


def mounts_of_devnum(
    devnum: str, entries: list[dict[str, str]] | None = None
) -> list[dict[str, str]]:
    """The mountinfo entries whose st_dev is `devnum` ("M:m"), in mount order."""
    return [m for m in (parse_mountinfo() if entries is None else entries) if m["devnum"] == devnum]
