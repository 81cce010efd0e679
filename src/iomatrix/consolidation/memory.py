"""Will the guests of the largest sweep point fit in this host's memory? Refuse the plan up front if
not.

    need = max(tiles) × guests per tile × (guest memory + QEMU overhead)
    room = MemAvailable − reserve

The guest memory is counted whole (a guest may touch all of it); QEMU's own overhead under emulation
(the translation cache, device state, I/O buffers) is a measured allowance, not a bound."""

from __future__ import annotations

from iomatrix.errors import UserError

# host memory one TCG guest uses beyond its RAM (measured: a 256 MiB guest peaked at 266 MiB)
QEMU_OVERHEAD_MB = 128
# kept free for the host, iomatrix itself and the page cache the cache modes rely on
RESERVE_MB = 1024


def memory_needed_mb(
    tiles: int, guests_per_tile: int, guest_memory_mb: int, overhead_mb: int = QEMU_OVERHEAD_MB
) -> int:
    return tiles * guests_per_tile * (guest_memory_mb + overhead_mb)


def check_memory(
    tiles: int,
    guests_per_tile: int,
    guest_memory_mb: int,
    available_mb: int,
    overhead_mb: int = QEMU_OVERHEAD_MB,
    reserve_mb: int = RESERVE_MB,
) -> None:
    """Raise UserError, with the arithmetic, when the largest point's guests do not fit."""
    need = memory_needed_mb(tiles, guests_per_tile, guest_memory_mb, overhead_mb)
    room = available_mb - reserve_mb
    if need > room:
        guests = tiles * guests_per_tile
        raise UserError(
            f"consolidation: {tiles} tiles × {guests_per_tile} guests × "
            f"({guest_memory_mb} MiB guest + "
            f"{overhead_mb} MiB QEMU) = {need} MiB for {guests} guests, but this host "
            f"has {max(room, 0)} MiB "
            f"to give ({available_mb} MiB available − {reserve_mb} MiB kept free)",
            hint="lower the largest tile count, the roles per tile or guest_memory_mb",
        )


def available_mb(meminfo_text: str) -> int:
    """MemAvailable from /proc/meminfo text, in MiB."""
    for line in meminfo_text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise ValueError("no MemAvailable line in /proc/meminfo")
