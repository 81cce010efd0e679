"""The block-layer tier's per-run overhead cuts (issue 10): the socket fio connects to before the
daemon runs, the image deleted during the next run's start-up, and the phases recorded with every
run. Real sockets, real qemu-storage-daemon and fio; no assertion on how long anything takes, only
on what happens in which order and what is left behind."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from iomatrix import children
from iomatrix.fio.jobs import JobShape
from iomatrix.matrix import Cell
from iomatrix.plan.model import Plan
from iomatrix.tiers import blocklayer
from iomatrix.tiers.base import RunOptions, RunRequest, Target
from iomatrix.tiers.blocklayer import SOCKET_NAME, BlockLayerTier, listening_socket
from iomatrix.workloads import resolve
from tests.conftest import needs

needs_qsd = needs("qemu-storage-daemon")


def _plan(**kw: object) -> Plan:
    base: dict[str, object] = {
        "name": "t",
        "tier": ["blocklayer"],
        "size": "16M",
        "image_size": "64M",
        "null_ceiling": False,
    }
    return Plan.model_validate({**base, **kw})


def _cell(cache: str) -> Cell:
    return Cell.of(
        tier="blocklayer",
        format="qcow2",
        preallocation="off",
        cache=cache,
        aio="threads",
        bus="-",
        backing="dir",
        modifier="none",
    )


def test_listening_socket_binds_under_a_path_longer_than_sun_path(tmp_path: Path) -> None:
    """The run directory may be deeper than the 108 bytes a UNIX socket path holds; a client
    connecting by the path relative to it (as fio does, from the run directory) reaches the
    socket."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep / SOCKET_NAME)) > 108
    server = listening_socket(deep)
    try:
        assert (deep / SOCKET_NAME).is_socket()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = os.open(deep, os.O_PATH)
        try:
            # Connecting needs no accept(): the listen queue takes it (fio's handshake then waits
            # for the daemon).
            client.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        finally:
            os.close(fd)
        conn, _ = server.accept()
        client.sendall(b"x")
        assert conn.recv(1) == b"x"
        conn.close()
        client.close()
    finally:
        server.close()


def test_deletion_is_deferred_except_under_unsafe_or_without_room(tmp_path: Path) -> None:
    tier = BlockLayerTier(_plan(), RunOptions(workdir=tmp_path / "work"))
    image = tmp_path / "img.qcow2"
    image.write_bytes(b"")
    assert tier._can_defer(_cell("none"), image)
    # fio's final flush reached the file: nothing dirty
    assert tier._can_defer(_cell("writeback"), image)
    # unsafe drops that flush: the file may hold dirty pages that only deleting it now keeps
    # unwritten.
    assert not tier._can_defer(_cell("unsafe"), image)
    # A backing without room for two more images of the plan's size deletes at once.
    huge = BlockLayerTier(
        _plan(image_size="1000T", size="16M"), RunOptions(workdir=tmp_path / "work")
    )
    assert not huge._can_defer(_cell("none"), image)


def _run(tier: BlockLayerTier, tmp_path: Path, cache: str, name: str) -> blocklayer.RunOutcome:
    req = RunRequest(
        cell=_cell(cache),
        workload=resolve("rand-write-4k", None),
        target=Target("dir", tmp_path),
        shape=JobShape(size_bytes=16 << 20, runtime_s=1.0),
        run_dir=tmp_path / "work" / name,
        timeout_s=120,
    )
    return tier.run(req)


def _ledger_targets(work: Path) -> list[str]:
    return [
        e["target"]
        for e in json.loads((work / ".iomatrix" / "leftovers.json").read_text())["entries"]
    ]


