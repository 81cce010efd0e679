"""Reading a filesystem checker's answer (pure: exit status and output in, clean or not and why
out).

``xfs_repair -n`` (no-modify mode) exits 0 when it found nothing to repair and 1 when it found
corruption; everything else it prints is progress ("Phase 3 - ...", "        - agno = 0") or remarks
about the host ("Cannot get host filesystem geometry" when it checks an image file). A dirty log is
not corruption but makes the check meaningless: xfs_repair -n then says the log "is being ignored"
and warns of spurious findings, so the log must be replayed first (by mounting a copy:
:mod:`iomatrix.tiers.durability`). A check that ran on a dirty log is never called clean."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Lines xfs_repair -n prints on a healthy filesystem (progress, and remarks about checking an image
# file).
_PROGRESS = re.compile(
    r"^\s*(Phase \d+ - |- |No modify flag set|Cannot get host filesystem geometry|Repair "
    r"may fail if there is a "
    r"sector size mismatch|the image and the host filesystem|$)"
)
_DIRTY_LOG = re.compile(
    r"metadata changes in a log|log which (is being ignored|needs to be replayed)", re.I
)
FINDINGS_CAP = 8


@dataclass(frozen=True)
class FsCheck:
    """One checker run: `clean` only when the checker exited 0 on a replayed (clean) log.
    `findings`: what it printed besides progress (on exit 0 only remarks, kept as evidence)."""

    clean: bool
    dirty_log: bool = False
    findings: list[str] = field(default_factory=list)  # the checker's complaints (capped)

    def summary(self) -> str:
        if self.clean:
            return "clean"
        what = "dirty log (not replayed)" if self.dirty_log else "not clean"
        return f"{what}: {' | '.join(self.findings)}" if self.findings else what


def read_xfs_repair(returncode: int, output: str) -> FsCheck:
    """The verdict of ``xfs_repair -n`` from its exit status and combined stdout/stderr."""
    # Its search for a secondary superblock prints a row of dots before what it found.
    lines = (line.strip().lstrip(".") for line in output.splitlines() if not _PROGRESS.match(line))
    findings = [line for line in lines if line]
    dirty = bool(_DIRTY_LOG.search(output))
    clean = returncode == 0 and not dirty
    if not clean and not findings:
        findings = [f"exit status {returncode}"]
    return FsCheck(clean, dirty, findings[:FINDINGS_CAP])
