"""What a guest reported, turned into results: the ttyS1 stream's marks and blocks, the run's
phases, and its `GuestOutcome` (one run) or `BatchOutcome` (a multi-run boot).

Pure: the process side (`guest.process`) collects what a finished QEMU left (`GuestCapture`: the
    stream's
text, the host clock at each mark's arrival, spawn and exit times, the error that ended it, the
console tail); everything here is computed from that.

The second serial port (ttyS1) carries only delimited blocks and timestamps
(`@@IOMX:MARK:<name>:<uptime>@@`, `@@IOMX:BEGIN:<name>@@ … @@IOMX:END:<name>@@`). The host stamps
every mark with its own clock as it arrives, which splits a run into QEMU start / boot / workload /
shutdown. In a multi-run boot run i's marks and blocks carry the suffix `_r<i>` (see init.sh)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field

from iomatrix.guest.job import GuestJob

_MARK = re.compile(r"@@IOMX:MARK:([A-Za-z0-9_]+):([0-9.]+)@@")
_BEGIN = re.compile(r"@@IOMX:BEGIN:([A-Za-z0-9_]+)@@")


def mark_names(line: str) -> list[str]:
    """The names of the marks in one line of the stream, in order."""
    return [m.group(1) for m in _MARK.finditer(line)]


@dataclass
class ResultStream:
    marks: dict[str, float]
    blocks: dict[str, str]


def parse_result_stream(text: str) -> ResultStream:
    """Marks and delimited blocks from the ttyS1 capture (CRs and stray text tolerated)."""
    text = text.replace("\r", "")
    marks: dict[str, float] = {}
    for m in _MARK.finditer(text):
        marks.setdefault(m.group(1), float(m.group(2)))
    blocks: dict[str, str] = {}
    for m in _BEGIN.finditer(text):
        name = m.group(1)
        end = text.find(f"@@IOMX:END:{name}@@", m.end())
        if end >= 0:
            blocks.setdefault(name, text[m.end() : end].strip("\n"))
    return ResultStream(marks, blocks)


def extract_fio_json(text: str) -> dict | None:
    """The fio JSON object in `text`, skipping anything fio printed around it (fio#731: error or log
    lines can land in --output before or after the JSON). Returns None if there is none."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    starts += [i for i in (m.start() for m in re.finditer(r"\{", text)) if i not in set(starts)]
    for i in starts:
        try:
            obj, _end = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and "jobs" in obj:
            return obj
    return None


def fs_result_from_block(text: str) -> dict | None:
    """The fs block → {"fs", "steps": {name: seconds}, "timed_s", "untimed_s"}."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    steps = {s["name"]: round(float(s["end"]) - float(s["start"]), 3) for s in raw.get("steps", [])}
    untimed = {"mkfs", "mount", "populate_extract", "populate_copy", "drop_caches"}
    return {
        "fs": raw.get("fs"),
        "steps": steps,
        "timed_s": round(sum(v for k, v in steps.items() if k not in untimed), 3),
        "untimed_s": round(sum(v for k, v in steps.items() if k in untimed), 3),
    }


# --------------------------------------------------------------------------- outcomes


@dataclass
class GuestOutcome:
    ok: bool
    fio_json: dict | None
    fs_result: dict | None
    phases: dict[str, float]  # qemu_start_s, boot_to_workload_s, workload_s, shutdown_s, wall_s
    console_tail: str
    error: str | None
    qemu_argv: list[str]
    qemu_pid: int | None
    disk_info: dict | None = None  # what the guest saw: device name, write_cache, size
    # fio's per-interval IOPS log of the measured job, when it wrote one
    iops_log: str | None = None
    marks: dict[str, float] = field(default_factory=dict)  # guest uptime at each init mark


@dataclass
class BatchOutcome:
    """A multi-run boot. `runs[i]` is None for a run that never started (the guest died before it):
    the caller retries those in a new boot."""

    runs: list[GuestOutcome | None]
    # qemu_start_s, guest_init_s, module_load_s, boot_to_workload_s, wall_s
    boot_phases: dict[str, float]
    machine: str
    error: str | None  # what ended the boot early, if anything
    console_tail: str = ""
    qemu_argv: list[str] = field(default_factory=list)


@dataclass
class GuestCapture:
    """What a finished QEMU left: ttyS1's text, the host's monotonic clock at each mark's first
    arrival, spawn and exit times, the error that ended it (QEMU's last stderr line appended), the
    console tail, its argv and pid."""

    text: str
    host_marks: dict[str, float]
    t_spawn: float
    t_exit: float
    error: str | None
    console_tail: str
    argv: list[str]
    pid: int | None


def run_phases(
    t_spawn: float, t_exit: float, host: dict[str, float], guest: dict[str, float]
) -> dict[str, float]:
    """A boot's phases (seconds) from the host clock at spawn, exit and each mark, and the guest's
    uptime at each mark."""
    ph: dict[str, float] = {"wall_s": round(t_exit - t_spawn, 3)}
    if "init" in host and "init" in guest:
        # Before the guest clock starts: process start, firmware, kernel/initrd load.
        ph["qemu_start_s"] = round(max(0.0, host["init"] - t_spawn - guest["init"]), 3)
        ph["guest_init_s"] = round(guest["init"], 3)  # guest kernel start -> /init
    if "modules" in guest and "init" in guest:
        ph["module_load_s"] = round(guest["modules"] - guest["init"], 3)
    if "workload_start" in host and "qemu_start_s" in ph:
        ph["boot_to_workload_s"] = round(host["workload_start"] - t_spawn - ph["qemu_start_s"], 3)
    if "workload_start" in guest and "workload_end" in guest:
        ph["workload_s"] = round(guest["workload_end"] - guest["workload_start"], 3)
    if "workload_end" in host and (down := shutdown_s(host["workload_end"], t_exit)) is not None:
        ph["shutdown_s"] = down
    return ph


def shutdown_s(end: float, t_exit: float) -> float | None:
    """Seconds from the workload's end to QEMU's exit, on the host clock; None when the end's mark
    was stamped at or after the exit: the reader thread got to the line late (a loaded host; seen
    in CI), so the shutdown's length is not known, and 0 would be a figure nobody measured."""
    return round(t_exit - end, 3) if end < t_exit else None


def run_outcome(
    stream: ResultStream,
    job: GuestJob,
    phases: dict[str, float],
    error: str | None,
    argv: list[str],
    pid: int | None,
    tail: str,
) -> GuestOutcome:
    """One run's outcome from its marks and blocks (names without a run suffix)."""
    if "error" in stream.blocks:
        error = (
            (error + "; " if error else "")
            + "guest: "
            + " | ".join(stream.blocks["error"].splitlines())
        )
    disk_info = None
    if "disk" in stream.blocks:
        with contextlib.suppress(ValueError):
            disk_info = json.loads(stream.blocks["disk"])
    fio_json = extract_fio_json(stream.blocks["fio"]) if "fio" in stream.blocks else None
    fs_result = fs_result_from_block(stream.blocks["fs"]) if "fs" in stream.blocks else None
    if error is None:
        if job.kind == "fio" and fio_json is None:
            error = "guest fio produced no parsable JSON"
        elif job.kind in ("fs-read", "fs-write") and fs_result is None:
            error = "guest filesystem job produced no result"
    return GuestOutcome(
        ok=error is None,
        fio_json=fio_json,
        fs_result=fs_result,
        phases=phases,
        iops_log=stream.blocks.get("iopslog"),
        console_tail=tail,
        error=error,
        qemu_argv=argv,
        qemu_pid=pid,
        disk_info=disk_info,
        marks=stream.marks,
    )


def guest_outcome(capture: GuestCapture, job: GuestJob) -> GuestOutcome:
    """The outcome of a one-run boot."""
    stream = parse_result_stream(capture.text)
    phases = run_phases(capture.t_spawn, capture.t_exit, capture.host_marks, stream.marks)
    error = capture.error
    if error is None and "done" not in stream.marks and "error" not in stream.blocks:
        error = "guest stopped without reporting completion"
    return run_outcome(
        stream=stream,
        job=job,
        phases=phases,
        error=error,
        argv=capture.argv,
        pid=capture.pid,
        tail=capture.console_tail,
    )


def run_view(stream: ResultStream, index: int) -> ResultStream:
    """Run `index`'s marks and blocks of a multi-run boot, with the `_r<index>` suffix removed."""
    sfx = f"_r{index}"
    return ResultStream(
        {k[: -len(sfx)]: v for k, v in stream.marks.items() if k.endswith(sfx)},
        {k[: -len(sfx)]: v for k, v in stream.blocks.items() if k.endswith(sfx)},
    )


def _batch_run_phases(
    index: int,
    last: bool,
    view: ResultStream,
    marks: dict[str, float],
    end: float | None,
    prev_end: float,
    t_exit: float,
    boot: dict[str, float],
) -> dict[str, float]:
    """Run `index`'s phases in a multi-run boot: its workload, its share of the boot's wall time,
    and (first run) the boot's phases or (later runs) the time since the previous run."""
    ph: dict[str, float] = {}
    if "workload_start" in view.marks and "workload_end" in view.marks:
        ph["workload_s"] = round(view.marks["workload_end"] - view.marks["workload_start"], 3)
    # The run's share of the boot's wall time: from the previous run's end (the QEMU spawn for the
    # first run, so it carries the boot) to its own end; the last run carries the shutdown.
    stop = end if end is not None else t_exit
    if last and end is not None:
        stop = t_exit
        if (down := shutdown_s(end, t_exit)) is not None:
            ph["shutdown_s"] = down
    ph["wall_s"] = round(stop - prev_end, 3)
    if index == 1:
        ph.update(
            {
                k: v
                for k, v in boot.items()
                if k in ("qemu_start_s", "guest_init_s", "module_load_s", "boot_to_workload_s")
            }
        )
    elif "run_start" in view.marks and f"run_end_r{index - 1}" in marks:
        ph["between_runs_s"] = round(view.marks["run_start"] - marks[f"run_end_r{index - 1}"], 3)
    if "run_start" in view.marks and "workload_start" in view.marks:
        ph["run_setup_s"] = round(view.marks["workload_start"] - view.marks["run_start"], 3)
    return ph


def batch_outcome(capture: GuestCapture, jobs: list[GuestJob], machine: str) -> BatchOutcome:
    """The outcome of a multi-run boot running `jobs` (run i's job is jobs[i - 1])."""
    stream = parse_result_stream(capture.text)
    host = dict(capture.host_marks)
    boot = run_phases(capture.t_spawn, capture.t_exit, host, stream.marks)
    boot.pop("workload_s", None)
    if "run_start_r1" in host and "qemu_start_s" in boot:
        boot["boot_to_workload_s"] = round(
            host["run_start_r1"] - capture.t_spawn - boot["qemu_start_s"], 3
        )
    error = capture.error
    outs: list[GuestOutcome | None] = []
    prev_end = capture.t_spawn
    for i, job in enumerate(jobs, 1):
        if f"run_start_r{i}" not in host:
            outs.append(None)
            continue
        view = run_view(stream, i)
        end = host.get(f"run_end_r{i}")
        ph = _batch_run_phases(
            index=i,
            last=i == len(jobs),
            view=view,
            marks=stream.marks,
            end=end,
            prev_end=prev_end,
            t_exit=capture.t_exit,
            boot=boot,
        )
        run_error = None if end is not None else (error or "guest stopped during this run")
        outs.append(
            run_outcome(
                stream=view,
                job=job,
                phases=ph,
                error=run_error,
                argv=capture.argv,
                pid=capture.pid,
                tail=capture.console_tail,
            )
        )
        if end is not None:
            prev_end = end
    if error is None and "done" not in stream.marks:
        error = "guest stopped without reporting completion"
    return BatchOutcome(outs, boot, machine, error, capture.console_tail, capture.argv)
