# shellcheck shell=bash disable=SC2034  # privsep_held: read by the script that sources this
# Sourced by scripts/fleet-demo (not run): sshd's privilege separation directory /run/sshd, shared with every other
# iomatrix user on this machine that runs an sshd, by the rule tests/sshd_privsep.py states and the tests follow.
#
# Debian's sshd has /run/sshd compiled in: each connection's pre-authentication child chroots into it, so an sshd
# whose /run/sshd is gone resets every new connection during key exchange. While its sshds run, a user holds a
# shared lock on privsep_lock and makes /run/sshd if missing, with privsep_marker saying iomatrix made it. At the
# end it lets its lock go and tries the exclusive one without waiting: only when it gets it (no one else's sshd
# runs) and the marker is there does it remove /run/sshd and the marker. So the last user out removes it, never one
# while another still uses it, and a host's own /run/sshd (no marker) is never touched.
#
# privsep_enter holds the lock on fd 7, which the processes started meanwhile inherit: stop them all before
# privsep_leave. One left running would only keep /run/sshd (the next last user out removes it), never have it
# removed under another user's sshd.
privsep_lock=/run/lock/iomatrix-sshd-privsep.lock
privsep_marker=/run/lock/iomatrix-sshd-privsep.made-by-iomatrix
privsep_held=0  # 1 while this process holds the shared lock (the sourcing script's cleanup reads it)

privsep_enter() {
    exec 7>>"$privsep_lock"
    if ! flock -s -w 60 7; then  # the exclusive lock is held only for an rmdir
        echo "${0##*/}: $privsep_lock held exclusively for over 60 s; find the holder: fuser -v $privsep_lock" >&2
        exit 1
    fi
    privsep_held=1
    if mkdir -m 0755 /run/sshd 2>/dev/null; then : >"$privsep_marker"; fi
}

privsep_leave() {
    exec 7>&-
    privsep_held=0
    # Only with the exclusive lock (no one else's sshd runs) and the marker (iomatrix made it); the marker goes with
    # the directory (an rmdir refused, not empty: both stay).
    # shellcheck disable=SC2016  # $1 is expanded by that sh: the marker's path
    flock -n -x "$privsep_lock" sh -c \
        '[ -e "$1" ] || exit 0; rmdir /run/sshd 2>/dev/null; [ -d /run/sshd ] || rm -f "$1"' sh "$privsep_marker" \
        || true
}
