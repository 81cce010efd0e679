"""sshd's privilege separation directory, shared by every iomatrix user on the machine that runs its
own sshd: tests/client_hosts.py through this module, scripts/fleet-demo through
scripts/sshd-privsep.sh (the same rule in bash, on the same lock and marker).

Debian's sshd has /run/sshd compiled in: each connection's pre-authentication child chroots into
it, so an sshd whose /run/sshd is gone resets every new connection during key exchange (what a
fleet demo beside a second suite saw: another suite's client hosts had removed the directory they
had made while the demo's sshds still ran). A host without the openssh-server service has no
/run/sshd (it lives on a tmpfs; the service makes it), so whoever runs an sshd here makes it, and
must remove only what iomatrix made, and only when no one else's sshd needs it any more.

The rule, for every user (a reader/writer lock; flock(2), which the kernel drops when its holder
dies, so a killed user never leaves it held):

- while its sshds run, a user holds a shared lock on LOCK, and makes /run/sshd if missing,
  writing MARKER (beside the lock) when it made it;
- at the end, once its sshds are gone, it lets its shared lock go and tries the exclusive lock
  without waiting: only when it gets it (no one else holds the shared lock, so no one else's sshd
  runs) and MARKER is there does it remove /run/sshd and MARKER.

So the last user out removes the directory, never one while another still uses it, and a host's own
/run/sshd (no MARKER: not iomatrix's) is never touched. The marker is written under the shared lock
and read under the exclusive one, so no one sees a half-made state. A user killed with SIGKILL
leaves the directory and the marker: the next last user out removes them."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tests.bounded_flock import flock_within

PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd (_PATH_PRIVSEP_CHROOT_DIR)
LOCK = Path("/run/lock/iomatrix-sshd-privsep.lock")
MARKER = Path("/run/lock/iomatrix-sshd-privsep.made-by-iomatrix")
# The exclusive lock is only ever tried without waiting, and held for an rmdir: a shared lock that
# is not granted within this is a holder that hangs (a bug), not a queue.
WAIT_S = 60.0


def _open_lock() -> int:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    # O_CLOEXEC: the processes this one starts (sshd among them) must not hold the lock on its
    # behalf after it has let it go.
    return os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def _shared(fd: int, wait_s: float) -> None:
    if not flock_within(fd, fcntl.LOCK_SH, wait_s, 0.05):
        raise AssertionError(
            f"{LOCK} held exclusively for over {wait_s:g} s (it is held only while "
            f"{PRIVSEP_DIR} is removed): find the holder with `fuser -v {LOCK}`"
        )


def enter(wait_s: float = WAIT_S) -> int:
    """Take the shared lock and make PRIVSEP_DIR if it is missing (and MARKER then); returns the
    lock's file descriptor, for `leave`."""
    fd = _open_lock()
    try:
        _shared(fd, wait_s)
        try:
            PRIVSEP_DIR.mkdir(mode=0o755)
        except FileExistsError:
            pass  # the host's own, or another iomatrix user's (whose MARKER is there already)
        else:
            os.chmod(PRIVSEP_DIR, 0o755)  # sshd refuses a group- or world-writable one
            MARKER.touch()
    except BaseException:
        os.close(fd)
        raise
    return fd


def leave(fd: int) -> bool:
    """Let the shared lock go (call it once this user's sshds are gone); remove PRIVSEP_DIR and
    MARKER if no one else holds the lock and iomatrix made the directory. True when removed."""
    os.close(fd)
    # A new open file, not a conversion of the shared lock: flock's conversion is not atomic, and
    # a lock still shared with a process that inherited it would be converted with it.
    fd = _open_lock()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another user's sshds run: the last one out removes it
        if not MARKER.exists():
            return False  # the host's own /run/sshd, or none
        try:
            PRIVSEP_DIR.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False  # not empty: not only sshd's; left with its marker
        MARKER.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)  # the lock file stays: removing it would let two users lock two files


@contextlib.contextmanager
def sshd_privsep(wait_s: float = WAIT_S) -> Iterator[None]:
    """PRIVSEP_DIR present for the block, shared with every other iomatrix user by the rule above.
    Stop this user's sshds before the block ends."""
    fd = enter(wait_s)
    try:
        yield
    finally:
        leave(fd)


def holders() -> int:
    """How many open files hold a lock on LOCK now (/proc/locks, waiters aside): 0 when no iomatrix
    user's sshd runs. A test's check of who is out last; the rule itself never needs it."""
    if not LOCK.exists():
        return 0
    st = LOCK.stat()
    file_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return sum(
        1
        for line in Path("/proc/locks").read_text().splitlines()
        if line.split()[1:2] == ["FLOCK"] and file_id in line.split()
    )
