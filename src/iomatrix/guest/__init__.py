"""Guest tier: boot a tiny Linux guest under QEMU and run fio or filesystem workloads on a disk.

Public API (see docs/guest.md):
  ensure_artifacts / artifact_info / GuestArtifacts      kernel + initramfs, built once and cached
  choose_accel / AccelChoice / TCG_WARNING               KVM if a probe guest boots, else TCG
  create_image / remove_image                            qemu-img images for a cell
  run_guest / DiskSpec / GuestJob / GuestOutcome          one guest run
  kill_all_guests                                        SIGKILL every live QEMU child (on interrupt)
  ensure_tarball                                         the filesystem-workload tarball

The names are imported when first asked (`iomatrix.lazy_names`): a report that reads the kernel
command line or the TCG warning does not import the guest's process, artifact and image code.
"""  # noqa: E501

from __future__ import annotations

from iomatrix.lazy_names import lazy_names

_WHERE = {
    "TCG_WARNING": "tcg",
    "AccelChoice": "accel",
    "choose_accel": "accel",
    "GuestArtifacts": "artifacts",
    "artifact_info": "artifacts",
    "ensure_artifacts": "artifacts",
    "GuestJob": "job",
    "DISK_PLACEHOLDER": "job",
    "kill_all_guests": "process",
    "run_guest": "process",
    "GuestOutcome": "stream",
    "ensure_tarball": "tarball",
    "create_image": "iomatrix.images",
    "remove_image": "iomatrix.images",
    "DiskSpec": "iomatrix.qemu_block",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
