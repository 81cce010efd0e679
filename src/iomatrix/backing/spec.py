"""Host storage backings: the `[[backing]]` tables of a plan.

Each backing says *where* the images / fio files of a cell live on the host:
a plain directory, a fresh filesystem on a loop device, a whole block device,
tmpfs, an LVM logical volume or a ZFS dataset/zvol.  The models here are pure:
they validate, label and decide availability; `iomatrix.backing.provision`
creates and tears them down.

The union of these local backings is open: a network protocol's backing (a disk an iSCSI target, an
NFS or NBD server or a Ceph cluster serves) is a spec of its own, built on `BackingSpecBase` in that
protocol's backing module and named by the protocol (`NetworkProtocol.spec`); `parse_backing` and
the plan read a table of that type with it (`backing.network.plugin_spec_class`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from iomatrix.backing.fsoptions import check_mkfs_options, check_mount_options
from iomatrix.backing.network import (
    existing_server_problem,
    network_server,
    plugin_spec_class,
    valid_backing_types,
)
from iomatrix.errors import UserError
from iomatrix.hostcmd import PACKAGE_OF
from iomatrix.safety import check_destroyable

# The label of the null ceiling (matrix.NULL_BACKING); a user backing of that name would be mistaken
# for it.
RESERVED_NAME = "null"
# Pseudo-filesystems: not somewhere to put test files.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
# Host directories a dir backing may not be, nor be inside (docs/backings.md): the system's own
# files and runtime state, where a full disk or a leftover breaks the host.
SYSTEM_ROOTS = (
    *PSEUDO_ROOTS,
    "/run",
    "/boot",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
)
# Host directories a dir backing may not be itself (a directory inside them is fine): iomatrix makes
# and later deletes its own `dir-…` directories in the backing's path, which must not sit at the top
# of the host.
HOST_ROOTS = ("/", "/var", "/home", "/root", "/opt", "/srv")
# The local backings; a network protocol's backing type is its name, its spec its own
# (`NetworkProtocol.spec`, read by `plugin_spec_class`).
BACKING_TYPES = ("dir", "loopfs", "blockdev", "tmpfs", "lvm", "zfs")
LOOP_FILESYSTEMS = ("ext4", "xfs", "btrfs")

# Smallest filesystems mkfs accepts (measured: mkfs.xfs 6.1 refuses < 300 MiB,
# mkfs.btrfs 6.2 refuses 64 MiB and accepts 110 MiB).
MIN_FS_SIZE = {"ext4": 16 << 20, "xfs": 300 << 20, "btrfs": 128 << 20}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# Linux caps files and block devices at 8 EiB; anything near that is a typo, not a disk.
MAX_SIZE = 1 << 60
SIZE_EXAMPLE = (
    'use a number with a binary unit, e.g. "4G", "512M" or "1.5G" (K/M/G/T = KiB/MiB/GiB/TiB)'
)


def parse_size(value: object) -> int:
    """Parse "4G", "512M", "1.5GiB", "300MB" or an int into bytes (units are binary)."""
    if isinstance(value, bool):
        raise ValueError(f"bad size {value!r}: {SIZE_EXAMPLE}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE_RE.match(value) if len(value) <= 64 else None
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"bad size {value[:40]!r}: {SIZE_EXAMPLE}")
        # Exact decimal arithmetic: float() turns a 400-digit number into inf (OverflowError).
        size = int(Fraction(m.group(1)) * _UNITS[unit])
    else:
        raise ValueError(f"bad size {value!r}: {SIZE_EXAMPLE}")
    if size <= 0:
        raise ValueError(f"bad size {value!r}: must be > 0; {SIZE_EXAMPLE}")
    if size > MAX_SIZE:
        raise ValueError(
            f"bad size {str(value)[:40]!r}: larger than {format_size(MAX_SIZE)} "
            f"(no disk or file is that big); {SIZE_EXAMPLE}"
        )
    return size


def format_size(size: int) -> str:
    """Shortest exact human form: 4294967296 -> "4G", 1536 MiB -> "1536M"."""
    for suffix, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % mult == 0:
            return f"{size // mult}{suffix}"
    return str(size)


Size = Annotated[int, BeforeValidator(parse_size), PlainSerializer(format_size, return_type=str)]


def missing_tools(*programs: str) -> str | None:
    for prog in programs:
        if shutil.which(prog) is None:
            return f"'{prog}' is not installed (apt-get install {PACKAGE_OF.get(prog, prog)})"
    return None


def not_root(what: str) -> str | None:
    if os.geteuid() != 0:
        return f"not root: {what} needs root (run iomatrix as root or drop this backing)"
    return None


class _Spec(BaseModel):
    # defer_build: a model's validator is built when it first validates, not at import: a report
    # imports these models for their names and never validates one (issue 52: 0.09 s of every
    # `recommend`); what a plan validates is the same, built once it is needed.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str | None = Field(
        default=None, max_length=64, description="optional label overriding the derived one"
    )

    @field_validator("name")
    @classmethod
    def _name_not_reserved(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or not v.isprintable()):
            # a label shown in every table, report and snippet comment: an escape in it would act on
            # a terminal
            raise ValueError(
                f"name {v[:40]!r} is empty or holds control characters; write a short printable "
                'label, e.g. name = "san-a"'
            )
        if v is not None and v.strip().lower() == RESERVED_NAME:
            raise ValueError(
                f"name '{v}' is reserved for the null ceiling (QEMU's null-co driver); "
                "choose another name"
            )
        return v

    # -- interface every backing implements -------------------------------------------------
    def _derived_label(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def label(self) -> str:
        """Short, stable label used in results and reports ("ext4-loop", "tmpfs", ...)."""
        return self.name or self._derived_label()

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        """Where images/fio files go: "dir" (files in a directory), "device" (the whole device) or
        "network" (disks a server makes: backing.network)."""
        return "dir"

    @property
    def protocol(self) -> str | None:
        """The network protocol of a network backing ("iscsi", "nfs"); None for a local one."""
        return None

    def supports_o_direct(self) -> bool:
        """Whether cache=none/directsync (O_DIRECT) can run on this backing."""
        return True

    def availability(self, allowed_devices: set[Path]) -> str | None:
        """None if this backing can be provisioned on this host, else the reason."""
        return None

    def serving_problem(self, allowed_devices: set[Path]) -> str | None:
        """Why the existing server this backing names cannot serve it (a bounded, read-only check
        over the network), None where it can, where the backing has no server of its own, or where
        `availability` already says this host cannot use it. `run` refuses a plan with such a
        backing before its sweep starts. Here: its protocol's `existing_check`."""
        return existing_server_problem(self)

    @property
    def plan_checks_server(self) -> bool:
        """Whether `iomatrix plan` runs `serving_problem` itself: only where the check mounts, maps
        and writes nothing (a command that only looks); elsewhere `plan` says the server is checked
        only when run."""
        return False

    def provision_server(
        self, workdir: Path, scratch: Path, td: Any, allowed_devices: set[Path]
    ) -> tuple[Any, dict[str, Any]]:
        """(the NetworkServer of a network backing, started or checked; the metadata every result of
        it carries), its leftovers recorded with `td.record` before they exist and its stop added
        with `td.add_step`; `scratch` is the backing's own directory, `allowed_devices` what the
        user handed over (--allow-destroy): the seam every protocol's backing spec fills
        (backing.provision calls it for every network backing). Here: its protocol's
        `lab_server`."""
        return network_server(self, workdir, scratch, td, allowed_devices)


