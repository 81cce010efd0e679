"""Which guest a sweep's guest figures came from, named with every answer (issue 51).

A guest's figures belong to the guest that produced them: its kernel, its virtio driver and its I/O
scheduler stand between fio and the disk. So every answer names the guests its sweep booted, from
what each run recorded (never from what is cached on the host today, which may have been rebuilt):

- a real image (`[guest] image = "debian"` or a path): the file, its sha256 (a prefix on the
  terminal, whole in JSON: `sha256sum IMAGE` matches it months later), its distribution and kernel,
  and the guest filesystem fio ran on when it was not the raw disk (`[guest] filesystem = "ext4"`);
- the built-in initramfs guest: its kernel, its fio and its build key (the cache entry's name).

Worked example: a sweep whose 12 guest runs booted `debian-12.qcow2` (sha256 3f2a9b0c…) reads
"guest: real image debian-12.qcow2 (Debian 12.8, kernel 6.1.0-28-cloud-amd64, sha256
3f2a9b0c1d2e3f40…), 12 runs"; a sweep with no guest tier names none."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from iomatrix.store import Store

# The digest's hex digits the terminal shows: enough to tell two images apart by eye (JSON has all
# 64).
DIGEST_SHOWN = 16

REAL_IMAGE = "real image"
BUILT_IN = "built-in initramfs"


@dataclass(frozen=True)
class GuestUsed:
    """One guest the sweep booted, as its runs recorded it."""

    kind: str  # REAL_IMAGE or BUILT_IN
    image: str  # the image file (a real image) or the kernel's path (the built-in guest)
    digest: str  # the image's sha256; the built-in guest's build key
    distribution: str
    kernel: str
    fio: str
    runs: int
    filesystem: str = (
        ""  # a real image's runs on a file of this guest filesystem ("": the raw disk)
    )

    def line(self) -> str:
        """The guest in one statement, for the answer's head."""
        if self.kind == REAL_IMAGE:
            facts = [
                self.distribution or "distribution not read",
                f"kernel {self.kernel}" if self.kernel else "kernel not read",
            ]
            digest = self.digest[:DIGEST_SHOWN] + ("…" if len(self.digest) > DIGEST_SHOWN else "")
            facts.append(f"sha256 {digest}" if self.digest else "no digest recorded")
            if self.filesystem:
                facts.append(f"fio on {self.filesystem} in the guest")
            name = PurePath(self.image).name or self.image
            return f"real image {name} ({', '.join(facts)}), {_runs(self.runs)}"
        facts = [f"kernel {self.kernel}" if self.kernel else "kernel not recorded"]
        if self.fio:
            facts.append(self.fio)
        return f"iomatrix's built-in initramfs guest ({', '.join(facts)}), {_runs(self.runs)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "image": self.image,
            "sha256" if self.kind == REAL_IMAGE else "build_key": self.digest,
            "distribution": self.distribution or None,
            "kernel": self.kernel or None,
            "fio": self.fio or None,
            "runs": self.runs,
            "line": self.line(),
            # only where set: a guest on the raw disk reads as it always did
            **({"filesystem": self.filesystem} if self.filesystem else {}),
        }


def guest_lines(guests: list[GuestUsed]) -> list[str]:
    return [g.line() for g in guests]


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def _real(meta: dict[str, Any], filesystem: str) -> tuple[str, ...]:
    return (
        REAL_IMAGE,
        str(meta.get("image", "")),
        str(meta.get("image_sha256", "")),
        str(meta.get("distribution", "")),
        str(meta.get("kernel_version", "")),
        "",
        filesystem,
    )


def _built_in(meta: dict[str, Any]) -> tuple[str, ...]:
    return (
        BUILT_IN,
        str(meta.get("kernel", "")),
        str(meta.get("cache_key", "")),
        "",
        str(meta.get("kernel_version", "")),
        str(meta.get("fio_version", "")),
        "",
    )


def guests_used(store: Store, sweep_id: int) -> list[GuestUsed]:
    """The guests the sweep's ok runs booted, real images first, each with its count of runs; [] for
    a sweep without guest runs. A user's image read its distribution and kernel from the guest
    during the run: runs recorded before that (none, or the first) are counted with the facts read
    later."""
    found: Counter[tuple[str, ...]] = Counter()
    filesystems = store.ok_run_objects(sweep_id, "guest_filesystem")
    for run_id, meta in store.ok_run_objects(sweep_id, "guest_image").items():
        found[_real(meta, str(filesystems.get(run_id, {}).get("type", "")))] += 1
    for meta in store.ok_run_objects(sweep_id, "guest_artifacts").values():
        found[_built_in(meta)] += 1
    merged: Counter[tuple[str, ...]] = Counter()
    for key, n in found.items():
        merged[_with_facts(key, found)] += n
    return [
        GuestUsed(*key[:6], runs=n, filesystem=key[6])
        for key, n in sorted(
            merged.items(), key=lambda kv: (kv[0][0] != REAL_IMAGE, kv[0][1], kv[0][2])
        )
    ]


def _with_facts(key: tuple[str, ...], found: Counter[tuple[str, ...]]) -> tuple[str, ...]:
    """A real image's key without its distribution or kernel (runs before the guest was read) takes
    them from another run of the same file and digest, so one image is one line."""
    if key[0] != REAL_IMAGE or (key[3] and key[4]):
        return key
    for other in found:
        if other[:3] == key[:3] and other[6:] == key[6:] and other[3] and other[4]:
            return other
    return key
