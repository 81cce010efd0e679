"""Guest tier unit tests: command lines, validation, modules.dep ordering, cpio, images (no
QEMU)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from iomatrix import images
from iomatrix.domain import CACHE
from iomatrix.errors import UserError
from iomatrix.guest.artifacts import GuestArtifacts
from iomatrix.guest.cmdline import build_argv, device_args
from iomatrix.guest.initramfs import CpioWriter
from iomatrix.guest.job import GuestJob, job_env
from iomatrix.guest.kernel import (
    bzimage_version,
    load_order,
    module_name,
    parse_modules_dep,
    user_kernel,
)
from iomatrix.qemu_block import DiskSpec, blockdev_args, validate_disk

BUSES = ["virtio-blk", "virtio-scsi", "ide", "nvme"]
EXPECTED = {  # domain brief §1: cache mode -> (write-cache, cache.direct, cache.no-flush)
    "writeback": ("on", "off", "off"),
    "none": ("on", "on", "off"),
    "writethrough": ("off", "off", "off"),
    "directsync": ("off", "on", "off"),
    "unsafe": ("on", "off", "on"),
}


def _artifacts(tmp_path: Path) -> GuestArtifacts:
    load = {
        "virtio_pci": ("v/virtio_ring.ko", "v/virtio.ko", "v/virtio_pci.ko"),
        "virtio_blk": ("v/virtio_ring.ko", "v/virtio.ko", "v/virtio_blk.ko"),
        "virtio_scsi": ("s/scsi_mod.ko", "v/virtio_scsi.ko"),
        "sd_mod": ("s/scsi_mod.ko", "s/sd_mod.ko"),
        "ata_piix": ("s/scsi_mod.ko", "a/libata.ko", "a/ata_piix.ko"),
        "nvme": (),
        "ext4": (),
        "libcrc32c": ("l/libcrc32c.ko",),
        "xfs": ("l/libcrc32c.ko", "x/xfs.ko"),
    }
    return GuestArtifacts(
        kernel=tmp_path / "vmlinuz",
        initramfs=tmp_path / "initramfs.cpio.lz4",
        kernel_version="6.1.0-test",
        kernel_source="test",
        fio_version="fio-3.33",
        modules=tuple(load),
        cache_key="k",
        module_load=load,
    )


def _opts(spec: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)


@pytest.mark.parametrize("cache", [c.value for c in CACHE])
@pytest.mark.parametrize("bus", BUSES)
def test_cache_mode_mapping_every_bus(cache: str, bus: str, tmp_path: Path) -> None:
    disk = DiskSpec(str(tmp_path / "d.qcow2"), "qcow2", cache, "threads", bus)  # type: ignore[arg-type]
    bd = blockdev_args(disk)
    assert bd[0] == "-blockdev"
    o = _opts(bd[1])
    wc, direct, noflush = EXPECTED[cache]
    assert o["driver"] == "qcow2" and o["file.driver"] == "file" and o["node-name"] == "d0"
    assert o["file.cache.direct"] == direct and o["cache.direct"] == direct
    assert o["file.cache.no-flush"] == noflush
    assert o["file.aio"] == "threads"
    assert "cache.writeback" not in bd[1]  # -blockdev rejects it: write-cache is a device property
    dev = device_args(disk)
    assert dev.count("-device") == (2 if bus == "virtio-scsi" else 1)
    last = _opts(dev[-1])
    assert last["drive"] == "d0" and last["write-cache"] == wc and last["serial"] == "iomx-test"
    head = dev[-1].split(",", 1)[0]
    assert (
        head
        == {
            "virtio-blk": "virtio-blk-pci",
            "virtio-scsi": "scsi-hd",
            "ide": "ide-hd",
            "nvme": "nvme",
        }[bus]
    )
    if bus == "ide":
        assert last["bus"] == "ide.0"


@pytest.mark.parametrize("cache", [c.value for c in CACHE])
def test_aio_native_requires_direct(cache: str) -> None:
    disk = DiskSpec("/x.raw", "raw", cache, "native", "virtio-blk")  # type: ignore[arg-type]
    if CACHE[cache].direct:
        validate_disk(disk)
        assert "file.aio=native" in blockdev_args(disk)[1]
    else:
        with pytest.raises(UserError, match="aio=native needs O_DIRECT"):
            validate_disk(disk)
    validate_disk(DiskSpec("/x.raw", "raw", cache, "io_uring", "nvme"))  # type: ignore[arg-type]


def test_null_ceiling_and_block_device(monkeypatch: pytest.MonkeyPatch) -> None:
    bd = blockdev_args(
        DiskSpec(None, "null", "unsafe", "threads", "virtio-blk", null_size_bytes=1 << 30)
    )
    o = _opts(bd[1])
    assert o["driver"] == "null-co" and o["read-zeroes"] == "on" and o["size"] == str(1 << 30)
    assert o["cache.no-flush"] == "on"
    with pytest.raises(UserError):
        validate_disk(DiskSpec(None, "qcow2"))
    with pytest.raises(UserError):
        validate_disk(DiskSpec("/x", "null"))
    monkeypatch.setattr("iomatrix.qemu_block.is_block_device", lambda p: True)
    o = _opts(blockdev_args(DiskSpec("/dev/sdz", "raw", "none", "native", "virtio-blk"))[1])
    assert o["file.driver"] == "host_device" and o["file.filename"] == "/dev/sdz"


def test_commas_in_paths_are_escaped(tmp_path: Path) -> None:
    bd = blockdev_args(DiskSpec("/tmp/a,b.qcow2", "qcow2", "none", "threads", "virtio-blk"))
    assert "file.filename=/tmp/a,,b.qcow2," in bd[1]


def test_full_argv_fio_and_fs(tmp_path: Path) -> None:
    art = _artifacts(tmp_path)
    disk = DiskSpec(str(tmp_path / "d.qcow2"), "qcow2", "none", "io_uring", "virtio-scsi")
    argv = build_argv(
        art, "tcg", disk, GuestJob("fio", "[j]\nfilename=@DISK@\n"), tmp_path, wrapper=["eatmydata"]
    )
    line = shlex.join(argv)
    assert argv[0] == "eatmydata"
    assert "-drive" not in argv
    for flag in ("-nodefaults", "-no-user-config", "-no-reboot", "-kernel", "-initrd"):
        assert flag in argv
    assert "tcg,thread=multi" in argv and argv[argv.index("-cpu") + 1] == "max"
    assert "name=opt/iomatrix/job" in line and "name=opt/iomatrix/fio" in line
    assert argv.count("-serial") == 2 and "chardev:res" in argv
    kvm = build_argv(art, "kvm", disk, GuestJob("boot"), tmp_path)
    assert kvm[kvm.index("-cpu") + 1] == "host"
    tar = tmp_path / "t.tar"
    tar.write_bytes(b"\0" * 10240)
    fs = build_argv(art, "tcg", disk, GuestJob("fs-read", fs="xfs", tarball=tar), tmp_path)
    assert any("serial=iomx-tar" in a for a in fs) and any("read-only=on" in a for a in fs)


def test_job_env_loads_only_what_the_run_needs(tmp_path: Path) -> None:
    art = _artifacts(tmp_path)
    env = job_env(
        art, DiskSpec("/x", "raw", "none", "threads", "ide"), GuestJob("fio", "filename=@DISK@")
    )
    assert "IOMX_MODULES='s/scsi_mod.ko a/libata.ko a/ata_piix.ko s/sd_mod.ko'" in env
    env = job_env(
        art, DiskSpec("/x", "raw", "none", "threads", "nvme"), GuestJob("fio", "filename=@DISK@")
    )
    assert "IOMX_MODULES=''" in env
    tar = tmp_path / "t.tar"
    tar.write_bytes(b"")
    env = job_env(
        art,
        DiskSpec("/x", "raw", "none", "threads", "nvme"),
        GuestJob("fs-write", fs="xfs", tarball=tar),
    )
    mods = shlex.split(env.split("IOMX_MODULES=", 1)[1].splitlines()[0])[0].split()
    assert mods[-1] == "x/xfs.ko" and mods.index("l/libcrc32c.ko") < mods.index("x/xfs.ko")
    assert "IOMX_TAR_SERIAL=iomx-tar" in env


MODULES_DEP = """\
kernel/drivers/scsi/sd_mod.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_mod.ko: kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_common.ko:
kernel/drivers/ata/ata_piix.ko: kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko \
 kernel/drivers/scsi/scsi_common.ko
