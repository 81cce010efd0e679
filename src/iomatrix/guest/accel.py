"""Choose the accelerator: KVM when a real guest boots under it, else TCG.

`/dev/kvm` existing is not enough: on hosts whose KVM is provided by kvm_pvm (nested PVM), stock
kernels hang after the firmware. So we boot the real artifacts under KVM with a job that only
reports "booted", kill it by pid after `timeout`, and fall back to TCG with the reason recorded.
The verdict is cached in `<cache_dir>/accel.json`, keyed by host kernel release + QEMU version +
guest kernel version, so later runs do not pay the probe again (`reprobe=True` forces it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from iomatrix.errors import UserError
from iomatrix.guest.artifacts import GuestArtifacts
from iomatrix.guest.cache import default_cache_dir
from iomatrix.guest.job import GuestJob
from iomatrix.guest.process import run_guest
from iomatrix.guest.tcg import TCG_WARNING
from iomatrix.hostcmd import version_of


@dataclass(frozen=True)
class AccelChoice:
    accel: Literal["kvm", "tcg"]
    reason: str
    probe_seconds: float = 0.0

    @property
    def warning(self) -> str | None:
        return TCG_WARNING if self.accel == "tcg" else None


def kvm_accessible() -> tuple[bool, str]:
    if not os.path.exists("/dev/kvm"):
        return False, "/dev/kvm does not exist (no KVM on this host)"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user (add it to the kvm group)"
    return True, "/dev/kvm is accessible"


def _probe_key(artifacts: GuestArtifacts) -> str:
    qemu = version_of(["qemu-system-x86_64", "--version"]) or "qemu-unknown"
    return f"{os.uname().release}|{qemu}|{artifacts.kernel_version}"


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _host_module_hint() -> str:
    """A hint for the usual cause of a KVM guest that never boots: /dev/kvm provided by kvm_pvm."""
    if Path("/sys/module/kvm_pvm").exists():
        return " (/dev/kvm is kvm_pvm, which runs only PVM-enabled guest kernels)"
    return ""


def probe_kvm(artifacts: GuestArtifacts, timeout: float = 10.0) -> AccelChoice:
    """Boot the artifacts under KVM with a trivial job; KVM if it reports in time, else TCG."""
    run_dir = Path(tempfile.mkdtemp(prefix="iomatrix-kvm-probe-"))
    start = time.monotonic()
    try:
        out = run_guest(artifacts, "kvm", None, GuestJob(kind="boot"), run_dir, timeout=timeout)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    seconds = round(time.monotonic() - start, 2)
    if out.ok:
        return AccelChoice("kvm", f"KVM probe: guest booted in {seconds:.1f} s", seconds)
    if out.error and "did not finish" in out.error:
        why = (
            f"guest did not reach userspace within {timeout:g} s{_host_module_hint()}"
            if "init" not in out.marks
            else f"guest did not finish within {timeout:g} s"
        )
    else:
        why = out.error or "guest failed"
    return AccelChoice("tcg", f"KVM probe: {why}; using TCG", seconds)


def choose_accel(
    artifacts: GuestArtifacts,
    timeout: float = 10.0,
    force: str | None = None,
    *,
    cache_dir: Path | None = None,
    reprobe: bool = False,
) -> AccelChoice:
    """KVM or TCG for guests built from `artifacts`; `force` ("kvm"/"tcg") skips the probe."""
    if force is not None:
        if force not in ("kvm", "tcg"):
            raise UserError(f"unknown accelerator '{force}'", hint="use kvm or tcg")
        if force == "kvm":
            ok, why = kvm_accessible()
            if not ok:
                raise UserError(f"--accel kvm requested but {why}", hint="use --accel tcg")
        return AccelChoice(force, f"forced by the user ({force})", 0.0)  # type: ignore[arg-type]
    ok, why = kvm_accessible()
    if not ok:
        return AccelChoice("tcg", why, 0.0)
    cache_file = (cache_dir or default_cache_dir()).expanduser() / "accel.json"
    key = _probe_key(artifacts)
    cached = _load(cache_file)
    if not reprobe and key in cached:
        c = cached[key]
        return AccelChoice(
            c["accel"], f"{c['reason']} (cached probe from {c.get('when', '?')})", 0.0
        )
    choice = probe_kvm(artifacts, timeout)
    cached[key] = asdict(choice) | {"when": time.strftime("%Y-%m-%d %H:%M:%S")}
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    # this process's own: two probes at once must not write one file
    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cached, indent=2) + "\n")
    tmp.replace(cache_file)
    return choice
