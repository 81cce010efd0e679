"""Guest tier: boot a tiny Linux guest under QEMU and run fio or filesystem workloads on a disk.

Public API (see docs/guest.md):
  ensure_artifacts / artifact_info / GuestArtifacts      kernel + initramfs, built once and cached
  choose_accel / AccelChoice / TCG_WARNING               KVM if a probe guest boots, else TCG
  create_image / remove_image                            qemu-img images for a cell
  run_guest / DiskSpec / GuestJob / GuestOutcome          one guest run
  kill_all_guests                                        SIGKILL every live QEMU child (on interrupt)
  ensure_tarball                                         the filesystem-workload tarball
"""  # noqa: E501

from iomatrix.fio.jobs import GUEST_DISK_PLACEHOLDER as DISK_PLACEHOLDER
from iomatrix.guest.accel import TCG_WARNING, AccelChoice, choose_accel
from iomatrix.guest.artifacts import GuestArtifacts, artifact_info, ensure_artifacts
from iomatrix.guest.job import GuestJob
from iomatrix.guest.process import kill_all_guests, run_guest
from iomatrix.guest.stream import GuestOutcome
from iomatrix.guest.tarball import ensure_tarball
from iomatrix.images import create_image, remove_image
from iomatrix.qemu_block import DiskSpec

__all__ = [
    "DISK_PLACEHOLDER",
    "TCG_WARNING",
    "AccelChoice",
    "DiskSpec",
    "GuestArtifacts",
    "GuestJob",
    "GuestOutcome",
    "artifact_info",
    "choose_accel",
    "create_image",
    "ensure_artifacts",
    "ensure_tarball",
    "kill_all_guests",
    "remove_image",
    "run_guest",
]
