"""The snippets print the QEMU disk the tiers measure through the one QEMU disk builder
(`iomatrix.qemu_block`), without borrowing the guest tier's package."""

from __future__ import annotations

import subprocess
import sys

from iomatrix import qemu_block
from iomatrix.guest import cmdline
from iomatrix.snippets import DiskConfig, qemu_argv


def test_snippets_import_no_module_of_the_guest_package() -> None:
    # The tier registry and its declaration base may load (the fio job builder asks a tier's
    # declaration for its page-cache wording): they import no tier's code; the guest package and
    # tier implementations must not.
    code = (
        "import sys, iomatrix.snippets, iomatrix.current; "
        "print(sorted(m for m in sys.modules if m.startswith('iomatrix.guest') or "
        "m.startswith('iomatrix.tiers')"
        " and m not in ('iomatrix.tiers', 'iomatrix.tiers.declaration')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_guest_command_line_and_the_snippet_share_one_device_builder() -> None:
    # guest.cmdline re-exports the builder's functions: one implementation, not a copy.
    assert (
        cmdline.device_args is qemu_block.device_args and cmdline.disk_args is qemu_block.disk_args
    )
    cfg = DiskConfig.from_axes(
        {
            "format": "qcow2",
            "cache": "none",
            "aio": "native",
            "bus": "virtio-scsi-single",
            "iothread": "on",
            "queues": "2",
        }
    )
    spec = qemu_block.DiskSpec.for_cell(cfg.axis_values(), "/images/vm.qcow2")
    assert qemu_argv(cfg, "/images/vm.qcow2")[2:] == qemu_block.device_args(
        spec, "disk0", "disk0", report_errors=False
    )
