"""Reading a small text file the user named (a plan, an fio job file), as untrusted data.

One place for the checks both need, with a one-line error for each: not under a kernel filesystem
(reading /proc/self/mem faults, /dev/zero never ends), a regular file, at most `limit` bytes (read
bounded, never the whole of a huge file), no NUL byte (a binary), and UTF-8 (the error names the
line)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from iomatrix.errors import UserError

# Pseudo-filesystems: their "files" are kernel interfaces, not text anyone wrote.
KERNEL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def read_small_text(
    path: Path, *, label: str, noun: str, a_noun: str, limit: int, hint: str
) -> str:
    """The UTF-8 text of `path`, or a UserError naming the problem.

    `label` names the file at the start of each message (e.g. "plan file p.toml", or "custom
    workload 'file:x.fio': x.fio"), `noun`/`a_noun` what it should be ("fio job file", "an fio job
    file"), `hint` the fix."""
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
        raise UserError(
            f"{label}: cannot read it: {err.strerror}", hint="check the path and its permissions"
        ) from None
    if b"\0" in data:
        raise UserError(f"{label} is a binary file, not {a_noun}", hint=hint)
    if len(data) > limit:
        raise UserError(f"{label} is larger than {limit // 1024} KiB, not {a_noun}", hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(
            f"{label}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})",
            hint="save it as UTF-8 text",
        ) from None


def last_lines(text: str, lines: int) -> str:
    """The last `lines` lines of `text` (a child's log or stderr, quoted in an error or a console
    tail)."""
    return "\n".join(text.splitlines()[-lines:])


# Characters that change what a terminal shows instead of being shown: C0 controls but newline and
# tab (ESC starts the sequences that clear the screen or set the window title), DEL, C1 controls
# (0x9b is a one-byte CSI), and the Unicode direction overrides and isolates that make text read
# backwards (U+202E) — the "Trojan source" set.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every character that would act on a terminal written as a visible escape (ESC as `\\x1b`,
    U+202E as `\\u202e`); newline and tab are kept. Text from plans and databases goes through this before it is
    printed, so a plan's description cannot clear the screen, retitle the window or reverse a
    line."""  # noqa: E501
    # the common case: nothing to do (isprintable is False for \n and \t too)
    if text.isprintable():
        return text
    return "".join(
        _visible(c) if (c < " " and c not in "\n\t") or "\x7f" <= c <= "\x9f" or c in _BIDI else c
        for c in text
    )


def escape_controls_in(value: Any) -> Any:
    """`escape_controls` applied to every string inside `value` (dict keys and values, list and
    tuple items)."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {escape_controls_in(k): escape_controls_in(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(escape_controls_in(v) for v in value)
    return value
