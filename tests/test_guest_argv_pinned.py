"""The guest's QEMU command lines and job assignments, pinned byte for byte.

`tests/data/guest_argv/pinned.json` holds what the command-line builder produced for a set of
representative guests (every bus, several disks per boot, tcg and kvm, pc and microvm, fio and
filesystem jobs, a wrapper and extra arguments) when it was pinned. A change to any of them is a
change to what every guest run measures: if it is meant, regenerate the file with `write_pinned()`
and say why in the commit.

Host-dependent parts are normalised: the run directory, the qemu-system binary's path, and the host
TSC rate (pinned to 2.6 GHz, so the microvm kernel command line is the same on every host)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.guest import cmdline
from iomatrix.guest.artifacts import GuestArtifacts
from iomatrix.guest.cmdline import build_argv, build_batch_argv, device_args
from iomatrix.guest.job import BatchRun, GuestJob, batch_env, job_env
from iomatrix.hostcmd import require
from iomatrix.qemu_block import DiskSpec

PINNED = Path(__file__).parent / "data" / "guest_argv" / "pinned.json"
FIO = GuestJob("fio", "[j]\nfilename=@DISK@\n")


def _artifacts(root: Path) -> GuestArtifacts:
    load = {
        "virtio_pci": ("v/virtio_ring.ko", "v/virtio.ko", "v/virtio_pci.ko"),
        "virtio_blk": ("v/virtio_ring.ko", "v/virtio.ko", "v/virtio_blk.ko"),
        "virtio_mmio": ("v/virtio_ring.ko", "v/virtio.ko", "v/virtio_mmio.ko"),
        "virtio_scsi": ("s/scsi_mod.ko", "v/virtio_scsi.ko"),
        "sd_mod": ("s/scsi_mod.ko", "s/sd_mod.ko"),
        "ata_piix": ("s/scsi_mod.ko", "a/libata.ko", "a/ata_piix.ko"),
        "ahci": ("s/scsi_mod.ko", "a/libata.ko", "a/libahci.ko", "a/ahci.ko"),
        "nvme": ("n/nvme.ko",),
        "ext4": ("e/ext4.ko",),
        "libcrc32c": ("l/libcrc32c.ko",),
        "xfs": ("l/libcrc32c.ko", "x/xfs.ko"),
    }
    return GuestArtifacts(
        kernel=root / "vmlinuz",
        initramfs=root / "initramfs.cpio.lz4",
        kernel_version="6.1.0-test",
        kernel_source="test",
        fio_version="fio-3.33",
        modules=tuple(load),
        cache_key="k",
        module_load=load,
    )


def _disk(
    root: Path,
    bus: str,
    name: str = "d",
    fmt: str = "qcow2",
    cache: str = "none",
    aio: str = "threads",
) -> DiskSpec:
    return DiskSpec(str(root / f"{name}.{fmt}"), fmt, cache, aio, bus)  # type: ignore[arg-type]


def _tarball(root: Path) -> Path:
    tar = root / "t,ar.tar"  # a comma: QEMU's option escaping is part of what is pinned
    tar.write_bytes(b"\0" * 10240)
    return tar


def _single(
    bus: str, accel: str, machine: str = "pc", job: GuestJob = FIO, **kw: object
) -> Callable[[GuestArtifacts, Path], dict[str, object]]:
    def build(art: GuestArtifacts, root: Path) -> dict[str, object]:
        disk = _disk(root, bus, **kw)  # type: ignore[arg-type]
        return {
            "argv": build_argv(art, accel, disk, job, root, machine=machine),
            "job_env": job_env(art, disk, job, machine),
        }

    return build


def _batch(
    bus: str, accel: str, n: int, machine: str = "pc", gate: bool = False
) -> Callable[[GuestArtifacts, Path], dict[str, object]]:
    def build(art: GuestArtifacts, root: Path) -> dict[str, object]:
        runs = [
            BatchRun(_disk(root, bus, f"d{i}", cache=("none", "writeback", "unsafe")[i % 3]), FIO)
            for i in range(n)
        ]
        boot, per_run = batch_env(art, runs, machine, gate=gate)
        return {
            "argv": build_batch_argv(art, accel, runs, root, memory_mb=768, machine=machine),
            "job_env": boot,
            "run_envs": per_run,
        }

    return build


def _fs_on_microvm(art: GuestArtifacts, root: Path) -> dict[str, object]:
    job = GuestJob("fs-write", fs="xfs", tarball=_tarball(root), write_mb=64, write_count=2)
    disk = _disk(root, "virtio-blk", fmt="raw", aio="io_uring")
    return {
        "argv": build_argv(art, "tcg", disk, job, root, machine="microvm"),
        "job_env": job_env(art, disk, job, "microvm"),
    }


def _fs_batch(art: GuestArtifacts, root: Path) -> dict[str, object]:
    tar = _tarball(root)
    runs = [
        BatchRun(_disk(root, "virtio-scsi", "d0"), GuestJob("fs-read", fs="ext4", tarball=tar)),
        BatchRun(_disk(root, "virtio-scsi", "d1"), FIO),
    ]
    boot, per_run = batch_env(art, runs, "pc")
    return {"argv": build_batch_argv(art, "kvm", runs, root), "job_env": boot, "run_envs": per_run}


def _kind_script_job(art: GuestArtifacts, root: Path) -> dict[str, object]:
    """A job with extra fw_cfg files and env, a wrapper, more memory, extra arguments and no
    disk."""
    job = GuestJob("boot", env={"IOMX_ROUNDS": "3"}, files={"plan": "x=1\n", "ref-data": "y"})
    argv = build_argv(
        art,
        "kvm",
        None,
        job,
        root,
        memory_mb=1024,
        wrapper=["eatmydata", "nice"],
        extra_args=["-device", "virtio-rng-pci"],
    )
    return {"argv": argv, "job_env": job_env(art, None, job)}


CASES: dict[str, Callable[[GuestArtifacts, Path], dict[str, object]]] = {
    "virtio-blk tcg pc": _single("virtio-blk", "tcg"),
    "virtio-blk tcg microvm": _single("virtio-blk", "tcg", "microvm", cache="writeback"),
    "virtio-scsi kvm pc": _single("virtio-scsi", "kvm", cache="directsync", aio="native"),
    "virtio-scsi tcg microvm": _single("virtio-scsi", "tcg", "microvm", fmt="raw"),
    "nvme kvm": _single("nvme", "kvm", cache="unsafe", fmt="qed"),
    "ide tcg": _single("ide", "tcg", cache="writethrough"),
    "sata kvm": _single("sata", "kvm", fmt="raw", aio="io_uring"),
    "boot only tcg": _single("virtio-blk", "tcg", job=GuestJob("boot")),
    "fs-write xfs microvm": _fs_on_microvm,
    "kind script, files, wrapper, extra args": _kind_script_job,
    "batch ide 4 disks tcg": _batch("ide", "tcg", 4),
    "batch sata 3 disks kvm gated": _batch("sata", "kvm", 3, gate=True),
    "batch virtio-blk 3 disks microvm": _batch("virtio-blk", "tcg", 3, "microvm"),
    "batch virtio-scsi 2 disks microvm": _batch("virtio-scsi", "tcg", 2, "microvm"),
    "batch nvme 5 disks kvm": _batch("nvme", "kvm", 5),
    "batch fs and fio virtio-scsi kvm": _fs_batch,
    "device_args sata no error policy": lambda art, root: {
        "argv": device_args(_disk(root, "sata"), "n7", "iomx-x", report_errors=False)
    },
}


def _normalised(value: object, root: Path, qemu: str) -> object:
    if isinstance(value, list):
        return [_normalised(v, root, qemu) for v in value]
    if isinstance(value, dict):
        return {k: _normalised(v, root, qemu) for k, v in value.items()}
    assert isinstance(value, str)
    return "<qemu>" if value == qemu else value.replace(str(root), "<run>")


def _built(root: Path) -> dict[str, object]:
    art = _artifacts(root)
    qemu = require("qemu-system-x86_64")
    return {name: _normalised(build(art, root), root, qemu) for name, build in CASES.items()}


@pytest.fixture
def pinned_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cmdline, "host_tsc_khz", lambda cpuinfo=None: 2_600_000)
    root = tmp_path / "run"
    root.mkdir()
    return root


def test_command_lines_are_the_pinned_ones(pinned_host: Path) -> None:
    pinned = json.loads(PINNED.read_text())
    built = _built(pinned_host)
    assert sorted(built) == sorted(pinned)
    for name, want in pinned.items():
        got = built[name]
        assert isinstance(got, dict)
        for part, value in want.items():
            shown = shlex.join(got[part]) if part == "argv" else got[part]
            assert got[part] == value, f"{name}: {part} changed:\n{shown}"


def write_pinned(tmp_root: Path) -> None:
    """Regenerate the pinned file (only when a command-line change is meant): call with an empty
    directory under a monkeypatched host_tsc_khz, e.g. from a throwaway test using the `pinned_host`
    fixture."""
    PINNED.parent.mkdir(parents=True, exist_ok=True)
    PINNED.write_text(json.dumps(_built(tmp_root), indent=1) + "\n")
