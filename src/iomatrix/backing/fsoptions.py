"""Which `mkfs_options` / `mount_options` a `loopfs` backing may carry, per filesystem.

These lists end up on a root command line (`mkfs.<fs> … /dev/loopN`, `mount -o …`).
mkfs and mount accept options that name *other* devices and files — btrfs takes extra
devices as positional arguments, xfs `-l logdev=` / `-r rtdev=`, ext4 `-J device=` and
`-d root-directory`, mount `logdev=`, `rtdev=`, `device=`, `journal_path=` — and a shared
plan that used them overwrote a device nobody handed over (issue #14). So each option is
checked against an **allowlist** of flags (and, for key=value sub-options, of keys), no
value may contain a '/' (no path, no device node), and nothing positional is accepted.
Everything here tunes the one filesystem on the one loop device iomatrix created.
"""

from __future__ import annotations

import re

# A value may be a number with a unit, a keyword, a feature list ("^has_journal,extent"), a label:
# never a path (no '/'), never a second option (no ',' in a mount option, no whitespace).
_VALUE = re.compile(r"[A-Za-z0-9_.:^+=,\-]{1,128}")
_MOUNT_VALUE = re.compile(r"[A-Za-z0-9_.:+\-]{1,64}")

# mkfs flag -> None (takes no value), "value" (a free value, checked by _VALUE), or a set of
# allowed sub-option keys for "key=value,key=value" values.
_EXT4_MKFS: dict[str, str | frozenset[str] | None] = {
    "-b": "value",
    "-C": "value",
    "-E": frozenset(
        {
            "lazy_itable_init",
            "lazy_journal_init",
            "stride",
            "stripe_width",
            "stripe-width",
            "resize",
            "packed_meta_blocks",
            "root_owner",
            "nodiscard",
            "discard",
            "num_backup_sb",
            "assume_storage_prezeroed",
            "mmp_update_interval",
            "quotatype",
            "encoding",
            "encoding_flags",
            "orphan_file_size",
            "test_fs",
        }
    ),
    "-F": None,
    "-g": "value",
    "-G": "value",
    "-i": "value",
    "-I": "value",
    "-j": None,
    "-J": frozenset({"size", "fast_commit_size"}),
    "-L": "value",
    "-m": "value",
    "-M": "value",
    "-N": "value",
    "-O": "value",
    "-q": None,
    "-r": "value",
    "-T": "value",
    "-U": "value",
    "-v": None,
}
_XFS_MKFS: dict[str, str | frozenset[str] | None] = {
    "-b": frozenset({"size"}),
    "-m": frozenset({"crc", "finobt", "uuid", "rmapbt", "reflink", "bigtime", "inobtcount"}),
    "-d": frozenset(
        {
            "agcount",
            "agsize",
            "su",
            "sunit",
            "sw",
            "swidth",
            "noalign",
            "cowextsize",
            "extszinherit",
            "daxinherit",
        }
    ),
    "-i": frozenset(
        {"size", "perblock", "maxpct", "align", "attr", "projid32bit", "sparse", "nrext64"}
    ),
    "-l": frozenset({"size", "version", "sunit", "su", "lazy-count", "internal"}),
    "-n": frozenset({"size", "version", "ftype"}),
    "-s": frozenset({"size"}),
    "-f": None,
    "-K": None,
    "-L": "value",
    "-q": None,
}
_BTRFS_MKFS: dict[str, str | frozenset[str] | None] = {
    "-d": "value",
    "--data": "value",
    "-m": "value",
    "--metadata": "value",
    "-M": None,
    "--mixed": None,
    "-n": "value",
    "--nodesize": "value",
    "-s": "value",
    "--sectorsize": "value",
    "-O": "value",
    "--features": "value",
    "-R": "value",
    "--runtime-features": "value",
    "-L": "value",
    "--label": "value",
    "-U": "value",
    "--uuid": "value",
    "-f": None,
    "--force": None,
    "-K": None,
    "--nodiscard": None,
    "--csum": "value",
    "--checksum": "value",
    "-b": "value",
    "--byte-count": "value",
    "-q": None,
    "--quiet": None,
}
MKFS_ALLOWED = {"ext4": _EXT4_MKFS, "xfs": _XFS_MKFS, "btrfs": _BTRFS_MKFS}

