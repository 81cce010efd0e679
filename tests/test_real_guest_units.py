"""The Debian guest image and the real-guest boot, without building or booting (issue 51): the
build's inputs and cache key, its commands and one-line errors, the agent protocol's framing and
bounded waits, the QEMU command line and the guest's disk view. The build and the boot themselves:
tests/test_real_guest.py (slow)."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.backing import leftovers
from iomatrix.backing.network import NetworkDisk
from iomatrix.backing.provision import provision
from iomatrix.backing.spec import parse_backing
from iomatrix.errors import UserError
from iomatrix.fio.jobs import JobShape
from iomatrix.guest import debian_image as dimg
from iomatrix.guest.agent import (
    AgentTimeout,
    GuestAgent,
    exec_result,
    split_replies,
    wait_for_agent,
)
from iomatrix.guest.job import TAR_SERIAL
from iomatrix.guest.real_image import RealImage
from iomatrix.guest.realboot import (
    BootImage,
    agent_socket_path,
    disk_serial,
    parse_disk_view,
    real_guest_argv,
)
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec
from iomatrix.runner import plan_expansion
from iomatrix.tiers.base import RunRequest, Target
from iomatrix.tiers.network_disks import disk_name, network_disk
from iomatrix.tiers.real_guest import (
    FS_MOUNT,
    FS_STEPS,
    PREPARE_RUN,
    RealRunContext,
    fs_outcome,
    run_real_batch,
)
from iomatrix.workloads import resolve
from tests.conftest import iomatrix_argv

# --------------------------------------------------------------------------- inputs and key


def test_the_key_follows_every_input_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    base = dimg.cache_key(dimg.build_inputs())
    assert base == dimg.cache_key(dimg.build_inputs())  # stable
    changed = {}
    for name, value in (
        ("PACKAGES", (*dimg.PACKAGES, "strace")),
        ("MMDEBSTRAP_OPTIONS", (*dimg.MMDEBSTRAP_OPTIONS, "--aptopt=Acquire::Retries=3")),
        ("MASKED_UNITS", dimg.MASKED_UNITS[1:]),
        ("IMAGE_SIZE_MIB", 4096),
    ):
        with monkeypatch.context() as m:
            m.setattr(dimg, name, value)
            changed[name] = dimg.cache_key(dimg.build_inputs())
    with monkeypatch.context() as m:
        files = dimg.our_files()
        files["iomatrix-seed"] += b"# changed\n"
        m.setattr(dimg, "our_files", lambda: files)
        changed["files"] = dimg.cache_key(dimg.build_inputs())
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed


def test_the_image_has_the_packages_the_issue_names_and_no_cloud_init() -> None:
    for p in ("linux-image-cloud-amd64", "qemu-guest-agent", "fio", "systemd-sysv", "udev"):
        assert p in dimg.PACKAGES
    assert "cloud-init" not in dimg.PACKAGES and "--variant=minbase" in dimg.MMDEBSTRAP_OPTIONS
    assert set(dimg.our_files()) == set(dimg.OUR_FILES)


def test_mmdebstrap_gets_the_hosts_debian_entries_and_our_files_before_any_package(
    tmp_path: Path,
) -> None:
    src = tmp_path / "apt" / "sources.list.d"
    src.mkdir(parents=True)
    (src / "debian.sources").write_text(
        "Types: deb\n# a snapshot\nURIs: http://deb.debian.org/debian\nSuites: bookworm "
        "bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: "
        "bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: https://deb.vendor.example/node\nSuites: nodistro\nComponents: main\n"
    )
    (src / "extra.list").write_text(
        "deb [arch=amd64] http://mirror.example/debian bookworm main contrib # x\n"
        "deb-src http://mirror.example/debian bookworm main\n"
        "deb http://mirror.example/debian trixie main\n"
    )
    (src / "empty.list").write_text("\n")
    (src / "notes.txt").write_text("deb http://example.invalid/ bookworm main\n")
    sources = dimg.host_sources(tmp_path / "apt")
    # empty files and other names are not apt's
    assert sources == [src / "debian.sources", src / "extra.list"]
    entries = dimg.debian_entries(sources)
    assert entries == [
        "deb http://deb.debian.org/debian bookworm main",
        "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
        # no vendor, no deb-src, no trixie
        "deb http://mirror.example/debian bookworm main contrib",
    ]
    argv = dimg.mmdebstrap_argv(tmp_path / "root fs", tmp_path / "over lay", entries)
    assert argv[0] == "mmdebstrap" and argv[-6:] == [
        "bookworm",
        str(tmp_path / "root fs"),
        *entries,
    ]
    hook = next(a for a in argv if a.startswith("--setup-hook="))
    assert f"'{tmp_path / 'over lay'}'/." in hook  # quoted for the hook's shell
    assert f"--include={','.join(dimg.PACKAGES)}" in argv


def test_sources_without_bookworm_or_none_at_all_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="name no Debian bookworm entry"):
        dimg.debian_entries([])
    trixie = tmp_path / "t.list"
    trixie.write_text("deb http://deb.debian.org/debian trixie main\n")
    with pytest.raises(UserError, match="name no Debian bookworm entry"):
        dimg.debian_entries([trixie])


def test_the_overlay_holds_our_files_and_the_finished_tree_the_masks(tmp_path: Path) -> None:
    dimg.write_overlay(tmp_path)
    for name, (rel, mode) in dimg.OUR_FILES.items():
        assert (tmp_path / rel).read_bytes() == dimg.our_files()[name]
        assert (tmp_path / rel).stat().st_mode & 0o777 == mode
    assert not (tmp_path / "etc/systemd/system" / dimg.MASKED_UNITS[0]).exists()
    # replaced by the mask
    (tmp_path / "etc/systemd/system" / "fstrim.timer").write_text("[Timer]\n")
    dimg.finish_rootfs(tmp_path)
    for unit in dimg.MASKED_UNITS:
        assert os.readlink(tmp_path / "etc/systemd/system" / unit) == "/dev/null"
    assert (tmp_path / "etc/fstab").read_text().startswith(f"LABEL={dimg.ROOT_LABEL} / ext4")


def test_our_shell_files_parse() -> None:
    for name in ("iomatrix-seed", "initramfs-hook"):
        data = dimg.our_files()[name]
        assert data.startswith(b"#!/bin/sh\n")
        subprocess.run(["sh", "-n"], input=data, check=True)


# --------------------------------------------------------------------------- one-line errors


def test_missing_mmdebstrap_names_the_setup_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(UserError) as err:
        dimg.check_preconditions(tmp_path)
    assert (
        "mmdebstrap is not installed" in err.value.one_line()
        and "scripts/setup.sh --real-guest" in err.value.one_line()
    )


@pytest.mark.skipif(
    not all(map(dimg.shutil.which, ("mmdebstrap", "qemu-img", "mke2fs"))),
    reason="mmdebstrap, qemu-img or mke2fs not installed",
)
def test_not_root_and_no_space_are_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(UserError, match="needs root"):
        dimg.check_preconditions(tmp_path, euid=1000)
    monkeypatch.setattr(dimg, "NEEDED_FREE_BYTES", 1 << 60)
    with pytest.raises(UserError) as err:
        dimg.check_preconditions(tmp_path / "not" / "yet", euid=0)
    line = err.value.one_line()
    assert (
        line.startswith("no space for the Debian guest image")
        and str(tmp_path) in line
        and "IOMATRIX_CACHE" in line
    )


def test_a_failed_step_names_its_error_line_and_the_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("")
    script = (
        "echo 'I: downloading'; echo 'E: Unable to locate package nosuch'; echo 'I: "
        "cleanup'; exit 100"
    )
    with pytest.raises(UserError) as err:
        dimg._run_logged(["sh", "-c", script], log, dict(os.environ), "mmdebstrap")
    line = err.value.one_line()
    assert (
        "mmdebstrap (exit 100): E: Unable to locate package nosuch" in line
        and f"full log: {log}" in line
    )
    assert "\n" not in line
    with pytest.raises(UserError, match=r"^no space left while building"):
        dimg._run_logged(
            ["sh", "-c", "echo 'write: No space left on device'; exit 2"],
            log,
            dict(os.environ),
            "mke2fs",
        )


def test_the_cli_refuses_in_one_line_without_mmdebstrap(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        IOMATRIX_CACHE=str(tmp_path / "cache"),
        PATH=str(Path(iomatrix_argv()[0]).parent),
    )
    done = subprocess.run(
        [*iomatrix_argv(), "guest", "build", "debian"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "mmdebstrap is not installed" in done.stderr and "--real-guest" in done.stderr
    assert not (tmp_path / "cache").exists()  # refused before anything was written


def test_a_staging_tree_with_a_mount_inside_is_never_removed_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "stage"
    (tree / "rootfs/proc").mkdir(parents=True)
    mp = str(tree / "rootfs/proc")
    # umount cannot remove it
    monkeypatch.setattr(dimg, "parse_mountinfo", lambda: [{"mountpoint": mp}])
    with pytest.raises(UserError, match="still mounted"):
        dimg.remove_tree(tree)
    assert tree.exists()
    monkeypatch.setattr(dimg, "parse_mountinfo", lambda: [])
    dimg.remove_tree(tree)
    assert not tree.exists()


def test_a_cache_entry_without_its_files_is_not_an_image(tmp_path: Path) -> None:
    assert dimg.load_image(tmp_path) is None
    (tmp_path / "image.json").write_text(
        '{"kernel_version": "6.1", "sha256": "0", "distribution": "D", "cache_key": "k"}'
    )
    assert dimg.load_image(tmp_path) is None
    for name in ("image.qcow2", "vmlinuz", "initrd.img"):
        (tmp_path / name).write_bytes(b"x")
    img = dimg.load_image(tmp_path)
    assert img is not None and img.as_metadata()["image_sha256"] == "0"
    assert (
        img.boot_image().kernel == tmp_path / "vmlinuz"
        and "root=/dev/vda" in img.boot_image().cmdline
    )


# --------------------------------------------------------------------------- the agent protocol


def test_replies_are_split_past_delimiters_and_an_incomplete_rest_is_kept() -> None:
    replies, rest = split_replies(
        b'\xff{"return": 7}\n\xff{"return": {"pid": 3}}\n{"error": {"desc": "x"'
    )
    assert replies == [{"return": 7}, {"return": {"pid": 3}}] and rest == b'{"error": {"desc": "x"'
    replies, rest = split_replies(rest + b"}}\n")
    assert replies == [{"error": {"desc": "x"}}] and rest == b""
    assert split_replies(b"\xff\xff  \n") == ([], b"")


def test_exec_output_is_decoded() -> None:
    res = exec_result(
        {
            "exited": True,
            "exitcode": 0,
            "out-data": base64.b64encode(b"[none] mq-deadline\n").decode(),
        }
    )
    assert res.ok and res.stdout == "[none] mq-deadline\n" and res.stderr == ""
    killed = exec_result({"exited": True, "signal": 9})
    assert not killed.ok and killed.signal == 9


def test_waiting_for_a_silent_agent_ends_at_its_limit_with_the_console_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "qga.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)  # accepts (the kernel's backlog) and never answers, like a guest with no agent
    agent = GuestAgent(path)
    try:
        t0 = time.monotonic()
        with pytest.raises(AgentTimeout) as err:
            wait_for_agent(
                agent, 1.5, lambda: None, lambda: "last console lines: a | b", attempt_s=0.5
            )
        # bounded (the limit is 1.5 s; generous for a loaded host)
        assert time.monotonic() - t0 < 30
        line = err.value.one_line()
        assert (
            "did not answer guest-ping within 1.5 s; last console lines: a | b" in line
            and "\n" not in line
        )
        with pytest.raises(
            UserError, match="stopped before its agent answered: QEMU exited with status 1"
        ):
            wait_for_agent(
                agent, 5, lambda: "QEMU exited with status 1", lambda: "last console lines: x"
            )
    finally:
        agent.close()
        server.close()


# --------------------------------------------------------------------------- command line and disk
# view


def test_the_command_line_boots_the_overlay_never_the_image(tmp_path: Path) -> None:
    image = BootImage(
        tmp_path / "base.qcow2",
        "qcow2",
        tmp_path / "vmlinuz",
        tmp_path / "initrd.img",
        "root=/dev/vda",
    )
    disk = DiskSpec(
        str(tmp_path / "d.raw"), "raw", "none", "threads", "virtio-blk", more={"queues": "2"}
    )
    argv = real_guest_argv(
        image, tmp_path / "ov.qcow2", tmp_path, tmp_path / "qga.sock", "tcg", [disk]
    )
    text = " ".join(argv)
    assert "base.qcow2" not in text and f"file.filename={tmp_path / 'ov.qcow2'}" in text
    assert (
        argv[argv.index("-accel") + 1] == "tcg,thread=multi" and argv[argv.index("-smp") + 1] == "2"
    )
    assert f"socket,id=qga,path={tmp_path / 'qga.sock'},server=on,wait=off" in argv
    assert "virtserialport,bus=vser0.0,chardev=qga,name=org.qemu.guest_agent.0" in argv
    dev = [a for a in argv if a.startswith("virtio-blk-pci,drive=d0")]
    assert dev and "num-queues=2" in dev[0] and "serial=iomx-test" in dev[0]
    assert text.index("drive=root") < text.index("drive=d0")  # the root disk is the guest's vda


def test_a_run_directory_too_deep_for_a_unix_socket_gets_none(tmp_path: Path) -> None:
    assert agent_socket_path(tmp_path) == tmp_path.resolve() / "qga.sock"
    assert agent_socket_path(tmp_path / ("d" * 120)) is None


def test_the_disk_view_reads_the_active_scheduler_and_counts() -> None:
    view = parse_disk_view(
        "name=vdb\ndriver=virtio_blk\ndevpath=/sys/devices/pci0000:00/0000:00:04.0/virtio2\n"
        "queues=2\nscheduler=none [mq-deadline]\nwrite_cache=write back\nsectors=131072\n"
        "nproc=2\n"
    )
    assert view["queues"] == 2 and view["scheduler"] == "mq-deadline" and view["sectors"] == 131072
    assert view["write_cache"] == "write back" and view["nproc"] == 2


# --------------------------------------------------------------------------- `[guest] image` in a
# plan


def test_the_guest_table_names_an_image_and_a_plan_without_one_dumps_as_before() -> None:
    from iomatrix.plan.model import Plan

    plain = Plan.model_validate({"name": "p", "tier": ["guest"]})
    assert "guest_image" not in plain.model_dump() and plain.setting("guest_image") is None
    plan = Plan.model_validate(
        {"name": "p", "tier": ["guest"], "guest": {"image": "/images/d.qcow2", "cache": ["none"]}}
    )
    assert plan.setting("guest_image") == "/images/d.qcow2" and plan.tier_tables == {
        "guest": {"cache": ["none"]}
    }
    again = Plan.model_validate(plan.model_dump(mode="json"))
    assert (
        again.setting("guest_image") == "/images/d.qcow2"
        and again.fingerprint() == plan.fingerprint()
    )
    assert (
        plan.fingerprint()
        != Plan.model_validate(
            {"name": "p", "tier": ["guest"], "guest": {"cache": ["none"]}}
        ).fingerprint()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tier": ["blocklayer"], "guest": {"image": "/x.qcow2"}}, "does not run the guest tier"),
        ({"tier": ["guest"], "guest": {"image": 3}}, "valid string"),
        ({"tier": ["guest"], "guest": {"image": ""}}, "at least 1 character"),
        (
            {"tier": ["guest"], "guest": {"image": "/a"}, "guest_image": "/b"},
            "name the same setting",
        ),
    ],
)
def test_a_wrong_guest_image_key_is_refused(data: dict, message: str) -> None:
    from pydantic import ValidationError

    from iomatrix.plan.model import Plan

    with pytest.raises(ValidationError, match=message):
        Plan.model_validate({"name": "p", **data})


def test_a_missing_image_file_is_one_line(tmp_path: Path) -> None:
    from iomatrix.guest.real_image import resolve_image

    with pytest.raises(UserError) as err:
        resolve_image(str(tmp_path / "nope.qcow2"))
    assert err.value.one_line().startswith(f"guest image {tmp_path / 'nope.qcow2'} does not exist")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tier": ["guest"], "guest": {"filesystem": "ext4"}}, "real guest image only"),
        ({"tier": ["guest"], "guest": {"image": "/a", "filesystem": "xfs"}}, "'none' or 'ext4'"),
    ],
)
def test_a_guest_filesystem_needs_a_real_image_and_is_ext4(data: dict, message: str) -> None:
    from pydantic import ValidationError

    from iomatrix.plan.model import Plan

    with pytest.raises(ValidationError, match=message):
        Plan.model_validate({"name": "p", **data})
    plan = Plan.model_validate(
        {"name": "p", "tier": ["guest"], "guest": {"image": "/a", "filesystem": "ext4"}}
    )
    assert plan.setting("guest_filesystem") == "ext4" and "guest" not in plan.tier_tables
    assert "guest_filesystem" not in Plan.model_validate({"name": "p"}).model_dump()


# Root partition types of the Discoverable Partitions Specification.
ARM64_ROOT = "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"
X86_64_ROOT = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
LINUX_DATA = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"


def _gpt_image(path: Path, root_type: str | None, fmt: str, boot_code: bool = False) -> Path:
    """A 16 MiB disk with an ESP and (`root_type`) a root partition, in `fmt`; `boot_code`: with a
    few bytes of code in its protective MBR, as a boot loader for BIOS puts there."""
    raw = path.with_suffix(".raw")
    subprocess.run(["truncate", "-s", "16M", str(raw)], check=True)
    if root_type is not None:
        args = ["-n", "1:2048:+4M", "-t", "1:EF00", "-n", "2:0:0", "-t", f"2:{root_type}"]
        subprocess.run(["sgdisk", *args, str(raw)], check=True, capture_output=True)
    if boot_code:
        with open(raw, "r+b") as f:
            f.write(b"\xeb\x63\x90")  # GRUB's boot.img starts with this jump
    if fmt == "raw":
        return raw
    subprocess.run(["qemu-img", "convert", "-O", fmt, str(raw), str(path)], check=True)
    raw.unlink()
    return path


@pytest.mark.skipif(shutil.which("sgdisk") is None, reason="sgdisk (gdisk) not installed")
@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_an_image_for_another_architecture_is_refused_in_one_line_before_any_boot(
    tmp_path: Path, fmt: str
) -> None:
    from iomatrix.guest.real_image import image_architecture, resolve_image

    arm = _gpt_image(tmp_path / "arm64.qcow2", ARM64_ROOT, fmt)
    before = arm.read_bytes()
    with pytest.raises(UserError) as err:
        resolve_image(str(arm))
    line = err.value.one_line()
    assert line.startswith(f"guest image {arm} is an arm64 image (its root partition's GPT type)")
    assert "x86-64" in line and "\n" not in line
    assert arm.read_bytes() == before  # only read
    # an x86-64 image, one whose partitions do not say (generic Linux data) and one without a
    # partition table are booted: the boot tells
    x86 = _gpt_image(tmp_path / "x.qcow2", X86_64_ROOT, fmt, boot_code=True)
    assert image_architecture(x86, fmt) == {"x86-64"}
    assert image_architecture(_gpt_image(tmp_path / "g.qcow2", LINUX_DATA, fmt), fmt) == set()
    assert image_architecture(_gpt_image(tmp_path / "n.qcow2", None, fmt), fmt) == set()
    assert resolve_image(str(tmp_path / f"x.{fmt}")).sha256


# --------------------------------------------------------------------------- several runs per boot


def test_the_runs_of_a_shared_boot_get_a_disk_each_with_its_own_serial(tmp_path: Path) -> None:
    image = BootImage(tmp_path / "base.qcow2", "qcow2", tmp_path / "vmlinuz", None, "root=/dev/vda")
    disks = [
        DiskSpec(str(tmp_path / f"d{i}.raw"), "raw", "none", "threads", "virtio-blk")
        for i in range(3)
    ]
    argv = real_guest_argv(
        image, tmp_path / "ov.qcow2", tmp_path, tmp_path / "qga.sock", "tcg", disks
    )
    devices = [a for a in argv if a.startswith("virtio-blk-pci,drive=d")]
    serials = [next(p for p in d.split(",") if p.startswith("serial=")) for d in devices]
    assert serials == [f"serial={disk_serial(i)}" for i in range(3)]
    assert [disk_serial(i) for i in range(3)] == ["iomx-test", "iomx-test1", "iomx-test2"]


def test_the_guests_preparation_before_each_run_parses_and_drops_its_caches() -> None:
    """PREPARE_RUN runs in the guest before every run of a boot: it must parse in a POSIX shell,
    stop at its first failure, unmount an earlier run's filesystem and drop the page cache."""
    sh = shutil.which("dash") or "/bin/sh"
    assert subprocess.run([sh, "-n", "-c", PREPARE_RUN]).returncode == 0
    lines = PREPARE_RUN.splitlines()
    assert lines[0] == "set -e" and lines[-1] == "echo 3 > /proc/sys/vm/drop_caches"
    assert f"umount {FS_MOUNT}" in PREPARE_RUN


