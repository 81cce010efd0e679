"""Backing specs: validation, labels, O_DIRECT and availability (pruning) rules. Pure and fast."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from iomatrix.backing.spec import (
    BACKING_TYPES,
    BackingSpec,
    format_size,
    kernel_version,
    parse_backing,
    parse_size,
    tmpfs_accepts_o_direct,
)
from iomatrix.errors import UserError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4G", 4 << 30),
        ("512M", 512 << 20),
        ("1.5G", 3 << 29),
        ("64MiB", 64 << 20),
        ("300MB", 300 << 20),
        ("1T", 1 << 40),
        ("8k", 8 << 10),
        (4096, 4096),
        ("4096", 4096),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["4X", "G", "", "-1G", "0", "four", True, 1.5, None])
def test_bad_sizes_name_an_example(bad: object) -> None:
    with pytest.raises(ValueError, match=re.escape('e.g. "4G"')):
        parse_size(bad)


def test_format_size_round_trips() -> None:
    for n in (4 << 30, 1536 << 20, 300 << 20, 4097):
        assert parse_size(format_size(n)) == n


def test_bad_size_in_a_plan_table_is_a_one_line_user_error() -> None:
    with pytest.raises(UserError) as err:
        parse_backing({"type": "tmpfs", "size": "4X"})
    assert "size" in err.value.message and 'e.g. "4G"' in err.value.message
    assert "\n" not in err.value.one_line()


def test_unknown_type_lists_valid_types() -> None:
    with pytest.raises(UserError) as err:
        parse_backing({"type": "cifs"})
    for t in BACKING_TYPES:
        assert t in err.value.message
    assert "'cifs'" in err.value.message


def test_missing_type_lists_valid_types() -> None:
    with pytest.raises(UserError, match=r"missing 'type'.*loopfs"):
        parse_backing({"size": "1G"})


def test_unknown_field_and_bad_fs_are_rejected() -> None:
    with pytest.raises(UserError, match="bogus: unknown field"):
        parse_backing({"type": "tmpfs", "size": "1G", "bogus": 1})
    with pytest.raises(UserError, match="fs"):
        parse_backing({"type": "loopfs", "fs": "zfs", "size": "1G"})


def test_too_small_for_xfs() -> None:
    with pytest.raises(UserError, match=r"too small for xfs.*300M"):
        parse_backing({"type": "loopfs", "fs": "xfs", "size": "100M"})


def test_zvol_needs_size() -> None:
    with pytest.raises(UserError, match="zvol needs a size"):
        parse_backing({"type": "zfs", "pool": "tank", "kind": "zvol"})


def test_labels_and_kinds() -> None:
    cases = [
        ({"type": "dir"}, "dir", "dir", True),
        ({"type": "dir", "path": "/srv/vm"}, "dir:/srv/vm", "dir", True),
        ({"type": "loopfs", "fs": "ext4", "size": "4G"}, "ext4-loop", "dir", True),
        (
            {"type": "loopfs", "fs": "xfs", "size": "4G", "mount_options": ["noatime"]},
            "xfs-loop(noatime)",
            "dir",
            True,
        ),
        (
            {"type": "loopfs", "fs": "ext4", "size": "1G", "mkfs_options": ["-O", "^has_journal"]},
            "ext4-loop[-O ^has_journal]",
            "dir",
            True,
        ),
        ({"type": "blockdev", "device": "/dev/loop7"}, "blockdev:/dev/loop7", "device", True),
        ({"type": "tmpfs", "size": "2G"}, "tmpfs", "dir", tmpfs_accepts_o_direct()),
        ({"type": "lvm", "vg": "vg0", "size": "4G"}, "lvm:vg0", "device", True),
        (
            {"type": "zfs", "pool": "tank", "kind": "zvol", "size": "4G"},
            "zfs:tank/zvol",
            "device",
            True,
        ),
        ({"type": "zfs", "pool": "tank", "kind": "dataset"}, "zfs:tank/dataset", "dir", False),
        ({"type": "tmpfs", "size": "2G", "name": "ram"}, "ram", "dir", tmpfs_accepts_o_direct()),
    ]
    for data, label, kind, odirect in cases:
        spec = parse_backing(data)
        assert spec.label() == label
        assert spec.kind == kind
        assert spec.supports_o_direct() is odirect


def test_dump_round_trips_with_toml_field_names() -> None:
    for data in (
        {"type": "zfs", "pool": "tank", "kind": "zvol", "size": "4G"},
        {"type": "loopfs", "fs": "btrfs", "size": "1536M", "mount_options": ["compress=zstd"]},
    ):
        spec = parse_backing(data)
        dumped = spec.model_dump(mode="json", by_alias=True)
        assert parse_backing(dumped) == spec
        assert dumped["size"] == data["size"]


def test_usable_inside_a_plan_model() -> None:
    class Plan(BaseModel):
        backing: list[BackingSpec]

    plan = Plan.model_validate({"backing": [{"type": "dir"}, {"type": "tmpfs", "size": "1G"}]})
    assert [b.label() for b in plan.backing] == ["dir", "tmpfs"]


def _no_tools(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda p: None if p in missing else real(p))


def test_lvm_and_zfs_unavailable_here_with_reasons() -> None:
    lvm = parse_backing({"type": "lvm", "vg": "vg0", "size": "4G"})
    zfs = parse_backing({"type": "zfs", "pool": "tank", "kind": "dataset"})
    lvm_reason = lvm.availability(set())
    zfs_reason = zfs.availability(set())
    assert lvm_reason is not None and zfs_reason is not None
    # this machine: no lvm2, no ZFS; either the tool (with its package) or the VG/pool is named
    assert "lvm2" in lvm_reason or "vg0" in lvm_reason or "device-mapper" in lvm_reason
    assert "zfsutils-linux" in zfs_reason or "tank" in zfs_reason or "/dev/zfs" in zfs_reason


def test_missing_tool_reason_names_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_tools(monkeypatch, "mkfs.btrfs", "lvcreate", "zfs")
    assert "btrfs-progs" in parse_backing(
        {"type": "loopfs", "fs": "btrfs", "size": "1G"}
    ).availability(set())
    assert "lvm2" in parse_backing({"type": "lvm", "vg": "vg0", "size": "1G"}).availability(set())
    assert "zfsutils-linux" in parse_backing(
        {"type": "zfs", "pool": "tank", "kind": "zvol", "size": "1G"}
    ).availability(set())


def test_not_root_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "not root" in parse_backing({"type": "loopfs", "fs": "ext4", "size": "1G"}).availability(
        set()
    )
    assert "not root" in parse_backing({"type": "tmpfs", "size": "1G"}).availability(set())
    assert parse_backing({"type": "dir"}).availability(set()) is None


def test_blockdev_needs_allow_destroy() -> None:
    spec = parse_backing({"type": "blockdev", "device": "/dev/loop7"})
    reason = spec.availability(set())
    assert reason is not None and "--allow-destroy /dev/loop7" in reason
    other = spec.availability({Path("/dev/loop6")})
    assert other is not None and "--allow-destroy" in other


def test_dir_with_missing_path(tmp_path: Path) -> None:
    assert parse_backing({"type": "dir", "path": str(tmp_path)}).availability(set()) is None
    reason = parse_backing({"type": "dir", "path": str(tmp_path / "nope")}).availability(set())
    assert reason is not None and "does not exist" in reason


def test_tmpfs_o_direct_is_keyed_on_the_kernel_version() -> None:
    # shmem gained O_DIRECT in Linux 6.6; the release strings are real ones (Debian, Fedora, this
    # host).
    assert kernel_version("6.18.44-fc-v769") == (6, 18)
    assert kernel_version("garbage") == (0, 0)
    for release, accepts in [
        ("6.1.0-28-amd64", False),
        ("6.5.13", False),
        ("6.6.0", True),
        ("6.12.9+bpo-amd64", True),
        ("5.15.0-91-generic", False),
        ("10.0", True),
    ]:
        assert tmpfs_accepts_o_direct(release) is accepts, release
