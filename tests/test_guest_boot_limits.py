"""A real guest that does not boot (issue 69): its wait is bounded by what its measured boots allow
(stored per image and accelerator, with a floor and a factor), says every so often how long so far
and what the console shows, and ends with the console's last lines, or, when the console stayed
empty, with "no console output in N s: the image did not start a kernel" rather than blaming the
guest agent.

The boots here are real QEMU (TCG) boots of two tiny disks a BIOS runs: one whose boot code only
halts (nothing ever reaches the console) and one whose boot code writes 'hi' to the first serial
port, then halts (a console, no agent)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from iomatrix.guest.agent import AgentTimeout, GuestAgent, wait_for_agent
from iomatrix.guest.realboot import (
    BootImage,
    boot,
    measured_boot_limit_s,
    store_boot_time,
    stored_boot_times,
)

# 16-bit code the BIOS runs at 0x7c00: `hlt; jmp $-1` (halts for good, prints nothing).
HALT = bytes([0xF4, 0xEB, 0xFD])
# `mov dx, 0x3f8` (COM1), then 'h', 'i', '\n' out to it, then halt.
SAY_HI = bytes([0xBA, 0xF8, 0x03]) + b"".join(bytes([0xB0, c, 0xEE]) for c in b"hi\n") + HALT


def _disk(path: Path, code: bytes) -> BootImage:
    with open(path, "wb") as f:
        f.truncate(1 << 20)
        f.write(code)
        f.seek(510)
        f.write(b"\x55\xaa")
    return BootImage(path, "raw")


def test_the_limit_follows_the_measured_boots_with_a_floor_and_a_factor() -> None:
    assert measured_boot_limit_s([83.0], "tcg")[0] == 332.0
    assert measured_boot_limit_s([20.0, 83.0, 40.0], "tcg")[0] == 332.0  # the longest counts
    assert measured_boot_limit_s([10.0], "tcg")[0] == 180.0  # the floor under TCG
    assert measured_boot_limit_s([10.0], "kvm")[0] == 60.0
    assert measured_boot_limit_s([], "kvm")[0] < measured_boot_limit_s([], "tcg")[0]


def test_boot_times_are_kept_per_image_and_accelerator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    image = BootImage(tmp_path / "a.qcow2")
    assert stored_boot_times(image, "tcg") == []
    for seconds in range(1, 14):
        store_boot_time(image, "tcg", float(seconds))
    store_boot_time(image, "kvm", 3.0)
    assert stored_boot_times(image, "tcg") == [float(s) for s in range(4, 14)]  # the last 10
    assert stored_boot_times(image, "kvm") == [3.0]
    assert stored_boot_times(BootImage(tmp_path / "b.qcow2"), "tcg") == []
    (tmp_path / "cache" / "guest" / "boot-times.json").write_text("[1, 2")  # damaged: none
    assert stored_boot_times(image, "tcg") == []
    store_boot_time(image, "tcg", 5.0)
    assert stored_boot_times(image, "tcg") == [5.0]


def test_waiting_says_how_long_so_far(tmp_path: Path) -> None:
    path = tmp_path / "qga.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)  # accepts and never answers
    agent = GuestAgent(path)
    said: list[float] = []
    try:
        with pytest.raises(AgentTimeout):
            wait_for_agent(
                agent,
                2.5,
                lambda: None,
                lambda: "last console lines: (none)",
                attempt_s=0.2,
                progress=said.append,
                progress_s=1.0,
            )
    finally:
        agent.close()
        server.close()
    assert len(said) >= 2 and all(0.9 < s < 2.6 for s in said), said


@pytest.mark.slow
def test_a_boot_that_never_reaches_a_kernel_says_so_and_one_with_a_console_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    silent = _disk(tmp_path / "halts.raw", HALT)
    t0 = time.monotonic()
    with (
        pytest.raises(AgentTimeout) as err,
        boot(silent, tmp_path / "run1", boot_limit_s=6, log=lines.append, progress_s=2),
    ):
        pass
    assert time.monotonic() - t0 < 60  # bounded (6 s, generous for QEMU's start on a loaded host)
    line = err.value.one_line()
    assert line.startswith(
        "no console output in 6 s (the run's time limit): the image did not start a kernel"
    ), line
    assert "agent" not in line.split(" — ")[0]
    assert lines and all(
        ln.startswith("guest booting: ") and "of at most 6 s" in ln and "console: (none)" in ln
        for ln in lines
    ), lines
    talks = _disk(tmp_path / "says-hi.raw", SAY_HI)
    with pytest.raises(AgentTimeout) as err, boot(talks, tmp_path / "run2", boot_limit_s=6):
        pass
    line = err.value.one_line()
    assert "did not answer guest-ping within 6 s (the run's time limit)" in line, line
    assert "last console lines: hi" in line
    # a failed boot is not a measured one
    assert stored_boot_times(silent, "tcg") == [] and stored_boot_times(talks, "tcg") == []