kernel/drivers/ata/libata.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko \
 kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/fs/xfs/xfs.ko.xz: kernel/lib/libcrc32c.ko.xz
kernel/lib/libcrc32c.ko.xz:
"""  # noqa: E501


def test_modules_dep_load_order() -> None:
    deps = parse_modules_dep(MODULES_DEP)
    order = load_order(["ata_piix", "sd_mod"], deps)
    names = [module_name(p) for p in order]
    assert names == ["scsi_common", "scsi_mod", "libata", "ata_piix", "sd_mod"]
    order = load_order(["virtio_pci"], deps)
    names = [module_name(p) for p in order]
    assert names[-1] == "virtio_pci" and names.index("virtio_ring") < names.index("virtio")
    assert [module_name(p) for p in load_order(["xfs"], deps)] == ["libcrc32c", "xfs"]
    with pytest.raises(KeyError):
        load_order(["nope"], deps)


def test_cpio_writer_is_readable_by_cpio(tmp_path: Path) -> None:
    w = CpioWriter()
    w.file("init", b"#!/bin/sh\n", 0o755)
    w.symlink("bin/sh", "/bin/busybox")
    w.file("lib/modules/x/a.ko", b"\x7fELF" + b"x" * 5)
    w.chardev("dev/console", 5, 1)
    out = subprocess.run(
        ["cpio", "-t", "--quiet"], input=w.getvalue(), capture_output=True, check=True
    )
    names = out.stdout.decode().split()
    assert {"init", "bin", "bin/sh", "lib/modules/x/a.ko", "dev/console"} <= set(names)


def test_bzimage_version(tmp_path: Path) -> None:
    img = bytearray(0x1000)
    img[0x202:0x206] = b"HdrS"
    img[0x20E:0x210] = (0x300).to_bytes(2, "little")
    img[0x500:0x520] = b"6.1.0-56-cloud-amd64 (debian)\0\0\0"
    p = tmp_path / "vmlinuz"
    p.write_bytes(bytes(img))
    assert bzimage_version(p) == "6.1.0-56-cloud-amd64"
    p.write_bytes(b"not a kernel")
    assert bzimage_version(p) is None


def test_user_kernel_without_modules_is_a_user_error(tmp_path: Path) -> None:
    p = tmp_path / "vmlinuz-9.9.9-nomods"
    p.write_bytes(b"x" * 100)
    with pytest.raises(UserError, match="modules"):
        user_kernel(p, None, tmp_path, print)


def test_image_argv() -> None:
    argv = images.create_image_argv(Path("/tmp/x.qcow2"), "qcow2", "metadata", 1 << 30)
    assert argv is not None and argv[1:] == [
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        "preallocation=metadata",
        "/tmp/x.qcow2",
        str(1 << 30),
    ]
    argv = images.create_image_argv(Path("/tmp/x.qed"), "qed", "off", 1 << 20)
    assert argv is not None and "-o" not in argv
    with pytest.raises(UserError):
        images.create_image_argv(Path("/tmp/x.raw"), "raw", "metadata", 1 << 20)
    with pytest.raises(UserError):
        images.create_image_argv(Path("/tmp/x.qed"), "qed", "full", 1 << 20)


def test_image_on_block_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "is_block_device", lambda p: True)
    assert images.create_image_argv(Path("/dev/sdz"), "raw", "off", 1 << 20) is None
    argv = images.create_image_argv(Path("/dev/sdz"), "qcow2", "off", 1 << 20)
    assert argv is not None and "/dev/sdz" in argv


def test_tarball_is_deterministic(tmp_path: Path) -> None:
    from iomatrix.guest.tarball import write_tarball

    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    write_tarball(a, 1 << 20)
    write_tarball(b, 1 << 20)
    assert a.read_bytes() == b.read_bytes()
    assert a.stat().st_size % 512 == 0


def test_host_tsc_rate_and_machine_choice() -> None:
    from iomatrix.guest.cmdline import host_tsc_khz, max_runs_per_boot

    assert host_tsc_khz("flags\t: fpu constant_tsc\ncpu MHz\t\t: 2600.000\n") == 2_600_000
    # TSC follows the clock: no rate
    assert host_tsc_khz("flags\t: fpu\ncpu MHz\t\t: 2600.000\n") is None
    assert host_tsc_khz("flags\t: constant_tsc\n") is None
    assert max_runs_per_boot("ide") == 4 and max_runs_per_boot("sata") == 6
    assert (
        max_runs_per_boot("virtio-blk", "microvm") == 7
        and max_runs_per_boot("virtio-blk", "pc") == 16
    )


def test_batch_command_line_gives_each_run_its_disk_serial_and_job(tmp_path: Path) -> None:
    from iomatrix.guest.cmdline import build_batch_argv, validate_batch
    from iomatrix.guest.job import BatchRun, batch_env

    art = _artifacts(tmp_path)
    job = GuestJob("fio", "[j]\nfilename=@DISK@\n")
    runs = [BatchRun(DiskSpec(f"/x{i}", "raw", "none", "threads", "ide"), job) for i in range(3)]
    argv = " ".join(build_batch_argv(art, "tcg", runs, tmp_path))
    assert "-machine pc" in argv
    for i, unit in ((1, "bus=ide.0,unit=0"), (2, "bus=ide.0,unit=1"), (3, "bus=ide.1,unit=0")):
        assert f"name=opt/iomatrix/job{i}," in argv and f"name=opt/iomatrix/fio{i}," in argv
        assert f"drive=d{i},{unit},serial=iomx-t0{i}" in argv
    boot, per_run = batch_env(art, runs, "pc")
    assert "IOMX_RUNS=3" in boot and "IOMX_KIND=batch" in boot
    assert all(f"IOMX_DISK_SERIAL=iomx-t0{i}" in e for i, e in enumerate(per_run, 1))
    with pytest.raises(UserError, match="carries at most 4"):
        validate_batch(runs * 2, "pc")
    vio = [
        BatchRun(DiskSpec(f"/x{i}", "raw", "none", "threads", "virtio-scsi"), job) for i in range(2)
    ]
    argv = " ".join(build_batch_argv(art, "tcg", vio, tmp_path, machine="microvm"))
    assert "-machine microvm" in argv and argv.count("virtio-scsi-device,id=scsi0") == 1
    assert "isa-serial,chardev=res" in argv


def test_fio_start_poll_patch_shortens_both_sleeps_or_leaves_the_file(tmp_path: Path) -> None:
    from iomatrix.guest.static_fio import START_POLL_FROM, START_POLL_TO, patch_start_poll

    # The shape of fio 3.x's run_threads(): the wait for a group's start and the wait between groups
    # use 100 ms; the reaping loop's 10 ms stays as it is.
    src = (
        "\t\t\tdo_usleep(100000);\n\t\tfor (i = 0; i < this_jobs; i++) {}\n"
        "\t\tif (todo)\n\t\t\tdo_usleep(100000);\n\twhile (nr_running) "
        "{\n\t\tdo_usleep(10000);\n\t}\n"
    )
    c = tmp_path / "backend.c"
    c.write_text(src)
    assert patch_start_poll(c)
    text = c.read_text()
    assert START_POLL_FROM not in text and text.count(START_POLL_TO) == 3
    # Another fio whose code we have not read: untouched, and the caller builds nothing.
    other = src.replace("\t\tif (todo)\n\t\t\tdo_usleep(100000);\n", "")
    c.write_text(other)
    assert not patch_start_poll(c)
    assert c.read_text() == other


def test_initramfs_key_names_which_static_fio_build() -> None:
    from iomatrix.guest.static_fio import static_kind

    assert static_kind(Path("fio_3.33-3-poll10ms")) == "static-poll10ms"
    assert static_kind(Path("fio_3.33-3-unpatched")) == "static-unpatched"