@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_earlier_images_are_deleted_only_before_a_daemon_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1's image waits (renamed, in the ledger) for run 2's start-up, which truncates it while
    fio starts up and stops before starting its daemon; what is left carries over, and close()
    deletes it. Each slice is made slow (a real truncation after a pause) so that the deletion
    cannot end within the window and a truncation while the daemon serves could not go unseen."""
    events: list[tuple[str, float]] = []
    real_truncate, real_spawn = os.ftruncate, children.spawn

    def slow_truncate(fd: int, length: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)
        real_truncate(fd, length)
        events.append(("truncate", time.monotonic()))

    def spawn(argv: list[str], **kw: object) -> object:
        events.append(("spawn " + Path(argv[0]).name, time.monotonic()))
        return real_spawn(argv, **kw)

    monkeypatch.setattr(blocklayer.os, "ftruncate", slow_truncate)
    monkeypatch.setattr(blocklayer.children, "spawn", spawn)
    work = tmp_path / "work"
    tier = BlockLayerTier(_plan(), RunOptions(workdir=work))
    tier.open()
    try:
        first = _run(tier, tmp_path, "none", "r1")
        assert first.ok, first.error
        assert first.meta["image_removal"].startswith("deferred")
        (kept,) = tmp_path.glob("iomatrix-blk-*")  # renamed out of the way of the next run's image
        size_before = kept.stat().st_size
        assert kept.name.endswith(".removing-1") and str(kept) in _ledger_targets(work)
        events.clear()
        second = _run(tier, tmp_path, "none", "r2")
        returned = time.monotonic()
        assert second.ok, second.error
        (daemon_at,) = [t for what, t in events if what == "spawn qemu-storage-daemon"]
        truncations = [t for what, t in events if what == "truncate"]
        assert all(t < daemon_at for t in truncations if t < returned)
        # Not all of it fitted in the window (≥ 32 slices of 50 ms): the rest waits, in the ledger,
        # for later.
        assert (
            kept.exists()
            and kept.stat().st_size <= size_before
            and str(kept) in _ledger_targets(work)
        )
        # run 1's remainder, when run 2's daemon started
        assert second.meta["deletion_backlog_files"] == 1
        assert len(list(tmp_path.glob("iomatrix-blk-*"))) == 2  # and now run 2's own image too
        for key in (
            "setup_s",
            "image_s",
            "deletion_wait_s",
            "daemon_spawn_s",
            "fio_s",
            "workload_s",
            "fio_overhead_s",
            "daemon_stop_s",
            "image_remove_s",
            "wall_s",
            "overhead_s",
        ):
            assert key in second.phases, key
        assert second.meta["deletion_work_s"] > 0
        assert second.meta["fio_argv"][1] == blocklayer.FIO_CLOCKSOURCE
        assert "addr.type=fd" in " ".join(second.meta["daemon_argv"])
    finally:
        tier.close()
    assert list(tmp_path.glob("iomatrix-blk-*")) == []
    assert _ledger_targets(work) == []


def test_trash_stops_between_slices_and_empties(tmp_path: Path) -> None:
    """The deleting loop checks between slices whether to stop; the thread does nothing after stop()
    returns; empty() deletes the rest."""
    files = []
    for i in range(3):
        f = tmp_path / f"img-{i}"
        with open(f, "wb") as out:
            out.write(b"x" * 4096)  # allocated data at the start: the last slice to go
            out.truncate(8 * blocklayer.TRASH_STEP_START_BYTES)
        files.append(f)
    trash = blocklayer.Trash()
    for f in files:
        trash.add(f)
    trash.work(lambda: True)  # told to stop before the first slice
    size = 8 * blocklayer.TRASH_STEP_START_BYTES
    assert all(f.stat().st_size == size for f in files) and trash.gone == []
    trash.work(lambda: trash.files == files[1:])  # exactly the first file, then stop
    assert not files[0].exists() and trash.gone == [files[0]] and trash.files == files[1:]
    assert trash.allocated_bytes() > 0
    trash.start()
    trash.stop()
    state = [(f.exists() and f.stat().st_size) for f in files]
    time.sleep(0.2)
    # nothing happens after stop()
    assert [(f.exists() and f.stat().st_size) for f in files] == state
    trash.empty()
    assert not any(f.exists() for f in files) and trash.files == [] and trash.gone == files
    assert trash.allocated_bytes() == 0


def test_the_slice_grows_while_cheap_and_shrinks_when_dear() -> None:
    """The worked example of Trash.next_step, and its bounds."""
    mib = 1 << 20
    nxt = blocklayer.Trash.next_step
    assert nxt(512 << 10, 0.003) == mib  # 3 ms < 5 ms: doubled
    assert nxt(4 * mib, 0.280) == 2 * mib  # 280 ms > 20 ms: halved
    assert nxt(4 * mib, 0.010) == 4 * mib  # between a quarter and the whole of 20 ms: kept
    assert nxt(blocklayer.TRASH_STEP_MAX_BYTES, 0.0) == blocklayer.TRASH_STEP_MAX_BYTES
    assert nxt(blocklayer.TRASH_STEP_MIN_BYTES, 1.0) == blocklayer.TRASH_STEP_MIN_BYTES


class _SliceClock:
    """A fake clock whose every truncation lasts `slice_s` (the clock is read before and after
    each): the trash's slices adapt to it, not to this host's disk."""

    def __init__(self, slice_s: float) -> None:
        self.now = 0.0
        self.slice_s = slice_s
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 1:  # the reading after a slice: it took slice_s
            self.now += self.slice_s
        return self.now


def _truncations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_s: float) -> list[int]:
    """The sizes a 64 MiB file was truncated to when every slice took `slice_s` (fake clock)."""
    sizes: list[int] = []
    real = os.ftruncate

    def spy(fd: int, size: int) -> None:
        sizes.append(size)
        real(fd, size)

    f = tmp_path / "img"
    with open(f, "wb") as out:
        out.truncate(64 << 20)  # sparse: the sizes are what is checked, not the time
    trash = blocklayer.Trash(clock=_SliceClock(slice_s))
    trash.add(f)
    monkeypatch.setattr(blocklayer.os, "ftruncate", spy)
    trash.work(lambda: False)
    assert not f.exists() and trash.gone == [f]
    return sizes


def test_trash_slices_grow_on_a_cheap_backing_and_stay_small_on_a_dear_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cheap slices (1 ms) double from 512 KiB up to the largest; dear ones (100 ms) halve down to
    the smallest: the stop waits at most about one slice either way."""
    mib = 1 << 20
    cheap = _truncations(tmp_path, monkeypatch, 0.001)
    steps = [a - b for a, b in zip([64 * mib, *cheap], cheap, strict=False)]
    assert steps[:6] == [mib // 2, mib, 2 * mib, 4 * mib, 8 * mib, 16 * mib]
    assert max(steps) == blocklayer.TRASH_STEP_MAX_BYTES and cheap[-1] == 0
    assert len(cheap) < 64 * mib // blocklayer.TRASH_STEP_START_BYTES // 10
    dear = _truncations(tmp_path, monkeypatch, 0.1)
    steps = [a - b for a, b in zip([64 * mib, *dear], dear, strict=False)]
    assert steps[:4] == [mib // 2, mib // 4, mib // 8, blocklayer.TRASH_STEP_MIN_BYTES]
    assert set(steps[3:]) == {blocklayer.TRASH_STEP_MIN_BYTES}


@pytest.mark.slow
@needs("fio")
@needs_qsd
def test_unsafe_image_is_deleted_at_the_end_of_its_run(tmp_path: Path) -> None:
    tier = BlockLayerTier(_plan(), RunOptions(workdir=tmp_path / "work"))
    tier.open()
    try:
        out = _run(tier, tmp_path, "unsafe", "r1")
        assert out.ok, out.error
        assert out.meta["image_removal"] == "at the end of the run"
        assert list(tmp_path.glob("iomatrix-blk-*")) == []
    finally:
        tier.close()