def _batch_requests(
    tmp_path: Path, workloads: list[str], target: Target | None = None, null: bool = False
) -> list[RunRequest]:
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["guest"],
            "format": ["raw"],
            "cache": ["none"],
            "bus": ["virtio-blk"],
            "size": "4M",
            "image_size": "8M",
            "runtime": 1,
            "null_ceiling": null,
            "workloads": sorted(set(workloads)),
        }
    )
    units = plan_expansion(plan, None, set()).units
    cell = next(u.cell for u in units if u.cell.is_null_ceiling == null)
    return [
        RunRequest(
            cell=cell,
            workload=resolve(name),
            target=target or Target("dir", tmp_path),
            shape=JobShape(plan.size_bytes, plan.runtime),
            run_dir=tmp_path / "runs" / str(i),
            timeout_s=30,
        )
        for i, name in enumerate(workloads)
    ]


def _context(tmp_path: Path, image_path: Path) -> RealRunContext:
    real = RealImage(BootImage(image_path), "0" * 64, "test")
    (tmp_path / "work").mkdir(exist_ok=True)
    return RealRunContext(real, "tcg", tmp_path / "work", 512)


def test_a_shared_boot_that_cannot_start_fails_each_of_its_runs_in_one_line_and_keeps_no_disk(
    tmp_path: Path,
) -> None:
    """Both runs' disks are made (qemu-img), the boot cannot start (its image is gone): each run
    fails with that one line, none is left unsettled, and both disks are removed."""
    reqs = _batch_requests(tmp_path, ["rand-write-4k", "rand-write-4k"])
    outs = run_real_batch(reqs, _context(tmp_path, tmp_path / "gone.qcow2"), lambda _: 8 << 20)
    assert all(o is not None and not o.ok for o in outs), outs
    for out in outs:
        assert out is not None and out.error is not None and "\n" not in out.error
        assert f"guest image {tmp_path / 'gone.qcow2'} does not exist" in out.error
        assert out.boot_id is None  # no boot came up for it to share
    assert not list(tmp_path.glob("*.raw")), "disks under test left behind"