# The base of every backing spec, a plug-in protocol's too (iomatrix.protocols: `spec`).
BackingSpecBase = _Spec


class DirBacking(_Spec):
    """An existing directory (default: the plan's working directory)."""

    type: Literal["dir"] = "dir"
    path: Path | None = None

    @field_validator("path")
    @classmethod
    def _path_not_a_kernel_interface(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        real = os.path.realpath(v)
        for root in SYSTEM_ROOTS:
            if real == root or real.startswith(root + "/"):
                what = (
                    "a kernel interface" if root in PSEUDO_ROOTS else "the host's own system files"
                )
                raise ValueError(
                    f"path {v} is under {root}, {what}, not a place for test files; "
                    "name a directory on a real filesystem"
                )
        if real in HOST_ROOTS:
            raise ValueError(
                f"path {v} is a host root ({real}); name a directory of its own inside it, "
                f"e.g. {real.rstrip('/')}/iomatrix-scratch"
            )
        return v

    def _derived_label(self) -> str:
        return "dir" if self.path is None else f"dir:{self.path}"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        if self.path is None:
            return None
        if not self.path.is_dir():
            return f"directory {self.path} does not exist (create it or fix 'path')"
        if not os.access(self.path, os.W_OK | os.X_OK):
            return f"directory {self.path} is not writable by this user"
        return None


class LoopfsBacking(_Spec):
    """A fresh filesystem on a loop device over a sparse file in the working directory."""

    type: Literal["loopfs"] = "loopfs"
    fs: Literal["ext4", "xfs", "btrfs"]
    size: Size
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check_options(self) -> LoopfsBacking:
        check_mkfs_options(self.fs, self.mkfs_options)
        check_mount_options(self.fs, self.mount_options)
        return self

    @model_validator(mode="after")
    def _check_min_size(self) -> LoopfsBacking:
        minimum = MIN_FS_SIZE[self.fs]
        if self.size < minimum:
            raise ValueError(
                f"size {format_size(self.size)} is too small for {self.fs}: "
                f"mkfs.{self.fs} needs at "
                f'least {format_size(minimum)}, e.g. size = "{format_size(max(minimum, 1 << 30))}"'
            )
        return self

    def _derived_label(self) -> str:
        label = f"{self.fs}-loop"
        if self.mkfs_options:
            label += "[" + " ".join(self.mkfs_options) + "]"
        if self.mount_options:
            label += "(" + ",".join(self.mount_options) + ")"
        return label

    def availability(self, allowed_devices: set[Path]) -> str | None:
        return (
            missing_tools("losetup", f"mkfs.{self.fs}", "mount", "umount")
            or not_root("a loop device and mount")
            or (
                None
                if Path("/dev/loop-control").exists()
                else "/dev/loop-control is missing (modprobe loop)"
            )
        )


class BlockdevBacking(_Spec):
    """A whole block device whose contents may be destroyed (needs --allow-destroy DEVICE)."""

    type: Literal["blockdev"] = "blockdev"
    device: Path

    def _derived_label(self) -> str:
        return f"blockdev:{self.device}"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "device"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        try:
            check_destroyable(self.device, allowed_devices)
        except UserError as exc:
            return exc.one_line()
        return None


# tmpfs accepts O_DIRECT (as a no-op: it has no device below it) since Linux 6.6 (commit "shmem: add
# support for O_DIRECT", e88e0d366f9c); before that, open(O_DIRECT) fails with EINVAL.
TMPFS_O_DIRECT_SINCE = (6, 6)


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a kernel release string such as "6.18.44-fc-v769"; (0, 0) when
    unreadable."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def tmpfs_accepts_o_direct(release: str | None = None) -> bool:
    """Whether tmpfs on this kernel (or on `release`) opens files with O_DIRECT. Keyed on the kernel
    version so a plan can be expanded before anything is mounted; provisioning records the real
    probe beside it (``o_direct_probe`` in the backing's metadata)."""
    return (
        kernel_version(release if release is not None else os.uname().release)
        >= TMPFS_O_DIRECT_SINCE
    )


class TmpfsBacking(_Spec):
    """A tmpfs mounted under the working directory (RAM; O_DIRECT only on Linux ≥ 6.6)."""

    type: Literal["tmpfs"] = "tmpfs"
    size: Size

    def _derived_label(self) -> str:
        return "tmpfs"

    def supports_o_direct(self) -> bool:
        return tmpfs_accepts_o_direct()

    def availability(self, allowed_devices: set[Path]) -> str | None:
        return missing_tools("mount", "umount") or not_root("mounting tmpfs")


def _quiet(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


class LvmBacking(_Spec):
    """A fresh logical volume in an existing volume group (used as a whole device)."""

    type: Literal["lvm"] = "lvm"
    vg: str = Field(pattern=r"^[A-Za-z0-9+_.][A-Za-z0-9+_.-]*$")
    size: Size

    def _derived_label(self) -> str:
        return f"lvm:{self.vg}"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "device"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        reason = (
            missing_tools("lvcreate", "lvremove", "vgs")
            or not_root("creating a logical volume")
            or (
                None
                if Path("/dev/mapper/control").exists()
                else "device-mapper is not available on this host (/dev/mapper/control missing)"
            )
        )
        if reason:
            return reason
        out = _quiet(["vgs", "--noheadings", "-o", "vg_name", self.vg])
        if out is None or out.returncode != 0 or out.stdout.strip() != self.vg:
            return f"volume group '{self.vg}' does not exist (see: vgs)"
        return None


class ZfsBacking(_Spec):
    """A fresh ZFS dataset (files, no O_DIRECT) or zvol (whole device) in an existing pool."""

    type: Literal["zfs"] = "zfs"
    pool: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.:/-]*$")
    zfs_kind: Literal["dataset", "zvol"] = Field(alias="kind")
    size: Size | None = None

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, defer_build=True
    )  # defer_build: as _Spec's

    @model_validator(mode="after")
    def _zvol_needs_size(self) -> ZfsBacking:
        if self.zfs_kind == "zvol" and self.size is None:
            raise ValueError('a zvol needs a size, e.g. size = "8G"')
        return self

    @model_serializer(mode="wrap")
    def _dump_kind_as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # the TOML field is `kind`; the attribute is `zfs_kind` because `kind` means dir/device
        data = handler(self)
        if isinstance(data, dict) and "zfs_kind" in data:
            data["kind"] = data.pop("zfs_kind")
        return data

    def _derived_label(self) -> str:
        return f"zfs:{self.pool}/{self.zfs_kind}"

    @property
    def kind(self) -> Literal["dir", "device", "network"]:
        return "device" if self.zfs_kind == "zvol" else "dir"

    def supports_o_direct(self) -> bool:
        # ZFS datasets refused O_DIRECT until OpenZFS 2.3; zvols are block devices and accept it.
        return self.zfs_kind == "zvol"

    def availability(self, allowed_devices: set[Path]) -> str | None:
        reason = (
            missing_tools("zfs")
            or not_root("creating a ZFS dataset or zvol")
            or (
                None
                if Path("/dev/zfs").exists()
                else "the ZFS kernel module is not loaded (/dev/zfs missing)"
            )
        )
        if reason:
            return reason
        out = _quiet(["zfs", "list", "-H", "-o", "name", self.pool])
        if out is None or out.returncode != 0:
            return f"ZFS pool/dataset '{self.pool}' does not exist (see: zfs list)"
        return None


