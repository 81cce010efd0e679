"""One client of a contention run on another host (`[[backing.client_host]]`,
backing/client_host.py).

What a local client is (tiers/contention.py: a qemu-storage-daemon serving the cell's graph on the
shared backend over NBD, and a ``fio --server`` whose working directory holds the NBD socket)
started on the client host over SSH by a short POSIX shell script (`REMOTE_SCRIPT`), so a host needs
only what a measuring host has (QEMU's storage daemon, fio; the fleet role's measure install), not
iomatrix itself.

The script's life is tied to this host's ssh process: it waits on its standard input, which is the
SSH channel, and when that ends (the run is over and iomatrix closes it, or iomatrix and its ssh
were killed, SIGKILL included, and sshd closed the channel) it stops the fio server's and the
daemon's process groups and removes its directory; so it does on SIGHUP, SIGTERM and SIGPIPE (a
channel closed while it was still starting: its "ready" line has nowhere to go). The ssh process is
a child like any other (children.spawn: in the leftovers ledger before it runs, killed by the kernel
when iomatrix dies), so nothing outlives a run on either side. Should the script itself be killed,
its children die with it (setpriv --pdeathsig); its directory then stays in /tmp."""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from iomatrix import children
from iomatrix.backing.client_host import ClientHost

READY = "ready"
FAILED = "failed"
# Bounded waits inside the script (tenths of a second): the daemon's socket, the fio server's port.
_SCRIPT_WAIT_TENTHS = 600
# fio on a host the fleet role installed with its measuring profile (its default install directory):
# the controller-built fio is copied beside iomatrix's interpreter there, not onto PATH
# (fio/host_build.py).
ROLE_FIO = "/opt/iomatrix/.venv/bin/fio"
# The script. Arguments: the fio server's address and port, then the daemon's command line. Each
# child is started under setsid (a process group of its own, so the fio server's forked job
# processes are stopped with it) and setpriv --pdeathsig (util-linux: it dies with the script,
# should the script itself be killed). The port is listening when /proc/net/tcp (or tcp6) lists it
# in state 0A (LISTEN).
REMOTE_SCRIPT = f"""set -u
addr=$1; port=$2; shift 2
d=$(mktemp -d /tmp/iomatrix-client.XXXXXX) || {{ echo "{FAILED} mktemp in /tmp failed"; exit 1; }}
cd "$d" || exit 1
qsd=""; fs=""
stop() {{
    for p in $fs $qsd; do kill -TERM "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
    wait
    tail -n 5 daemon.log fio-server.log >&2 2>/dev/null  # into iomatrix's ssh log: why a client failed
    cd / && rm -rf "$d"
}}
trap 'stop; exit 0' HUP INT TERM PIPE
setsid setpriv --pdeathsig TERM "$@" </dev/null >daemon.log 2>&1 &
qsd=$!
i=0
while [ ! -S nbd.sock ]; do
    if ! kill -0 "$qsd" 2>/dev/null || [ "$i" -ge {_SCRIPT_WAIT_TENTHS} ]; then
        echo "{FAILED} qemu-storage-daemon did not serve: $(tail -n 3 daemon.log | tr '\\n' ' ')"; stop; exit 1
    fi
    i=$((i + 1)); sleep 0.1
done
fio=fio; command -v fio >/dev/null 2>&1 || fio={ROLE_FIO}
setsid setpriv --pdeathsig TERM "$fio" --server="ip:$addr,$port" </dev/null >fio-server.log 2>&1 &
fs=$!
hex=$(printf ':%04X' "$port")
i=0
listening() {{
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null \\
        | awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {{ f = 1 }} END {{ exit !f }}'
}}
until listening; do
    if ! kill -0 "$fs" 2>/dev/null || [ "$i" -ge {_SCRIPT_WAIT_TENTHS} ]; then
        echo "{FAILED} fio --server on $addr port $port did not listen: $(tail -n 3 fio-server.log | tr '\\n' ' ')"
        stop; exit 1
    fi
    i=$((i + 1)); sleep 0.1
done
echo "{READY} $d"
read -r _ || true
stop
"""  # noqa: E501
# ssh, the daemon's graph and the fio server, on a loaded host: generous, and bounded
READY_WAIT_S = 120.0


def remote_argv(host: ClientHost, daemon_argv: Sequence[str]) -> list[str]:
    """The ssh command line that runs `REMOTE_SCRIPT` on `host` with the daemon's command line. ssh
    joins the words after the destination into one line for the remote shell, so each is quoted once
    here."""
    words = [
        "sh",
        "-c",
        REMOTE_SCRIPT,
        "iomatrix-client",
        host.fio_address,
        str(host.port),
        *daemon_argv,
    ]
    return [*host.ssh_argv(), " ".join(shlex.quote(w) for w in words)]


def parse_status(line: str) -> tuple[str, str]:
    """("ready", remote directory) or ("failed", why) from one line the script printed; ("", line)
    otherwise (a remote shell's start-up may print before the script runs)."""
    word, _, rest = line.strip().partition(" ")
    return (word, rest) if word in (READY, FAILED) else ("", line.strip())


@dataclass
class RemoteClient:
    """The ssh process running one client host's side of a contention run."""

    host: ClientHost
    log_path: Path
    proc: subprocess.Popen | None = None
    remote_dir: str = ""
    # lines the remote printed that are not the script's status
    said: list[str] = field(default_factory=list)

    def start(self, daemon_argv: Sequence[str]) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = children.spawn(
                remote_argv(self.host, daemon_argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )

    def await_ready(self, deadline: float) -> str | None:
        """Wait (bounded by `deadline`, monotonic) for the script's status; why the client is not
        ready, or None."""
        assert self.proc is not None and self.proc.stdout is not None
        out: IO[bytes] = self.proc.stdout
        pending = b""
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"client host {self.host.label}: not ready within {READY_WAIT_S:g} s"
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(out.fileno(), 4096)
                if not chunk:
                    self.proc.wait(timeout=10)
                    return (
                        f"client host {self.host.label}: ssh ended with status "
                        f"{self.proc.returncode} before "
                        f"the client was ready: {self.ssh_error()}"
                    )
                pending += chunk
                while b"\n" in pending:
                    raw, pending = pending.split(b"\n", 1)
                    status, rest = parse_status(raw.decode(errors="replace"))
                    if status == READY:
                        self.remote_dir = rest
                        return None
                    if status == FAILED:
                        return f"client host {self.host.label}: {rest}"
                    if rest:
                        self.said.append(rest)

    def ssh_error(self) -> str:
        """The last lines of ssh's standard error: why it could not connect or run the script, or,
        once the script stopped, the last lines of the host's daemon and fio server logs."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").strip()
            if text:
                return " ".join(text.splitlines()[-4:])
        return " ".join(self.said[-2:]) or "no message"

    def stop(self, grace_s: float) -> None:
        """End the SSH channel (the script then stops its children and removes its directory) and
        wait for ssh to exit, `grace_s` at most before killing it (sshd then closes the channel
        anyway)."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=max(grace_s, 0.01))
        except subprocess.TimeoutExpired:
            children.kill(proc)
        finally:
            with contextlib.suppress(OSError, ValueError):
                if proc.stdout is not None:
                    proc.stdout.close()
            children.release(proc)
