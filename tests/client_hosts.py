"""Client hosts for tests of contention runs across hosts: network namespaces with their own sshd,
and an iSCSI target (tgtd) on this side that they share, as scripts/fleet-demo makes its hosts.

Host n is namespace ``ixc<pid><letter>-n`` with a veth pair: 10.X.n.1 on this side, 10.X.n.2
inside, where its sshd listens (a generated host key; this side logs in as root with a generated
client key, through an ssh_config file). 10.X.0.0/16 is a range no one on this machine uses when the
hosts are made (free_subnet), so that two test runs side by side (two CI runs' suites) each get
their own. The namespaces have one route, to the target's portal (10.X.1.1): nothing else is
reachable from them, and the only addresses contacted are these. sshd's /run/sshd is shared with
every other iomatrix user on the machine (tests/sshd_privsep.py). Everything (namespaces, veths,
sshd and every process in the namespaces, tgtd with its LUN file and control socket) is removed on
exit, also after a failed assertion."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import random
import shutil
import signal
import string
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.bounded_flock import flock_within
from tests.sshd_privsep import sshd_privsep

# The ranges 10.X.0.0/16 the hosts may use, the first free one taken (free_subnet): not 10.231, the
# fleet demo's (scripts/fleet-demo checks it is free and would refuse to start).
SUBNETS = tuple(f"10.{x}" for x in range(236, 252))
# Held while a range is picked and its addresses are put on this side's veths: the next picker then
# sees them in use. Held for seconds; a wait past SUBNET_WAIT_S is a holder that hangs.
SUBNET_LOCK = Path("/run/lock/iomatrix-client-hosts-subnet.lock")
SUBNET_WAIT_S = 120.0
PORTAL_PORT = 3260
_MADE = itertools.count()  # sets of client hosts this process has made
READY_S = 30.0  # sshd and tgtd start in well under a second; bounded for a loaded host

SSHD_CONFIG = """ListenAddress {address}:22
HostKey {key}
PidFile {dir}/sshd.pid
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
MaxStartups 100
LogLevel ERROR
"""


@dataclass
class ClientHosts:
    """What the test's plan names: the hosts' ssh destinations and the ssh_config reaching them, and
    the LUN."""

    addresses: list[str]
    ssh_config: Path
    namespaces: list[str]
    portal: str
    iqn: str
    sshd_pids: frozenset[int]
    lun: int = 1

    @property
    def lun_url(self) -> str:
        return f"iscsi://{self.portal}/{self.iqn}/{self.lun}"

    def backing_toml(self) -> str:
        hosts = "".join(
            f'[[backing.client_host]]\nssh = "root@{a}"\nssh_config = "{self.ssh_config}"\n'
            for a in self.addresses
        )
        return (
            f'[[backing]]\ntype = "iscsi"\nname = "san"\nportal = "{self.portal}"\niqn = '
            f'"{self.iqn}"\n'
            f"lun = {self.lun}\n{hosts}"
        )

    def processes(self) -> list[str]:
        """The processes running in the hosts' namespaces other than their sshd listeners: "pid
        command" each."""
        out = []
        for ns in self.namespaces:
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True
            ).stdout.split()
            for pid in (int(p) for p in pids if int(p) not in self.sshd_pids):
                with contextlib.suppress(OSError):
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    out.append(f"{pid} {argv[0].decode(errors='replace')}")
        return out


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + READY_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {READY_S:g} s")
        time.sleep(0.05)


@contextlib.contextmanager
def _exclusive(lock: Path, wait_s: float, why: str) -> Iterator[None]:
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not flock_within(fd, fcntl.LOCK_EX, wait_s, 0.1):
            raise AssertionError(
                f"{lock} held for over {wait_s:g} s by another process ({why}): find it "
                f"with `fuser -v {lock}`"
            )
        yield
    finally:
        os.close(fd)


