"""Host metadata recorded with every sweep, so a result can be trusted or
rejected months later (pyperf's _collect_metadata, for a storage host)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from iomatrix import __version__
from iomatrix.hostcmd import version_of


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_metadata() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": _os_release(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "mem_bytes": _mem_bytes(),
        "fio_version": version_of(["fio", "--version"]),
        "qemu_version": version_of(["qemu-system-x86_64", "--version"]),
        "qemu_img_version": version_of(["qemu-img", "--version"]),
        "python_version": platform.python_version(),
        "iomatrix_version": __version__,
        # Knobs that change results; not part of the host's identity.
        "cpu_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "kvm_device": os.path.exists("/dev/kvm"),
        "ksm_run": _read("/sys/kernel/mm/ksm/run"),
        "transparent_hugepage": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "euid": os.geteuid(),
    }
