"""What the installed QEMU offers: its versions and the properties of the devices the matrix's rules
ask about.

The parsing functions are pure (tests feed them captured output, tests/data/qemu_caps/);
:func:`probe` runs ``qemu-system-x86_64 -device NAME,help`` for each device of
:data:`PROBED_DEVICES`, ``qemu-system-x86_64 --version`` and ``qemu-storage-daemon --version`` once
per process (≈ 0.2 s each) and hands the facts to the matrix expansion (``axes.RuleContext.qemu``).
Where a binary is missing its facts are absent, and the rules that need them do not apply (the run
itself then fails with the missing binary's own message)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from iomatrix.domain import axes
from iomatrix.domain.axes import QemuFacts
from iomatrix.plan.model import Plan

# The devices whose properties decide an axis value (axes.VIRTIO_PROBED_DEVICE).
PROBED_DEVICES = ("virtio-blk-pci", "virtio-scsi-pci")
PROBE_TIMEOUT_S = 30

_VERSION = re.compile(r"version (\d+)\.(\d+)(?:\.(\d+))?")
# "  num-queues=<uint16>    -  (default: 65535)": a property line of `-device NAME,help`.
_PROPERTY = re.compile(r"^\s+([A-Za-z0-9_.-]+)=<")


def parse_version(text: str) -> tuple[int, ...] | None:
    """(major, minor, micro) from ``--version`` output ('QEMU emulator version 7.2.22 (Debian
    …)')."""
    m = _VERSION.search(text)
    if m is None:
        return None
    return tuple(int(x) for x in m.groups(default="0"))


def parse_device_properties(text: str) -> frozenset[str]:
    """The property names listed by ``-device NAME,help``."""
    return frozenset(m.group(1) for line in text.splitlines() if (m := _PROPERTY.match(line)))


def _output(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def probe() -> QemuFacts:
    """The installed QEMU's facts (cached for the process; absent parts where a binary is
    missing)."""
    system = shutil.which("qemu-system-x86_64")
    daemon = shutil.which("qemu-storage-daemon")
    system_version = daemon_version = None
    props: dict[str, frozenset[str]] = {}
    if system is not None:
        text = _output([system, "--version"])
        system_version = parse_version(text) if text else None
        for device in PROBED_DEVICES:
            text = _output([system, "-device", f"{device},help"])
            if text:
                props[device] = parse_device_properties(text)
    if daemon is not None:
        text = _output([daemon, "--version"])
        daemon_version = parse_version(text) if text else None
    return QemuFacts(
        system_version=system_version, daemon_version=daemon_version, device_properties=props
    )


def plan_needs_facts(plan: Plan) -> bool:
    """Whether a plan names a later axis away from its default: only then can a rule need QEMU's
    facts (a plan that does not name the new axes expands without running QEMU, exactly as
    before)."""
    places = [
        (None, None),
        *((t, None) for t in plan.tier_tables),
        *((t, w) for t, tables in plan.workload_tables.items() for w in tables),
    ]
    return any(
        plan.axis_values(a.name, tier, workload) != [a.default]
        for a in axes.axes()
        if not a.always_named and not a.free_values
        for tier, workload in places
    )


def facts_for(plan: Plan) -> QemuFacts | None:
    return probe() if plan_needs_facts(plan) else None
