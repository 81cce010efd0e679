"""Reading a small text file the user named (a plan, an fio job file), as untrusted data.

One place for the checks both need, with a one-line error for each: not under a kernel filesystem
(reading /proc/self/mem faults, /dev/zero never ends), a regular file, at most `limit` bytes (read bounded,
never the whole of a huge file), no NUL byte (a binary), and UTF-8 (the error names the line).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from iomatrix.errors import UserError

# Pseudo-filesystems: their "files" are kernel interfaces, not text anyone wrote.
KERNEL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def read_small_text(path: Path, *, label: str, noun: str, a_noun: str, limit: int, hint: str) -> str:
    """The UTF-8 text of `path`, or a UserError naming the problem.

    `label` names the file at the start of each message (e.g. "plan file p.toml", or "custom workload
    'file:x.fio': x.fio"), `noun`/`a_noun` what it should be ("fio job file", "an fio job file"), `hint` the fix.
    """
    real = Path(os.path.realpath(path))
    for root in KERNEL_ROOTS:
        if real == root or real.is_relative_to(root):
            raise UserError(f"{label} is under {root}, a kernel interface, not {a_noun}", hint=hint)
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):
            raise UserError(f"{label} is not a regular file", hint=hint)
        with open(real, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise UserError(f"{label}: no such {noun}", hint=hint) from None
    except OSError as err:
        raise UserError(f"{label}: cannot read it: {err.strerror}", hint="check the path and its permissions") \
            from None
    if b"\0" in data:
        raise UserError(f"{label} is a binary file, not {a_noun}", hint=hint)
    if len(data) > limit:
        raise UserError(f"{label} is larger than {limit // 1024} KiB, not {a_noun}", hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise UserError(f"{label}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})",
                        hint="save it as UTF-8 text") from None


def last_lines(text: str, lines: int) -> str:
    """The last `lines` lines of `text` (a child's log or stderr, quoted in an error or a console tail)."""
    return "\n".join(text.splitlines()[-lines:])