def test_runs_a_real_image_refuses_settle_without_a_boot_and_the_host_is_still_made_ready(
    tmp_path: Path,
) -> None:
    calls: list[str] = []
    reqs = _batch_requests(tmp_path, ["fs-read", "rand-read-4k"], null=True)
    ctx = _context(tmp_path, tmp_path / "gone.qcow2")
    ctx.filesystem = "ext4"
    outs = run_real_batch(reqs, ctx, lambda _: 8 << 20, host_ready=lambda: calls.append("ready"))
    assert calls == ["ready"]
    assert [
        o is not None and o.error == "the null ceiling has no data to hold a filesystem"
        for o in outs
    ] == [True, True]
    assert not (tmp_path / "runs").exists() and not list(tmp_path.glob("*.raw"))


@pytest.mark.skipif(shutil.which("nbdkit") is None, reason="nbdkit not installed")
def test_a_real_image_boot_on_a_network_backing_records_each_runs_disk_and_gives_them_back(
    tmp_path: Path,
) -> None:
    """On a network backing each run's disk under test is made by the server (a lab nbdkit here),
    through the tier's maker, not as an image file; the boot cannot start (its image is gone): each
    run fails in one line with its network disk recorded, and the server's disks are given back."""
    workdir = tmp_path / "work"
    made: list[NetworkDisk] = []
    with provision(parse_backing({"type": "nbd"}), workdir, set()) as handle:
        server = handle.server
        assert server is not None
        reqs = _batch_requests(
            tmp_path,
            ["rand-write-4k", "rand-write-4k"],
            Target("network", handle.path, server=server),
        )

        def network_disks(
            runs: list[RunRequest], stack: contextlib.ExitStack
        ) -> list[tuple[NetworkDisk, dict]]:
            out = []
            for r in runs:
                name = disk_name("vm", r.workload.slug)
                disk, meta = stack.enter_context(
                    network_disk(server, r.cell, size_bytes=8 << 20, name=name, workdir=workdir)
                )
                made.append(disk)
                out.append((disk, meta))
            return out

        outs = run_real_batch(
            reqs,
            _context(tmp_path, tmp_path / "gone.qcow2"),
            lambda _: 8 << 20,
            network_disks=network_disks,
        )
        assert len(made) == 2
        for out, disk in zip(outs, made, strict=True):
            assert out is not None and not out.ok and "\n" not in (out.error or "")
            assert "does not exist" in (out.error or ""), out.error
            assert out.meta["network_disk"]["url"] == disk.url
            assert out.meta["network_disk"]["protocol"] == "nbd"
            # given back to the server before the backing was torn down
            assert disk.server_path is not None and not disk.server_path.exists()
    assert leftovers.pending(workdir) == []
    assert not list(tmp_path.rglob("*.raw"))


