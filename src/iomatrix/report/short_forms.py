"""The short forms of a VM tool's snippet that a crowded first screen prints (report/screen.py): the
options the answer sets said as a sentence with where the whole snippet is, an INI snippet's
settings one per line under their section, a shell snippet's commands with their continuations.
Never a snippet cut short (issue 70: no "…" in a snippet): what is shown is whole, or is prose that
names what the snippet sets and says where it is. Text in, text out."""

from __future__ import annotations

import re
import textwrap
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iomatrix.snippets import Snippet


def wrap_one(text: str, width: int) -> list[str]:
    """`text` wrapped as report/screen.py's `wrap` with a two-space indent (never split inside a
    word)."""
    return textwrap.wrap(
        text,
        width,
        initial_indent="  ",
        subsequent_indent="    ",
        break_on_hyphens=False,
        break_long_words=False,
    ) or ["  "]


def sets_line(target: str, settings: str, width: int) -> list[str]:
    """A crowded screen's stand-in for a snippet it has no room for: what `target`'s snippet sets
    (`settings`: "k=v,k=v", as _settings or _qemu_set give them) and where the whole snippet is:
    "proxmox: format=raw, cache=none (whole: --detail)". A list of settings, never the tool's own
    line cut short, so nothing on the screen reads as pasteable and is not."""
    listed = ", ".join(o for o in settings.split(",") if o)
    return wrap_one(f"{target}: {listed} (whole: --detail)", width)


def _short_ini(s: Snippet, target: str, width: int) -> list[str]:
    """An INI snippet's (nova.conf's) settings in one wrapped line under their section's name, and
    where the whole file part is: "nova: [libvirt] disk_cachemodes = file=none; images_type = raw
    (whole, with its comments: --detail)"; [] for any other snippet."""
    assert s.text is not None
    settings = re.findall(r"^(\w+ = \S+)$", s.text, flags=re.M)
    sections = re.findall(r"^\[\w+\]$", s.text, flags=re.M)
    if s.language != "ini" or not settings:
        return []
    said = f"{' '.join(sections)} {'; '.join(settings)}"
    return wrap_one(f"{target}: {said} (whole, with its comments: --detail)", width)


def _commands(text: str, start: str) -> list[str]:
    """The lines of `text` that begin with `start` (a command), each with the lines that continue
    it (after a line ending in a backslash: vmconfig.config.shell_word)."""
    out: list[str] = []
    going = False
    for line in text.splitlines():
        if going or line.startswith(start):
            out.append(line)
        going = (going or line.startswith(start)) and line.endswith("\\")
    return out


# The options of a QEMU command line that an answer sets (the format, the cache mode, aio, the
# device's write cache and queues): the short form keeps these and elides the rest (node names, the
# protocol and the server's address, which the configuration's label says, the image path).
_ANSWER_OPTIONS = (
    "driver",
    "cache.direct",
    "cache.no-flush",
    "aio",
    "discard",
    "detect-zeroes",
    "write-cache",
    "iothread",
    "num-queues",
)


# A VM tool's settings that an answer makes (Proxmox's drive options, nova.conf's cache modes): a
# crowded screen says only these of its snippet.
_SETTING = re.compile(
    r"\b(format|cache|aio|io|discard|detect_zeroes|iothread|disk_cachemodes)\s*=\s*\"?([^\s,\"]+)"
)


def _settings(text: str) -> str:
    """The settings an answer makes in a tool's snippet, once each, in their order: "format=raw,
    cache=none,discard=ignore,detect_zeroes=0"; "disk_cachemodes=network=writeback"."""
    return ",".join(dict.fromkeys(f"{k}={v}" for k, v in _SETTING.findall(text)))


def _qemu_set(text: str) -> str:
    """The options an answer sets of a QEMU command line, in one list, the format (the
    configuration's name says it) left out: "cache.direct=off,cache.no-flush=off,write-cache=on";
    "" when it has none."""
    words = text.replace("\\\n", "").split()
    return ",".join(
        o
        for flag, arg in pairwise(words)
        if flag in ("-blockdev", "-drive", "-device")
        for o in arg.split(",")[1:]
        if o.split("=", 1)[0] in _ANSWER_OPTIONS and o.split("=", 1)[0] != "driver"
    )


def _qemu_options(text: str) -> str:
    """What a QEMU command line's -blockdev/-drive/-device arguments set of the options an answer
    sets, said per argument (the rest of each, node names and the path, left out: the whole command
    line is in --detail): "-blockdev driver=raw, cache.direct=on, cache.no-flush=off; -device
    virtio-blk-pci, write-cache=on"; "" when the text has none of those arguments."""
    words = text.replace("\\\n", "").split()
    out = []
    for flag, arg in pairwise(words):
        if flag not in ("-blockdev", "-drive", "-device"):
            continue
        opts = arg.split(",")
        kept = [o for o in opts if o.split("=", 1)[0] in _ANSWER_OPTIONS]
        if flag == "-device":  # the device model first: it has no key
            kept = [opts[0], *kept]
        out.append(f"{flag} {', '.join(kept)}")
    return "; ".join(out)
