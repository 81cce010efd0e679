"""Whether a server a network backing names can be reached, asked the way a run would ask it and
bounded in time (issues 50 and 69): `run` refuses a backing that cannot serve before its sweep, and
`plan` says so. Only connects and reads: nothing is written to the server.

Every check of an existing server fits in one :data:`CONNECT_BUDGET_S` (a :class:`Budget` shared by
its steps: the TCP connect, the server's greeting, the protocol tool's own question), and its
refusal names the host, the port and what did not answer: a server that accepts a connection and
then says nothing is the case a plain connect cannot see (issue 69: an NBD server silent for 120 s).
Looking up the server's name is bounded too (:func:`connect`): a connect's own timeout starts only
after getaddrinfo, which waits as long as the resolver's DNS servers stay silent (minutes with a
few dead servers in /etc/resolv.conf).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time

# All the steps of one check of an existing server together (issue 69: ≤ 15 s).
CONNECT_BUDGET_S = 15.0
# The TCP connect alone: a LAN answers a SYN within milliseconds; a firewall that drops it never.
PORTAL_CONNECT_TIMEOUT_S = 5.0
# A greeting a server sends as soon as it accepts (NBD's, a Ceph monitor's banner): milliseconds.
GREETING_TIMEOUT_S = 5.0
# The least time a step is given even when the budget is nearly spent (a tool must start at all).
MIN_STEP_S = 1.0
# Looking up a server's name: a working resolver answers within milliseconds, and glibc's own
# default gives one silent DNS server 5 s before it asks the next, so a lookup this long means the
# resolver's servers do not answer.
RESOLVE_TIMEOUT_S = 5.0


class NameTooSlow(OSError):
    """A host name whose lookup did not finish within the time given; str() says so in one line
    naming the host and what to check."""

    def __init__(self, host: str, timeout_s: float, of: str = "") -> None:
        self.host, self.timeout_s = host, timeout_s
        super().__init__(
            f"the name {host!r}{f' of the {of}' if of else ''} did not resolve within "
            f"{timeout_s:g} s (the DNS servers of /etc/resolv.conf did not answer): check them "
            f"with 'getent hosts {host}', or give the server's IP address"
        )

    def of(self, server: str) -> str:
        """The same line, saying whose name it is ("the NBD server")."""
        return str(NameTooSlow(self.host, self.timeout_s, server))


def resolve(
    host: str, port: int | None = None, timeout_s: float = RESOLVE_TIMEOUT_S
) -> list[tuple[int, tuple]]:
    """(address family, socket address) of each address `host` resolves to for a TCP connection
    to `port`, looked up within `timeout_s`: raises NameTooSlow past it, socket.gaierror when the
    name does not resolve.

    getaddrinfo takes no timeout and cannot be interrupted, so it runs in a daemon thread of its
    own, left behind when it is too slow: it ends when the resolver gives up, and never holds the
    process at exit (a ThreadPoolExecutor's worker would: its threads are joined at exit)."""
    found: list[list[tuple[int, tuple]] | OSError] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            found.append([(family, addr) for family, _t, _p, _c, addr in infos])
        except OSError as err:  # socket.gaierror, or an address family this host lacks
            found.append(err)
        finally:
            done.set()

    threading.Thread(target=lookup, name=f"resolve {host}", daemon=True).start()
    if not done.wait(timeout_s):
        raise NameTooSlow(host, timeout_s)
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


def connect(
    host: str, port: int, timeout_s: float, resolve_s: float = RESOLVE_TIMEOUT_S
) -> socket.socket:
    """A TCP connection to host:port, as socket.create_connection makes it (each address the name
    resolves to, in the resolver's order, until one connects, each within `timeout_s`), but with
    the name's lookup bounded by `resolve_s` (NameTooSlow) as well."""
    last: OSError | None = None
    for family, addr in resolve(host, port, min(resolve_s, timeout_s)):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(addr)
            return sock
        except OSError as err:
            sock.close()
            last = err
    raise last or OSError(f"{host!r} resolves to no address")


class Budget:
    """What is left of :data:`CONNECT_BUDGET_S` (or `total_s`) since it was made."""

    def __init__(self, total_s: float = CONNECT_BUDGET_S) -> None:
        self.total_s = total_s
        self._end = time.monotonic() + total_s

    @property
    def spent(self) -> bool:
        return time.monotonic() >= self._end

    def left(self, at_most: float | None = None) -> float:
        """Seconds left (at least MIN_STEP_S, at most `at_most` when given)."""
        left = max(MIN_STEP_S, self._end - time.monotonic())
        return left if at_most is None else min(left, at_most)


def run_bounded(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """`argv`'s result, or None when it could not start or did not finish within `timeout`."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def portal_problem(host: str, port: int, timeout_s: float = PORTAL_CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to host:port cannot be made (a name that does not resolve, nothing
    listening, no answer within `timeout_s`), in a few words; None when it connects. Only connects:
    nothing is sent."""
    try:
        with connect(host, port, timeout_s):
            return None
    except NameTooSlow as err:
        return str(err)
    except socket.gaierror as err:
        return f"the name {host!r} does not resolve ({err.strerror})"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as err:
        return f"cannot connect to {host}:{port} ({err.strerror or err})"


def greeting_problem(
    host: str, port: int, server: str, greeting: bytes, timeout_s: float = GREETING_TIMEOUT_S
) -> str | None:
    """Why `server` (its name: "NBD server", "Ceph monitor") at host:port does not greet a client
    with `greeting`, the bytes it sends first as soon as it accepts: it cannot be connected to, it
    accepts and stays silent for `timeout_s`, it closes, or it sends something else (another
    service on that port). None when it greets. Reads the greeting only: nothing is sent."""
    host = host.strip("[]")
    where = f"{host}:{port}"
    try:
        sock = connect(host, port, timeout_s)
    except NameTooSlow as err:
        return err.of(server)
    except socket.gaierror as err:
        return f"the name {host!r} of the {server} does not resolve ({err.strerror})"
    except TimeoutError:
        return f"the {server} at {where} did not accept a connection within {timeout_s:g} s"
    except OSError as err:
        return f"cannot connect to the {server} at {where} ({err.strerror or err})"
    got = b""
    end = time.monotonic() + timeout_s
    with sock:
        try:
            while len(got) < len(greeting):
                # (the whole greeting within timeout_s, however slowly it trickles in)
                sock.settimeout(max(0.01, end - time.monotonic()))
                chunk = sock.recv(len(greeting) - len(got))
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            return (
                f"the {server} at {where} accepted the connection but sent no greeting within "
                f"{timeout_s:g} s (a hung server, or another service on that port)"
            )
        except OSError as err:
            return f"the {server} at {where} dropped the connection ({err.strerror or err})"
    if got != greeting:
        seen = f"{got[:16]!r}" if got else "nothing before closing"
        return f"{where} sent {seen}, not the {server}'s greeting: check the host and port"
    return None
