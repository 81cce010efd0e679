"""The first screen's snippets (split from report/screen.py along its seam, issue 68): a pick's
snippet whole (with --current's data step and kept line), and the short forms a crowded screen
gives it instead (a VM tool's <driver>, QEMU's options, Proxmox's commands, a one-section INI), the
whole one left to `recommend --detail`. Text in, text out."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from iomatrix.report.headline import INSTEAD, Pick
from iomatrix.report.screen_text import _first_clause, code_lines, wrap
from iomatrix.report.short_forms import (
    _commands,
    _qemu_options,
    _qemu_set,
    _settings,
    _short_ini,
    sets_line,
)

if TYPE_CHECKING:
    from iomatrix.snippets import Snippet


def _ini_section(summary: str, text: str, width: int) -> list[str]:
    """A crowded screen's form of a one-section INI snippet (ceph.conf's [client] lines): the file
    and section named in one line ("ceph.conf [client]:", the summary's head), its settings one per
    line under it as the file holds them; the whole text (the section line too) where it has more
    than one section or no summary to name it by."""
    lines = text.splitlines()
    head = summary.partition(":")[0]
    sections = [line for line in lines if line.startswith("[")]
    if not head or sections != lines[:1] or not head.endswith(lines[0]):
        return code_lines(text, "ini", width, "    ")
    if len(lines) == 2:  # one setting: on the section's line, still one setting to a line
        return wrap(f"{head}: {lines[1]}", width, "  ")
    return [*wrap(f"{head}:", width, "  "), *code_lines("\n".join(lines[1:]), "ini", width, "    ")]


def _short_snippet(p: Pick, target: str, width: int, one_line: bool = False) -> list[str]:
    """_short_form, or where a line of it is wider than `width` (a shell word cannot be broken: a
    `qm set` or `virt-install --disk` line of 100 columns at 80), the options the answer sets said
    in a line: "proxmox: format=raw, cache=none (whole: --detail)" (never the
    tool's line cut short, issue 70)."""
    short = _short_form(p, target, width, one_line)
    s = p.snippet
    if all(len(line) <= width for line in short) or s is None or s.text is None:
        return short
    if p.data_step is not None or p.kept_line:  # --current's steps are never summarised
        return short
    settings = _qemu_set(s.text) if s.tool == "qemu" else _settings(s.text)
    return sets_line(target, settings, width) if settings else short


def _short_form(p: Pick, target: str, width: int, one_line: bool = False) -> list[str]:
    """A VM tool's snippet in a line or two where the screen has no room for it whole: an XML
    <disk>'s <driver> element (what the answer sets; the element whole in --detail); other tools'
    snippets are never cut. `one_line` (a crowded screen): QEMU's options in one line, without the
    arguments' names and the format the configuration's name says."""
    s = p.snippet
    whole = _pick_snippet_lines(p, target, width, False)
    if s is not None and s.text is None and p.data_step is None and not p.kept_line:
        # no snippet for this tool: why in its first clause, and what to use instead (issue 70:
        # "not available" alone told the reader nothing); the whole reason in --detail
        why, _, instead = s.note.removeprefix(NOT_AVAILABLE).partition(INSTEAD)
        instead = f"; use {instead.split(' or ')[0]}" if instead else ""
        return wrap(f"{target}: no snippet: {_first_clause(why)}{instead}", width, "  ")
    if s is None or s.text is None or p.data_step is not None or p.kept_line:
        return whole
    if one_line and s.tool != "qemu" and (settings := _settings(s.text)):
        # a crowded screen: what the tool's snippet sets, in one line (the snippet: --detail)
        return sets_line(target, settings, width)
    if s.language != "xml":
        return _short_command(s, target, width, one_line) or _short_ini(s, target, width) or whole
    driver = next(
        (line.strip() for line in s.text.splitlines() if line.strip().startswith("<driver")), None
    )
    if driver is None:
        return whole
    # the whole <disk>: --detail, as the screen's last line says; where the element goes said, as
    # the whole form's title says it (a bare <driver> left the reader to guess)
    return wrap(f"{target} ({DRIVER_WHERE}): {driver}", width, "  ")


# How vmconfig.config._not_available begins a note: the screen says "no snippet:" itself.
NOT_AVAILABLE = "not available: "


# Where a crowded screen's <driver> short form goes (libvirt's whole form: "virsh edit VM: replace
# the <disk> element").
DRIVER_WHERE = "virsh edit VM, the <disk>'s <driver>"


def _short_command(s: Snippet, target: str, width: int, one_line: bool = False) -> list[str]:
    """A QEMU or Proxmox snippet's short form: the QEMU options the answer sets; Proxmox's storage
    entry by name and its `qm` commands whole; [] for any other tool (never cut)."""
    assert s.text is not None
    if s.language == "sh" and s.tool == "qemu" and one_line and (options := _qemu_set(s.text)):
        return sets_line(target, options, width)
    if s.language == "sh" and s.tool == "qemu" and (options := _qemu_options(s.text)):
        return wrap(f"{target}: {options} (whole command line: --detail)", width, "  ")
    commands = _commands(s.text, "qm ")
    if s.tool != "proxmox" or not commands:
        return []
    # the storage's entry by name (its options: --detail), then the commands that set what the
    # answer sets
    heads = [line for line in s.text.splitlines() if re.fullmatch(r"[a-z]+: \S+", line)]
    where = f"{', '.join(heads)} in /etc/pve/storage.cfg (--detail), then:" if heads else ""
    return [
        *wrap(f"{target}: {where}".rstrip(), width, "  "),
        *code_lines("\n".join(commands), s.language, width, "    "),
    ]


def _pick_snippet_lines(
    p: Pick, target: str, width: int, markdown: bool, notes: bool = False
) -> list[str]:
    """A pick's snippet for `target`: with --current, the data step before it and what was kept
    after it; `notes` (--detail): its note after it (what it assumes, what was not measured: a
    Proxmox nfs storage is a kernel mount, issue 49)."""
    out: list[str] = []
    if p.snippet is not None:
        if p.data_step is not None:  # the user's data first: the snippet below points at the copy
            out += _pick_code(p.data_step, DATA_STEP_TITLE, width, markdown)
        out += wrap(f"{target}: {p.snippet.title}", width, "  ")
        if p.snippet.text is None:
            out += wrap(p.snippet.note, width, "    ")
        else:
            out += _pick_code(p.snippet, "", width, markdown)
            out += wrap(p.snippet.note, width, "    ") if notes and p.snippet.note else []
        if notes and p.longer is not None and p.longer.text is not None:
            # what the shorter snippet's title promises --detail shows (virt-xml's edited <disk>)
            out += wrap(f"{target}, the same edit whole: {p.longer.title}", width, "  ")
            out += _pick_code(p.longer, "", width, markdown)
            out += wrap(p.longer.note, width, "    ") if p.longer.note else []
    if p.kept_line:
        out += wrap(p.kept_line, width, "  ")
    return out


DATA_STEP_TITLE = "first, your data (shut the VM down; the old image is kept):"


def _pick_code(s: Snippet, title: str, width: int, markdown: bool) -> list[str]:
    """A snippet's text on the first screen, under `title` (none when '')."""
    assert s.text is not None
    out = wrap(title, width, "  ") if title else []
    if markdown:
        return [*out, f"```{s.language}", *code_lines(s.text, s.language, width), "```"]
    return out + code_lines(s.text, s.language, width, "    ")
