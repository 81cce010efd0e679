"""An flock taken with a bounded wait, for the tests' machine-wide locks (the host's lab NFS, sshd's
/run/sshd, the client hosts' address ranges, the fleet demo): a test session beside another waits
for it, but never for ever. Each caller says in its own words what a wait that ran out means."""

from __future__ import annotations

import fcntl
import time


def flock_within(fd: int, operation: int, wait_s: float, poll_s: float) -> bool:
    """Take `operation` (fcntl.LOCK_EX or LOCK_SH) on `fd`, trying every `poll_s` seconds for at
    most `wait_s`: whether it was granted. Polled rather than a blocking flock, which no timeout
    can end short of a signal."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
