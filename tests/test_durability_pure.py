"""The durability record verifier and verdict rule (pure, fast)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.durability.records import RECORD_BYTES, check_stream, classify, make_record
from iomatrix.durability.verdict import POWER_LOSS, QEMU_CRASH, config_verdict, situation_verdict

NONCE = 1234567


def region(
    n_slots: int,
    present: set[int],
    stream: int = 1,
    torn: set[int] = frozenset(),
    nonce: int = NONCE,
) -> bytes:
    out = bytearray(n_slots * RECORD_BYTES)
    for seq in present | set(torn):
        rec = bytearray(make_record(nonce, stream, seq))
        if seq in torn:
            rec[2048:] = bytes(RECORD_BYTES - 2048)  # second half never reached the disk
        out[seq * RECORD_BYTES : (seq + 1) * RECORD_BYTES] = rec
    return bytes(out)


def test_classify_intact_torn_missing() -> None:
    rec = make_record(NONCE, 3, 7)
    assert classify(rec, NONCE, 3, 7) == "intact"
    assert classify(rec, NONCE + 1, 3, 7) == "missing"  # another trial's record
    assert classify(rec, NONCE, 4, 7) == "missing"  # another stream's
    assert classify(rec, NONCE, 3, 8) == "missing"  # in the wrong slot
    assert classify(bytes(RECORD_BYTES), NONCE, 3, 7) == "missing"
    damaged = bytearray(rec)
    damaged[100] ^= 1
    assert classify(bytes(damaged), NONCE, 3, 7) == "torn"
    assert classify(rec[:100], NONCE, 3, 7) == "missing"


def test_all_acknowledged_present() -> None:
    c = check_stream(region(16, set(range(10))), NONCE, 1, acked=8, written=10)
    assert (c.acked_lost, c.unacked_lost, c.unacked_kept) == (0, 0, 2)


def test_lost_acknowledged_and_unacknowledged() -> None:
    c = check_stream(region(16, {0, 1, 2, 5}), NONCE, 1, acked=8, written=12)
    assert c.acked_lost == 4 and c.lost_seqs == [3, 4, 6, 7] and c.first_acked_lost == 3
    assert c.unacked_lost == 4 and c.unacked_kept == 0


def test_torn_acknowledged_record_is_lost() -> None:
    c = check_stream(region(8, {0, 1, 3}, torn={2}), NONCE, 1, acked=4, written=4)
    assert c.acked_lost == 1 and c.torn == 1 and c.lost_seqs == [2]


def test_unreported_write_found_counts_as_kept_never_lost() -> None:
    # the "written" line of group 3 never left the guest, yet its records reached the disk
    c = check_stream(region(16, set(range(12))), NONCE, 1, acked=8, written=8)
    assert (c.acked_lost, c.unacked_lost, c.unacked_kept) == (0, 0, 4)


def test_short_file_loses_the_tail() -> None:
    data = region(16, set(range(16)))[: 5 * RECORD_BYTES]  # a file whose size update was lost
    c = check_stream(data, NONCE, 2, acked=8, written=8, capacity=16)
    assert c.acked_lost == 8  # stream 2 ≠ the records' stream 1: nothing matches
    c = check_stream(
        region(16, set(range(16)), stream=2)[: 5 * RECORD_BYTES], NONCE, 2, acked=8, written=8
    )
    assert c.acked_lost == 3 and c.first_acked_lost == 5


def test_writer_records_verify(tmp_path: Path) -> None:
    """The guest writer's own records (compiled on the host) pass the verifier: same layout, same
    CRC."""
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    src = Path(__file__).resolve().parents[1] / "src/iomatrix/guest/durwriter.c"
    exe = tmp_path / "w"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    out = tmp_path / "out"
    out.touch()
    subprocess.run(
        [str(exe), str(NONCE), "2", "6", str(out), f"file:{tmp_path / 'log'}:5"], check=True
    )
    lines = out.read_text().split()
    assert lines[-2:] == ["@@IOMX:DUR:ACK:2@@", "@@IOMX:DUR:END:6@@"]
    c = check_stream((tmp_path / "log").read_bytes(), NONCE, 5, acked=6, written=6)
    assert c.acked_lost == 0 and c.torn == 0


# --------------------------------------------------------------------------- verdict rule


def test_kept_in_every_cut_is_safe_when_documented_safe() -> None:
    v = situation_verdict(POWER_LOSS, [0] * 20, "none")
    assert (
        v.safe
        and v.text == "power loss: acknowledged writes kept in 20/20 cuts"
        and v.disagreement is None
    )


def test_any_loss_is_never_safe() -> None:
    for lost in ([0] * 19 + [1], [3, 0, 7]):
        v = situation_verdict(POWER_LOSS, lost, "writethrough")
        assert not v.safe
        assert "LOST acknowledged writes" in v.text
        assert v.disagreement and "DISAGREES" in v.disagreement
    v = situation_verdict(POWER_LOSS, [3, 0, 7], "unsafe")
    assert v.text == (
        "power loss: LOST acknowledged writes in 2/3 cuts (up to 7 records); flushes dropped below "
        "QEMU as on a real host, the amount lost measured"
    )
    assert v.disagreement is None  # documented: unsafe drops flushes


def test_documented_unsafe_is_not_promoted_to_safe() -> None:
    v = situation_verdict(POWER_LOSS, [0, 0, 0], "writeback", "eatmydata")
    assert not v.safe and v.measured_keeps and "not called safe" in (v.disagreement or "")


def test_qemu_crash_documented_to_keep_for_every_mode() -> None:
    for cache in ("none", "writeback", "writethrough", "directsync", "unsafe"):
        assert situation_verdict(QEMU_CRASH, [0, 0], cache).safe


def test_no_trials_is_not_safe() -> None:
    v = situation_verdict(POWER_LOSS, [], "none")
    assert not v.safe and v.text == "power loss: no completed trial" and v.disagreement is None


def test_config_verdict_lines() -> None:
    cv = config_verdict(
        {"power_loss.acked_lost": [4, 4], "qemu_crash.acked_lost": [0, 0], "fs.clean": [1, 0]},
        "unsafe",
    )
    assert cv.lines() == [
        "power loss: LOST acknowledged writes in 2/2 cuts (up to 4 records); flushes dropped "
        "below QEMU as on a real host, the amount lost measured",
        "QEMU crash: acknowledged writes kept in 2/2 cuts",
        "guest filesystem: NOT clean after 1/2 cuts (after journal replay)",
    ]