_COMMON_MOUNT = frozenset(
    {
        "noatime",
        "relatime",
        "strictatime",
        "nostrictatime",
        "lazytime",
        "nolazytime",
        "atime",
        "nodiratime",
        "diratime",
        "sync",
        "async",
        "dirsync",
        "rw",
        "nosuid",
        "nodev",
        "noexec",
        "iversion",
        "noiversion",
    }
)
MOUNT_ALLOWED: dict[str, frozenset[str]] = {
    "ext4": _COMMON_MOUNT
    | {
        "barrier",
        "nobarrier",
        "data",
        "commit",
        "journal_async_commit",
        "journal_checksum",
        "nojournal_checksum",
        "discard",
        "nodiscard",
        "delalloc",
        "nodelalloc",
        "dioread_nolock",
        "dioread_lock",
        "auto_da_alloc",
        "noauto_da_alloc",
        "inode_readahead_blks",
        "stripe",
        "max_batch_time",
        "min_batch_time",
        "journal_ioprio",
        "errors",
        "init_itable",
        "noinit_itable",
        "block_validity",
        "noblock_validity",
        "nombcache",
        "prefetch_block_bitmaps",
        "no_prefetch_block_bitmaps",
    },
    "xfs": _COMMON_MOUNT
    | {
        "allocsize",
        "attr2",
        "noattr2",
        "discard",
        "nodiscard",
        "inode32",
        "inode64",
        "largeio",
        "nolargeio",
        "logbufs",
        "logbsize",
        "noalign",
        "nouuid",
        "wsync",
        "swalloc",
        "sunit",
        "swidth",
        "filestreams",
        "grpid",
        "nogrpid",
        "bsdgroups",
        "sysvgroups",
        "ikeep",
        "noikeep",
    },
    "btrfs": _COMMON_MOUNT
    | {
        "compress",
        "compress-force",
        "space_cache",
        "nospace_cache",
        "clear_cache",
        "ssd",
        "nossd",
        "ssd_spread",
        "nossd_spread",
        "discard",
        "nodiscard",
        "autodefrag",
        "noautodefrag",
        "commit",
        "datacow",
        "nodatacow",
        "datasum",
        "nodatasum",
        "flushoncommit",
        "noflushoncommit",
        "max_inline",
        "thread_pool",
        "barrier",
        "nobarrier",
        "treelog",
        "notreelog",
        "norecovery",
    },
}

# Keys whose values are themselves an allowlist: `errors=panic` would make a filesystem error in a
# test image crash the whole host, which a benchmark must never risk.
MOUNT_VALUES_ALLOWED: dict[str, dict[str, frozenset[str]]] = {
    "ext4": {"errors": frozenset({"continue", "remount-ro"})},
}

_NAMES_A_PATH = "refused: it names a path or device; only iomatrix's own loop device is formatted"


def check_mkfs_options(fs: str, options: tuple[str, ...]) -> None:
    """Raise ValueError (one line: the option and the fix) unless every mkfs option is allowed for
    `fs`."""
    allowed = MKFS_ALLOWED[fs]
    i = 0
    while i < len(options):
        opt = options[i]
        if not isinstance(opt, str) or not opt.startswith("-"):
            raise ValueError(
                f"mkfs_options: {opt!r} is not an option ({_NAMES_A_PATH}); options start "
                'with \'-\', values are the next item: ["-b", "4096"]'
            )
        flag, attached = opt, None
        if opt.startswith("--") and "=" in opt:
            flag, attached = opt.split("=", 1)
        if flag not in allowed:
            raise ValueError(
                f"mkfs_options: '{flag}' is not allowed for mkfs.{fs}; allowed: "
                f"{' '.join(sorted(allowed))} (see docs/backings.md)"
            )
        kind = allowed[flag]
        if kind is None:
            if attached is not None:
                raise ValueError(f"mkfs_options: '{flag}' takes no value")
            i += 1
            continue
        if attached is None:
            if i + 1 >= len(options):
                raise ValueError(f"mkfs_options: '{flag}' needs a value as the next item")
            value = options[i + 1]
            i += 2
        else:
            value = attached
            i += 1
        if not _VALUE.fullmatch(value):
            raise ValueError(
                f"mkfs_options: value {value[:40]!r} of '{flag}' is {_NAMES_A_PATH}"
                if "/" in value
                else f"mkfs_options: value {value[:40]!r} of '{flag}' has characters other than "
                "letters, digits and _ . : ^ + = , -"
            )
        if isinstance(kind, frozenset):
            for sub in value.split(","):
                key = sub.split("=", 1)[0]
                if key not in kind:
                    raise ValueError(
                        f"mkfs_options: '{flag} {key}' is not allowed for mkfs.{fs}"
                        + (
                            f" ({_NAMES_A_PATH})"
                            if key
                            in ("logdev", "rtdev", "device", "file", "name", "protofile", "root")
                            else ""
                        )
                        + f"; allowed with {flag}: {', '.join(sorted(kind))}"
                    )


def check_mount_options(fs: str, options: tuple[str, ...]) -> None:
    """Raise ValueError unless every mount option is an allowed key for `fs` with a path-free
    value."""
    allowed = MOUNT_ALLOWED[fs]
    for opt in options:
        if not isinstance(opt, str) or "," in opt or not opt:
            raise ValueError(
                f'mount_options: {opt!r}: give one option per item, e.g. ["noatime", "commit=60"]'
            )
        key, _, value = opt.partition("=")
        if key not in allowed:
            hint = (
                f" ({_NAMES_A_PATH})"
                if key
                in (
                    "logdev",
                    "rtdev",
                    "device",
                    "journal_path",
                    "journal_dev",
                    "usrjquota",
                    "grpjquota",
                    "subvol",
                    "context",
                )
                else ""
            )
            raise ValueError(
                f"mount_options: '{key}' is not allowed for {fs}{hint}; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        if "=" in opt and not _MOUNT_VALUE.fullmatch(value):
            raise ValueError(
                f"mount_options: value {value[:40]!r} of '{key}' is "
                + (_NAMES_A_PATH if "/" in value else "not a plain number or keyword")
            )
        values = MOUNT_VALUES_ALLOWED.get(fs, {}).get(key)
        if values is not None and value not in values:
            panic = " (it would crash the host on a filesystem error)" if value == "panic" else ""
            raise ValueError(
                f"mount_options: '{opt}' is not allowed for {fs}{panic}; allowed: "
                f"{', '.join(f'{key}={v}' for v in sorted(values))}"
            )