# Loadable modules live in the multiarch library directory (/usr/lib/x86_64-linux-gnu/… on amd64):
# one lookup for every backing's QEMU block driver and server plugin.
def _library_module(relative: str) -> Path | None:
    """A module under /usr/lib/<multiarch>/ (or /usr/lib/), if installed."""
    found = sorted(Path("/usr/lib").glob(f"*/{relative}")) or sorted(
        Path("/usr/lib").glob(relative)
    )
    return found[0] if found else None


def missing_module(relative: str, package: str) -> str | None:
    """One line naming a missing module and the package that has it, or None."""
    if _library_module(relative) is not None:
        return None
    return f"/usr/lib/<arch>/{relative} is missing (apt-get install {package})"


BackingSpec = Annotated[
    DirBacking | LoopfsBacking | BlockdevBacking | TmpfsBacking | LvmBacking | ZfsBacking,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[BackingSpec] = TypeAdapter(BackingSpec)
# The specs of that union: a plan's other backings are a plug-in protocol's (plugin_spec_class).
BUILT_IN_SPECS: tuple[type[_Spec], ...] = (
    DirBacking,
    LoopfsBacking,
    BlockdevBacking,
    TmpfsBacking,
    LvmBacking,
    ZfsBacking,
)


def _types() -> str:
    return ", ".join(valid_backing_types(BACKING_TYPES))


def _describe(err: ValidationError, where: str, tagged: bool = True) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"][int(tagged) :])  # drop the union tag
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid":
            tag = e.get("input", {}).get("type") if isinstance(e.get("input"), dict) else None
            msg = f"unknown backing type {tag!r}: valid types are {_types()}"
            loc = "type"
        elif e["type"] == "union_tag_not_found":
            msg = f"missing 'type': valid types are {_types()}"
            loc = "type"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"{where}: " + "; ".join(parts)


def parse_backing(data: dict, *, where: str = "[[backing]]") -> BackingSpec:
    """Validate one `[[backing]]` table; raise UserError with a one-line explanation."""
    plugin = plugin_spec_class(data, BACKING_TYPES)
    try:
        if plugin is not None:
            return plugin.model_validate(data)  # type: ignore[return-value]
        return _ADAPTER.validate_python(data)
    except ValidationError as err:
        raise UserError(_describe(err, where, tagged=plugin is None)) from None
