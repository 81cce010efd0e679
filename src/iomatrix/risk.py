"""What each cache mode risks on a QEMU crash and on a host power loss.

From the cache-mode table in docs (domain-brief §1): where completed guest
writes live before they reach the disk, and whether guest flushes are honoured.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Risk:
    qemu_crash: str
    power_loss: str
    level: str  # safe | like-a-disk-cache | unsafe


RISKS: dict[str, Risk] = {
    "none": Risk("completed writes survive (they reached the host)",
                 "writes since the guest's last flush may be lost (disk's volatile cache), as on bare metal",
                 "like-a-disk-cache"),
    "writeback": Risk("completed writes survive (host page cache)",
                      "writes since the guest's last flush are lost (host page cache); flushes are honoured",
                      "like-a-disk-cache"),
    "writethrough": Risk("safe", "safe if the device honours flush (every write is flushed)", "safe"),
    "directsync": Risk("safe", "safe (O_DIRECT and a flush after every write)", "safe"),
    "unsafe": Risk("completed writes survive (host page cache)",
                   "guest flushes are ignored: everything not yet written back is lost and the image may be "
                   "unusable", "unsafe"),
}


def risk_of(cache: str, modifier: str = "none") -> Risk | None:
    if cache not in RISKS:
        return None
    if modifier == "eatmydata":
        return Risk(RISKS[cache].qemu_crash, "eatmydata drops host flushes: as unsafe as cache=unsafe "
                    "(except io_uring flushes)", "unsafe")
    return RISKS[cache]
