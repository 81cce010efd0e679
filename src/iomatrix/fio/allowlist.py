"""What a custom fio job file (a ``file:PATH`` workload) may say: the workload's shape, nothing
else.

A plan and its job files are data people share and download, and iomatrix runs fio
as root. fio's job-file language can run commands (``exec_prerun``), read and write
arbitrary files and devices (``filename``, ``directory``, ``opendir``, ``include``,
``read_iolog`` + ``replay_redirect``, every ``write_*_log``), and change what the
report means (``group_reporting``, ``unified_rw_reporting``, ``continue_on_error``).
So the file is parsed here against an **allowlist** — an option not listed is
refused, whatever it is — and fio is handed a canonical re-rendering of what was
validated, never the file itself: whatever fio's own parser would make of an odd
line, it never sees one.

The families allowed, and why each is safe and belongs to a workload:

* **direction and mix** (``rw``/``readwrite``, ``rwmixread``/``rwmixwrite``,
  ``rw_sequencer``, ``percentage_random``): what the application does. Trims are
  not offered: they discard data rather than measure a disk.
* **block sizes** (``bs``, ``bsrange``, ``bssplit``, ``blocksize_unaligned``,
  ``blockalign``, ``bs_is_seq_rand``): request sizes, pure numbers.
* **queueing and concurrency** (``iodepth``, ``iodepth_batch*``, ``iodepth_low``,
  ``numjobs`` (bounded), ``thread``): how many requests are in flight. ``thread``
  may only be switched on: every job runs as a thread of the one fio process
  iomatrix starts (fio.jobs.THREAD_LINE), so a kill of iomatrix stops all of it.
* **pacing** (``rate*``, ``thinktime*``): an application that does not saturate
  the disk.
* **randomness** (``norandommap``, ``softrandommap``, ``random_distribution``,
  ``randrepeat``, ``randseed``, ``random_generator``): which offsets are hit,
  always inside the region the cell gives.
* **durability requests** (``fsync``, ``fdatasync``, ``sync_file_range``,
  ``write_barrier``): what a database asks of the disk; they only touch the
  cell's own target.
* **amount and duration** (``io_size``/``io_limit``, ``number_ios``, ``loops``,
  ``runtime``/``timeout``, ``time_based``, ``ramp_time``): how long the job goes
  on, up to the plan's ``runtime``: fio.jobs.bounded_custom_text caps each job's
  runtime, ramp and thinktime at it when the job is rendered. The *region* (``size``, ``offset``,
  ``filename``) is the cell's and is refused.
* **data content** (``zero_buffers``, ``refill_buffers``, ``scramble_buffers``,
  ``buffer_compress_*``, ``dedupe_percentage``, ``buffer_pattern``): what is
  written, for compressing / deduplicating storage.
* **verification** (``verify``, ``do_verify``, ``verify_pattern``,
  ``verify_interval``, ``verify_offset``, ``verify_fatal``, ``verify_backlog*``):
  reads back the cell's own target. ``verify_state_*`` and ``verify_dump`` write
  files and are refused.
* **job structure and labels** (``name``, ``description``, ``stonewall``/
  ``wait_for_previous``, ``new_group``, ``file_service_type``): ordering and
  names, no side effects.

Options the **cell** sets (target, engine, O_DIRECT, region, flush semantics of the
cache mode, reporting) are refused with a message saying so, so that a job file
cannot silently measure something other than the cell it is filed under.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from iomatrix.errors import UserError

MAX_JOB_FILE_BYTES = 64 * 1024
MAX_NUMJOBS = 64
MAX_IODEPTH = 4096

# Section names fio reserves or iomatrix uses itself ("prefill" is excluded from the measured jobs).
RESERVED_SECTIONS = {"prefill"}

# Options the matrix cell sets; named separately so the message can say why.
CELL_OPTIONS = {
    "filename": "the backing of the cell",
    "directory": "the backing of the cell",
    "filename_format": "the backing of the cell",
    "nrfiles": "the backing of the cell",
    "ioengine": "the cell's aio mode",
    "direct": "the cell's cache mode",
    "buffered": "the cell's cache mode",
    "sync": "the cell's cache mode",
    "o_direct": "the cell's cache mode",
    "end_fsync": "the cell's cache mode",
    "fsync_on_close": "the cell's cache mode",
    "invalidate": "iomatrix (page-cache hygiene)",
    "size": "the plan's size",
    "filesize": "the plan's size",
    "offset": "the plan's size (the run's region)",
    "offset_increment": "the plan's size (the run's region)",
    "group_reporting": "iomatrix (one report per job)",
    "unified_rw_reporting": "iomatrix (read and write reported apart)",
}

_NUM = r"[0-9][0-9A-Za-z.]*"  # fio numbers carry unit suffixes: 4k, 1m, 500ms, 10%


def _regex(pattern: str, what: str) -> Callable[[str], str | None]:
    rx = re.compile(pattern)

    def check(value: str) -> str | None:
        return None if rx.fullmatch(value) else f"expected {what}"

    return check


def _int_max(limit: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not re.fullmatch(r"[0-9]{1,9}", value) or not 1 <= int(value) <= limit:
            return f"expected a whole number from 1 to {limit}"
        return None

    return check


_number = _regex(rf"{_NUM}", "a number, e.g. 4k or 500ms")
_numbers = _regex(rf"{_NUM}(?:[,:\-]{_NUM}){{0,8}}", "numbers, e.g. 4k or 4k,64k or 4k-64k")
_flag = _regex(r"(?:[01]|true|false|yes|no|on|off)?", "0 or 1 (or nothing)")
_FLAG_OFF = ("0", "false", "no", "off")


def _thread_on(value: str) -> str | None:
    """`thread` may be stated, never switched off: a forked job process would outlive a kill of
    iomatrix."""
    if value.lower() in _FLAG_OFF:
        return (
            "thread=1: iomatrix runs every job as a thread of one fio process, so that a "
            "killed sweep "
            "stops all of its I/O; remove the line"
        )
    return _flag(value)


_word = _regex(r"[A-Za-z0-9_]{1,32}", "a keyword")
_word_arg = _regex(r"[A-Za-z0-9_]{1,32}(?::[0-9A-Za-z.,:/%]{0,64})?", "a keyword, e.g. zipf:1.2")
_bssplit = _regex(r"[0-9A-Za-z.,:/%]{1,512}", "a block-size split, e.g. 4k/50:64k/50")
_rw = _regex(
    r"(?:read|write|randread|randwrite|rw|readwrite|randrw)(?::[0-9]{1,6})?",
    "read, write, randread, randwrite, rw, readwrite or randrw (trims are not offered)",
)
_label = _regex(r"[A-Za-z0-9_.\- ]{0,64}", "letters, digits, '_', '.', '-' (at most 64)")
_text = _regex(r"[A-Za-z0-9_.,:/%+()\- ]{0,200}", "plain text (no quotes, '$', '#' or ';')")
_pattern = _regex(
    r"(?:0x[0-9A-Fa-f]{1,64}|[0-9]{1,10}|\"[A-Za-z0-9_.,:/%+\- ]{0,64}\")",
    'a pattern such as 0xdeadbeef or "text"',
)

# option -> check of its value (None if fine, else what was expected).
ALLOWED: dict[str, Callable[[str], str | None]] = {
    # direction and mix
    "rw": _rw,
    "readwrite": _rw,
    "rwmixread": _number,
    "rwmixwrite": _number,
    "rw_sequencer": _word_arg,
    "percentage_random": _numbers,
    # block sizes
    "bs": _numbers,
    "blocksize": _numbers,
    "bsrange": _numbers,
    "blocksize_range": _numbers,
    "bssplit": _bssplit,
    "blocksize_unaligned": _flag,
    "bs_unaligned": _flag,
    "blockalign": _numbers,
    "ba": _numbers,
    "bs_is_seq_rand": _flag,
    # queueing and concurrency
    "iodepth": _int_max(MAX_IODEPTH),
    "iodepth_batch": _number,
    "iodepth_batch_submit": _number,
    "iodepth_batch_complete": _number,
    "iodepth_batch_complete_min": _number,
    "iodepth_batch_complete_max": _number,
    "iodepth_low": _number,
    "numjobs": _int_max(MAX_NUMJOBS),
    "thread": _thread_on,
    # pacing
    "rate": _numbers,
    "rate_min": _numbers,
    "rate_iops": _numbers,
    "rate_iops_min": _numbers,
    "rate_process": _word,
    "rate_ignore_thinktime": _flag,
    "rate_cycle": _number,
    "thinktime": _number,
    "thinktime_spin": _number,
    "thinktime_blocks": _number,
    "thinktime_blocks_type": _word,
    "thinktime_iotime": _number,
    # randomness
    "norandommap": _flag,
    "softrandommap": _flag,
    "random_distribution": _word_arg,
    "randrepeat": _flag,
    "randseed": _number,
    "random_generator": _word,
    # durability requests
    "fsync": _number,
    "fdatasync": _number,
    "sync_file_range": _word_arg,
    "write_barrier": _number,
    # amount and duration
    "io_size": _number,
    "io_limit": _number,
    "number_ios": _number,
    "loops": _number,
    "runtime": _number,
    "timeout": _number,
    "time_based": _flag,
    "ramp_time": _number,
    # data content
    "zero_buffers": _flag,
    "refill_buffers": _flag,
    "scramble_buffers": _flag,
    "buffer_compress_percentage": _number,
    "buffer_compress_chunk": _number,
    "dedupe_percentage": _number,
    "buffer_pattern": _pattern,
    # verification of the cell's own target
    "verify": _word,
    "do_verify": _flag,
    "verify_pattern": _pattern,
    "verify_interval": _number,
    "verify_offset": _number,
    "verify_fatal": _flag,
    "verify_backlog": _number,
    "verify_backlog_batch": _number,
    # job structure and labels
    "name": _label,
    "description": _text,
    "stonewall": _flag,
    "wait_for_previous": _flag,
    "new_group": _flag,
    "file_service_type": _word_arg,
}

_SECTION = re.compile(r"\[([^\]]*)\]")
_SECTION_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_OPTION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(.*))?")
_READS = ("read", "randread", "rw", "readwrite", "randrw")
_WRITES = ("write", "randwrite", "rw", "readwrite", "randrw")


@dataclass(frozen=True)
class JobFile:
    """A validated job file: `text` is what fio is given (canonical, one `key=value` a line)."""

    text: str
    jobs: tuple[str, ...]
    reads: bool
    writes: bool


def _refuse(where: str, lineno: int, problem: str, fix: str) -> UserError:
    return UserError(f"{where}:{lineno}: {problem}", hint=fix)


def validate_job_text(text: str, where: str) -> JobFile:
    """Check every line of a job file against the allowlist; return its canonical form.

    `where` names the file in messages. Raises UserError naming the file, the line, the
    option and the fix.
    """
    out: list[str] = []
    jobs: list[str] = []
    section: str | None = None
    directions: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        _refuse_unsafe_text(line, where, lineno)
        if line.startswith("["):
            section = _section_name(line, where, lineno)
            if section != "global":
                jobs.append(section)
            out += ["", f"[{section}]"]
            continue
        key, value, has_value = _allowed_option(line, where, lineno)
        if section is None:
            raise _refuse(
                where,
                lineno,
                f"option '{key[:40]}' comes before any [section]",
                "put it under [global] or a [job] section",
            )
        if key in ("rw", "readwrite"):
            directions.append(value.split(":", 1)[0])
        out.append(f"{key}={value}" if has_value else key)
    if not jobs:
        raise UserError(f"{where}: no fio job section found", hint="add a section such as [myjob]")
    if not directions:
        directions = ["read"]  # fio's default
    return JobFile(
        text="\n".join(out).lstrip("\n") + "\n",
        jobs=tuple(jobs),
        reads=any(d in _READS for d in directions),
        writes=any(d in _WRITES for d in directions),
    )


def _refuse_unsafe_text(line: str, where: str, lineno: int) -> None:
    """A control character, or a '$' fio would expand."""
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in line):
        raise _refuse(
            where, lineno, "control character in the line", "save the job file as plain text"
        )
    if "$" in line:
        raise _refuse(
            where,
            lineno,
            "'$' expansion (environment variables, $pagesize …) is not allowed "
            "in a job file iomatrix runs",
            "write the value itself",
        )


def _section_name(line: str, where: str, lineno: int) -> str:
    """The name of a [section] line, refused when malformed or reserved by iomatrix."""
    m = _SECTION.fullmatch(line)
    name = m.group(1).strip() if m else ""
    if not m or not _SECTION_NAME.fullmatch(name):
        raise _refuse(
            where,
            lineno,
            "bad section header",
            "use [name] with letters, digits, '_', '.', '-'",
        )
    if name.lower() in RESERVED_SECTIONS:
        raise _refuse(
            where,
            lineno,
            f"section name '{name}' is reserved by iomatrix",
            "rename the job",
        )
    return name


def _allowed_option(line: str, where: str, lineno: int) -> tuple[str, str, bool]:
    """(key, value, whether a value was written) of an option line the allowlist accepts; refused
    otherwise, with the reason and the fix."""
    if line.startswith("include"):  # fio's own test: any line starting with the word
        raise _refuse(where, lineno, "'include' is not allowed", "put the options in this file")
    m = _OPTION.fullmatch(line)
    if m is None:
        raise _refuse(
            where,
            lineno,
            "cannot read this line: it is neither key=value nor a [section]",
            "write one option a line as key=value, or a [section]",
        )
    key, value = m.group(1), (m.group(2) or "").strip()
    if key in CELL_OPTIONS:
        raise _refuse(
            where,
            lineno,
            f"option '{key}' is set by iomatrix from {CELL_OPTIONS[key]}",
            f"remove '{key}'; the matrix cell decides it",
        )
    check = ALLOWED.get(key)
    if check is None:
        raise _refuse(
            where,
            lineno,
            f"option '{key[:40]}' is not allowed in a custom job file",
            "only workload-shape options are (rw, bs, bssplit, iodepth, numjobs, "
            "rwmix*, rate*, "
            "thinktime*, fsync, …; see docs/backings.md); paths, devices, commands, logs, "
            "includes and engines are refused",
        )
    problem = check(value)
    if problem is not None:
        raise _refuse(where, lineno, f"option '{key[:40]}' has a bad value", problem)
    return key, value, m.group(2) is not None
