"""Host metadata recorded with every sweep, so a result can be trusted or
rejected months later (pyperf's _collect_metadata, for a storage host)."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from iomatrix import __version__
from iomatrix.hostcmd import program_path, version_of
from iomatrix.sysfs import read_text


def cpu_model() -> str | None:
    """This host's CPU model ('AMD EPYC'), as a sweep records it; None where neither /proc/cpuinfo
    nor the platform says."""
    for line in (read_text("/proc/cpuinfo", strip=False) or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _mem_bytes() -> int | None:
    for line in (read_text("/proc/meminfo", strip=False) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def mem_bytes() -> int | None:
    """This host's RAM in bytes (MemTotal), as a sweep records it; None where /proc/meminfo does not
    say."""
    return _mem_bytes()


def _os_release() -> str | None:
    for line in (read_text("/etc/os-release", strip=False) or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def host_metadata() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": _os_release(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "mem_bytes": _mem_bytes(),
        "fio_version": version_of(["fio", "--version"]),
        # Which fio: Debian's (/usr/bin/fio) or the one a fleet's measuring install copied beside
        # iomatrix (built on the controller from the same Debian source, fewer engines:
        # fio/host_build.py).
        "fio_path": program_path("fio"),
        # The same QEMU build either way (Debian's one source package); a measuring-only install
        # (setup.sh --minimal) has no qemu-system-x86, only the storage daemon.
        "qemu_version": version_of(["qemu-system-x86_64", "--version"])
        or version_of(["qemu-storage-daemon", "--version"]),
        "qemu_img_version": version_of(["qemu-img", "--version"]),
        "python_version": platform.python_version(),
        "iomatrix_version": __version__,
        # Knobs that change results; not part of the host's identity.
        "cpu_governor": read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "kvm_device": os.path.exists("/dev/kvm"),
        "ksm_run": read_text("/sys/kernel/mm/ksm/run"),
        "transparent_hugepage": read_text("/sys/kernel/mm/transparent_hugepage/enabled"),
        "euid": os.geteuid(),
        # The name a fleet's inventory gives the host (the Ansible role sets it): fleet reports name
        # the host by it, and it joins the host's identity, so that two hosts sharing a hostname
        # stay two hosts. The machine id is recorded beside it (not identifying: cloned images share
        # one).
        "host_label": os.environ.get("IOMATRIX_HOST_LABEL") or None,
        "machine_id": read_text("/etc/machine-id"),
    }