def test_the_filesystem_steps_parse_and_their_output_becomes_the_built_in_guests_figures() -> None:
    """FS_STEPS (the built-in guest's fs-read and fs-write steps, run in a real image through the
    agent) parses in a POSIX shell; what it prints becomes the built-in guest's figures: the timed
    span as workload.seconds, fs.timed_s and fs.untimed_s, each step kept."""
    sh = shutil.which("dash") or "/bin/sh"
    assert subprocess.run([sh, "-n", "-c", FS_STEPS]).returncode == 0
    assert f"virtio-{TAR_SERIAL}" in FS_STEPS and f"M={FS_MOUNT}" in FS_STEPS
    printed = (
        '{"fs": "ext4", "workload": [10.5, 14.0], "steps": ['
        '{"name": "mkfs", "start": 1.0, "end": 3.0}, {"name": "populate_extract", "start": 3.0, '
        '"end": 9.0}, {"name": "find", "start": 10.5, "end": 11.0}, {"name": "tar_list", '
        '"start": 11.0, "end": 14.0}]}\n'
    )
    out = fs_outcome("fs-read on ext4", {}, printed, "", {"wall_s": 20.0})
    assert out.ok and out.metrics["workload.seconds"] == 3.5
    assert out.metrics["fs.timed_s"] == 3.5 and out.metrics["fs.untimed_s"] == 8.0
    assert out.meta["guest_fs_steps"]["populate_extract"] == 6.0
    failed = fs_outcome("fs-read on ext4", {}, "no json", "", {"wall_s": 1.0})
    assert not failed.ok and failed.error == "guest: the filesystem workload printed no steps"
