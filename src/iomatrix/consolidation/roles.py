"""The guest roles a consolidation tile is made of, and what each guest runs.

The consolidation article's tile was four guests loading each other: two file servers copying a
large tree back and forth, a web/mail server and a database. Scaled to a small host under emulation,
the built-in roles are:

* ``filecopy-pair`` (two guests): the source builds a tree of many small files (1-16 KiB) and a few
  large ones on its own ext4, sends it to its peer over the tile's private network (tar through nc),
  and the peer sends it back after an idle pause. Timed: the source's round trip (role
  ``filecopy``); the peer (``filecopy_peer``) is recorded but not part of the answer, its time is
  the source's plus waiting.
* ``db``: small random writes with an fsync after each (fio), a database's commit path.
* ``web``: random 4 KiB reads over a region written first (not timed), a web server's cache misses.
* ``burst``: sequential 64 KiB writes in bursts with pauses and an fsync per burst (the
  consolidation article's mail bursts).

Every role does a fixed amount of work (never time-based): a role slowed down by its neighbours
takes longer, which is what the answer compares. `scale` multiplies the amount of work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# One tile's roles → guests. A pair counts two.
GUESTS_PER_ROLE = {"filecopy-pair": 2, "db": 1, "web": 1, "burst": 1}
# Roles whose time is part of the consolidation answer.
TIMED_ROLES = ("filecopy", "db", "web", "burst")


@dataclass(frozen=True)
class GuestPlan:
    """One guest of one tile: which job kind it runs, with which variables and files."""

    tile: int  # 1-based
    role: str  # metric name: filecopy, filecopy_peer, db, web, burst
    kind: str  # guest job kind (guest/kinds/kind-<kind>.sh)
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    timed: bool = True
    link: str | None = None  # network link shared with the other end of a pair
    mac: str | None = None

    @property
    def label(self) -> str:
        return f"t{self.tile}-{self.role}"


def guests_per_tile(roles: Sequence[str]) -> int:
    return sum(GUESTS_PER_ROLE[r] for r in roles)


def _n(base: int, scale: float, least: int = 1) -> int:
    return max(least, round(base * scale))


def fio_job(name: str, lines: list[str]) -> str:
    """A one-job fio file on the guest's disk under test (`@DISK@`), direct I/O, fixed work."""
    head = [f"[{name}]", "filename=@DISK@", "ioengine=psync", "direct=1", "randrepeat=0"]
    return "\n".join(head + lines) + "\n"


def db_job(scale: float) -> str:
    ios = _n(1024, scale, 16)
    return fio_job("db", ["rw=randwrite", "bs=4k", "size=64m", f"io_size={ios * 4}k", "fsync=1"])


def web_jobs(scale: float) -> tuple[str, str]:
    region_mb = _n(32, scale, 4)
    reads = _n(3072, scale, 64)
    prep = fio_job("fill", ["rw=write", "bs=1m", f"size={region_mb}m", "end_fsync=1"])
    job = fio_job("web", ["rw=randread", "bs=4k", f"size={region_mb}m", f"io_size={reads * 4}k"])
    return prep, job


def burst_job(scale: float) -> str:
    mb = _n(8, scale, 1)
    # 8 x 64 KiB per burst, an fsync per burst, 50 ms between bursts.
    return fio_job(
        "burst",
        ["rw=write", "bs=64k", f"size={mb}m", "fsync=8", "thinktime=50000", "thinktime_blocks=8"],
    )


def tile_guests(tile: int, roles: Sequence[str], scale: float = 1.0) -> list[GuestPlan]:
    """The guests of tile number `tile` (1-based) for the plan's `roles`."""
    if tile < 1 or tile > 250:
        raise ValueError(f"tile number {tile} is out of range 1..250")
    out: list[GuestPlan] = []
    for role in roles:
        if role == "filecopy-pair":
            link = f"t{tile}-copy"
            src, peer = f"10.77.{tile}.1", f"10.77.{tile}.2"
            common = {
                "IOMX_COPY_SMALL_FILES": str(_n(400, scale, 8)),
                "IOMX_COPY_LARGE_FILES": "2",
                "IOMX_COPY_LARGE_MB": str(_n(8, scale, 1)),
                "IOMX_COPY_IDLE_S": "1",
                "IOMX_COPY_WAIT_S": "120",
            }
            out.append(
                GuestPlan(
                    tile,
                    "filecopy",
                    "role-filecopy",
                    link=link,
                    mac=f"52:54:00:77:{tile:02x}:01",
                    env={
                        **common,
                        "IOMX_COPY_SIDE": "source",
                        "IOMX_NET_ADDR": src,
                        "IOMX_PEER_ADDR": peer,
                    },
                )
            )
            out.append(
                GuestPlan(
                    tile,
                    "filecopy_peer",
                    "role-filecopy",
                    timed=False,
                    link=link,
                    mac=f"52:54:00:77:{tile:02x}:02",
                    env={
                        **common,
                        "IOMX_COPY_SIDE": "peer",
                        "IOMX_NET_ADDR": peer,
                        "IOMX_PEER_ADDR": src,
                    },
                )
            )
        elif role == "db":
            out.append(
                GuestPlan(
                    tile,
                    "db",
                    "role-fio",
                    env={"IOMX_ROLE": "db"},
                    files={"role-job": db_job(scale)},
                )
            )
        elif role == "web":
            prep, job = web_jobs(scale)
            out.append(
                GuestPlan(
                    tile,
                    "web",
                    "role-fio",
                    env={"IOMX_ROLE": "web"},
                    files={"role-prep": prep, "role-job": job},
                )
            )
        elif role == "burst":
            out.append(
                GuestPlan(
                    tile,
                    "burst",
                    "role-fio",
                    env={"IOMX_ROLE": "burst"},
                    files={"role-job": burst_job(scale)},
                )
            )
        else:
            raise ValueError(f"unknown role '{role}'")
    return out


def point_guests(tiles: int, roles: Sequence[str], scale: float = 1.0) -> list[GuestPlan]:
    """Every guest of a sweep point with `tiles` tiles."""
    return [g for t in range(1, tiles + 1) for g in tile_guests(t, roles, scale)]
