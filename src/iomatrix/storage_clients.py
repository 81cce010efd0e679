"""Whether this host's kernel can be the client of a shared-storage backing: open-iscsi with the
iscsi_tcp module (``initiator = "kernel"``), the kernel NFS client with mount.nfs (``nfs_client =
"kernel"``).

QEMU's own clients (libiscsi, libnfs: ``qemu-block-extra``) need nothing from the kernel; the
kernel's need its modules and their user-space tools, which containers and minimal VMs often lack.
:func:`backing_facts` hands what is found to the matrix
(``axes.BackingFacts.kernel_client_missing``), whose rules prune a kernel-client cell with the
reason instead of letting it fail mid-run. The decisions (:func:`iscsi_missing`,
:func:`nfs_missing`, :func:`krbd_missing`) are pure; each protocol's lab module reads the host for
them once per process (its ``probe_kernel_client``, the protocol's ``kernel_probe``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from iomatrix.domain.axes import BackingFacts
from iomatrix.plugins import load_object
from iomatrix.protocol_registry import network_protocol

if TYPE_CHECKING:
    from iomatrix.backing.client_host import ClientHost
    from iomatrix.backing.spec import BackingSpec

CLIENT_HOST_CONNECT_S = 5  # ssh's ConnectTimeout for the check before a sweep
CLIENT_HOST_CHECK_S = 20  # the whole check (connect, key exchange, `true`), bounded


def iscsi_missing(iscsiadm: str | None, module_known: bool) -> str | None:
    """Why the kernel initiator cannot be used, given where iscsiadm is (None: not found) and
    whether the kernel has iscsi_tcp (loaded, built in or installed as a module); None where it
    can."""
    missing = []
    if iscsiadm is None:
        missing.append("no iscsiadm (Debian package open-iscsi)")
    if not module_known:
        missing.append("no iscsi_tcp kernel module (loaded or installed)")
    return "; ".join(missing) + " on this host" if missing else None


def nfs_missing(mount_nfs: str | None, filesystem_known: bool) -> str | None:
    """Why the kernel NFS client cannot be used, given where mount.nfs is and whether the kernel has
    the nfs filesystem (in /proc/filesystems, or as an installed module); None where it can."""
    missing = []
    if mount_nfs is None:
        missing.append("no mount.nfs (Debian package nfs-common)")
    if not filesystem_known:
        missing.append(
            "no NFS client in this kernel (nfs is not in /proc/filesystems and no nfs module is "
            "installed)"
        )
    return "; ".join(missing) + " on this host" if missing else None


def module_known(
    name: str, sys_root: Path = Path("/sys"), modules_root: Path = Path("/lib/modules")
) -> bool:
    """Whether kernel module `name` is loaded or built in (/sys/module/NAME) or installed for the
    running kernel (NAME.ko, possibly compressed, under /lib/modules/RELEASE: modprobe can load
    it)."""
    if (sys_root / "module" / name).exists():
        return True
    tree = modules_root / os.uname().release
    return tree.is_dir() and any(True for _ in tree.rglob(f"{name}.ko*"))


def filesystems(text: str) -> Iterable[str]:
    """The filesystem names of /proc/filesystems (a line is 'nodev\tNAME' or '\tNAME')."""
    return (line.split()[-1] for line in text.splitlines() if line.split())


def krbd_missing(rbd_cli: str | None, module_known: bool) -> str | None:
    """Why the kernel's RBD client (krbd) cannot be used, given where the rbd tool is (it maps
    images) and whether the kernel has the rbd module; None where it can."""
    missing = []
    if rbd_cli is None:
        missing.append("no rbd tool (Debian package ceph-common)")
    if not module_known:
        missing.append("no rbd kernel module (loaded or installed)")
    return "; ".join(missing) + " on this host" if missing else None


def kernel_client_missing(protocol: str | None) -> str | None:
    """Why this host's kernel client for `protocol` cannot be used; None where it can or for a local
    backing."""
    network = network_protocol(protocol)
    if network is None or network.kernel_probe is None:
        return None
    return load_object(network.kernel_probe)()


def client_hosts_unreachable(spec: BackingSpec) -> str | None:
    """Why a backing's client hosts (`[[backing.client_host]]`) cannot be reached from here: no ssh
    client, or an ssh_config file that does not exist. Whether each host answers is each run's to
    find (one line per run)."""
    hosts = getattr(spec, "client_host", ())
    if not hosts:
        return None
    if shutil.which("ssh") is None:
        return (
            "its client hosts are reached over SSH and 'ssh' is not installed (apt-get "
            "install openssh-client)"
        )
    for host in hosts:
        if host.ssh_config is not None and not host.ssh_config.is_file():
            return f"client host {host.label}: ssh_config {host.ssh_config} is not a file"
    return None


def client_host_problem(host: ClientHost, timeout_s: float = CLIENT_HOST_CHECK_S) -> str | None:
    """Why `host` cannot be reached over SSH as a run would reach it (``ssh -o BatchMode=yes …
    true``: no password prompt, a bounded connect), in one line; None when it answers. Runs nothing
    on the host but `true`."""
    argv = [*host.ssh_argv(connect_timeout_s=CLIENT_HOST_CONNECT_S), "true"]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return (
            f"client host {host.label} ({host.ssh}) did not answer over SSH within {timeout_s:g} s"
        )
    if out.returncode != 0:
        lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
        return (
            f"client host {host.label} ({host.ssh}) cannot be reached over SSH: "
            f"{lines[-1].strip() if lines else f'ssh exit {out.returncode}'}"
        )
    return None


def backing_facts(spec: BackingSpec, allowed: set[Path]) -> BackingFacts:
    """What the matrix needs to know of a plan's backing on this host (the runner's backing_facts
    for each)."""
    protocol = getattr(spec, "protocol", None)  # a network spec's protocol; None on a local one
    return BackingFacts(
        unavailable=spec.availability(allowed) or client_hosts_unreachable(spec),
        o_direct=spec.supports_o_direct(),
        is_device=spec.kind == "device",
        protocol=protocol,
        kernel_client_missing=kernel_client_missing(protocol),
        lab_started=None if protocol is None else bool(getattr(spec, "lab_started", True)),
        client_hosts=len(getattr(spec, "client_host", ())),
    )