def _in_use() -> list[ipaddress.IPv4Interface]:
    """Every IPv4 address of this side (its namespace) with its prefix, and every route's
    destination and gateway: what a new range must not hold."""
    found = []
    for argv in (["ip", "-o", "-4", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for word in out.split():
            with contextlib.suppress(ValueError):
                found.append(ipaddress.IPv4Interface(word))
    return found


def free_subnet() -> str:
    """The first of SUBNETS ("10.X") that holds no address, route or gateway of this side (a route
    to a wider range, a VPN's 10.0.0.0/8, does not count: the hosts' /24s are more specific). Call
    it with SUBNET_LOCK held, and hold it until the range's addresses are up."""
    used = _in_use()
    for subnet in SUBNETS:
        network = ipaddress.IPv4Network(f"{subnet}.0.0/16")
        if not any(u.ip in network or u.network.subnet_of(network) for u in used):
            return subnet
    raise AssertionError(
        f"every range of {SUBNETS[0]}.0.0/16 to {SUBNETS[-1]}.0.0/16 is in use on this machine "
        "(`ip -4 addr`, `ip -4 route show table all`): client hosts need one free"
    )


def _listening(ns: str | None, address: str, port: int) -> bool:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    out = subprocess.run(
        [*prefix, "ss", "-Hltn", f"src {address}:{port}"], capture_output=True, text=True
    ).stdout
    return bool(out.strip())


@contextlib.contextmanager
def client_hosts(tmp: Path, count: int = 2, lun_size: str = "256M") -> Iterator[ClientHosts]:
    """`count` namespaced hosts with sshd, and a tgtd on 10.X.1.1 with one LUN they all log in
    to."""
    # sshd's privilege separation directory: made when the host has none, removed by the last
    # iomatrix user out (another test run's client hosts, a fleet demo), after this one's sshds.
    with sshd_privsep():
        yield from _client_hosts(tmp, count, lun_size)


def _client_hosts(tmp: Path, count: int, lun_size: str) -> Iterator[ClientHosts]:
    # Unique on the machine: the process id, and a letter per set of hosts this process has made
    # (two at once in one test); short, as an interface's name is at most 15 characters.
    tag = f"ixc{os.getpid()}{string.ascii_lowercase[next(_MADE) % 26]}"
    namespaces: list[str] = []
    veths: list[str] = []
    daemons: list[subprocess.Popen] = []
    tgtd: subprocess.Popen | None = None
    ctl = 0
    try:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "client_key"))
        shutil.copy(tmp / "client_key.pub", tmp / "authorized_keys")
        # A range no one uses, taken by putting its addresses on this side's veths under the lock.
        with _exclusive(SUBNET_LOCK, SUBNET_WAIT_S, "picking a range for client hosts"):
            subnet = free_subnet()
            for n in range(1, count + 1):
                ns, veth, peer = f"{tag}-{n}", f"{tag}a{n}", f"{tag}b{n}"
                _run("ip", "netns", "add", ns)
                namespaces.append(ns)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
                veths.append(veth)
                _run("ip", "link", "set", peer, "netns", ns)
                _run("ip", "addr", "add", f"{subnet}.{n}.1/24", "dev", veth)
                _run("ip", "link", "set", veth, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "addr", "add", f"{subnet}.{n}.2/24", "dev", peer)
                _run("ip", "-n", ns, "link", "set", peer, "up")
                if n != 1:  # the portal is on host 1's veth here: one route to it, nothing else
                    _run(
                        "ip", "-n", ns, "route", "add", f"{subnet}.1.1/32", "via", f"{subnet}.{n}.1"
                    )
        known = []
        addresses = []
        for n, ns in enumerate(namespaces, start=1):
            inside = f"{subnet}.{n}.2"
            hdir = tmp / f"host{n}"
            hdir.mkdir()
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hdir / "host_key"))
            known.append(f"{inside} {' '.join((hdir / 'host_key.pub').read_text().split()[:2])}\n")
            (hdir / "sshd_config").write_text(
                SSHD_CONFIG.format(
                    address=inside,
                    key=hdir / "host_key",
                    dir=hdir,
                    authorized=tmp / "authorized_keys",
                )
            )
            daemons.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "/usr/sbin/sshd",
                        "-D",
                        "-f",
                        str(hdir / "sshd_config"),
                        "-E",
                        str(hdir / "sshd.log"),
                    ],
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            addresses.append(inside)
        (tmp / "known_hosts").write_text("".join(known))
        (tmp / "ssh_config").write_text(
            f"Host *\n  User root\n  IdentityFile {tmp / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {tmp / 'known_hosts'}\n  StrictHostKeyChecking yes\n  "
            "LogLevel ERROR\n"
        )
        for ns, address in zip(namespaces, addresses, strict=True):
            _wait(
                lambda ns=ns, address=address: _listening(ns, address, 22),
                f"sshd in {ns} did not listen",
            )
        # The shared target: tgtd with a control port nobody uses, a portal on host 1's veth, one
        # LUN bound to all.
        ctl = next(
            p
            for p in random.sample(range(20000, 30000), 200)
            if not Path(f"/run/tgtd/socket.{p}").exists()
        )
        portal = f"{subnet}.1.1:{PORTAL_PORT}"
        tgtd = subprocess.Popen(
            ["tgtd", "-f", "--iscsi", f"portal={portal}", "-C", str(ctl)],
            stdout=open(tmp / "tgtd.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait(
            lambda: (
                subprocess.run(
                    ["tgtadm", "-C", str(ctl), "--mode", "target", "--op", "show"],
                    capture_output=True,
                ).returncode
                == 0
            ),
            "tgtd did not answer",
        )
        iqn = f"iqn.2026-11.org.iomatrix.test:shared-{os.getpid()}"
        _run("truncate", "-s", lun_size, str(tmp / "lun.img"))
        tgt = ["tgtadm", "-C", str(ctl), "--lld", "iscsi"]
        _run(*tgt, "--mode", "target", "--op", "new", "--tid", "1", "--targetname", iqn)
        _run(
            *tgt,
            "--mode",
            "logicalunit",
            "--op",
            "new",
            "--tid",
            "1",
            "--lun",
            "1",
            "--bstype",
            "rdwr",
            "--backing-store",
            str(tmp / "lun.img"),
        )
        _run(*tgt, "--mode", "target", "--op", "bind", "--tid", "1", "--initiator-address", "ALL")
        _wait(
            lambda: _listening(None, f"{subnet}.1.1", PORTAL_PORT),
            "tgtd did not listen on its portal",
        )
        yield ClientHosts(
            addresses,
            tmp / "ssh_config",
            namespaces,
            portal,
            iqn,
            frozenset(d.pid for d in daemons),
        )
    finally:
        if tgtd is not None:
            subprocess.run(
                ["tgtadm", "-C", str(ctl), "--mode", "system", "--op", "delete"],
                capture_output=True,
            )
            tgtd.kill()
            tgtd.wait(timeout=30)
            for suffix in ("", ".lock"):
                Path(f"/run/tgtd/socket.{ctl}{suffix}").unlink(missing_ok=True)
        for ns in namespaces:  # every process in the namespace (sshd, and whatever a session left)
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True
            ).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for d in daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.wait(timeout=30)
        for veth in veths:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
