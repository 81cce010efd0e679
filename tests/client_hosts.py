"""Client hosts for tests of contention runs across hosts: network namespaces with their own sshd,
and an iSCSI target (tgtd) on this side that they share, as scripts/fleet-demo makes its hosts.

Host n is namespace ``ixc<pid>-n`` with a veth pair: SUBNET.n.1 on this side, SUBNET.n.2 inside,
where its sshd listens (a generated host key; this side logs in as root with a generated client key,
through an ssh_config file). The namespaces have one route, to the target's portal (SUBNET.1.1):
nothing else is reachable from them, and the only addresses contacted are these. Everything
(namespaces, veths, sshd and every process in the namespaces, tgtd with its LUN file and control
socket) is removed on exit, also after a failed assertion."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.236"
PORTAL_PORT = 3260
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


def _listening(ns: str | None, address: str, port: int) -> bool:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    out = subprocess.run(
        [*prefix, "ss", "-Hltn", f"src {address}:{port}"], capture_output=True, text=True
    ).stdout
    return bool(out.strip())


@contextlib.contextmanager
def client_hosts(tmp: Path, count: int = 2, lun_size: str = "256M") -> Iterator[ClientHosts]:
    """`count` namespaced hosts with sshd, and a tgtd on SUBNET.1.1 with one LUN they all log in
    to."""
    tag = f"ixc{os.getpid()}"
    namespaces: list[str] = []
    veths: list[str] = []
    daemons: list[subprocess.Popen] = []
    tgtd: subprocess.Popen | None = None
    ctl = 0
    # sshd's privilege separation directory (compiled in); made here when the host has none, removed
    # after. The fleet demo does the same: tests using this module share its xdist group
    # (tests/conftest.py).
    privsep = Path("/run/sshd")
    made_privsep = not privsep.is_dir()
    if made_privsep:
        privsep.mkdir(mode=0o755)
    try:
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "client_key"))
        shutil.copy(tmp / "client_key.pub", tmp / "authorized_keys")
        known = []
        addresses = []
        for n in range(1, count + 1):
            ns, veth, peer = f"{tag}-{n}", f"{tag}a{n}", f"{tag}b{n}"
            inside = f"{SUBNET}.{n}.2"
            _run("ip", "netns", "add", ns)
            namespaces.append(ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
            veths.append(veth)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "addr", "add", f"{SUBNET}.{n}.1/24", "dev", veth)
            _run("ip", "link", "set", veth, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{inside}/24", "dev", peer)
            _run("ip", "-n", ns, "link", "set", peer, "up")
            if n != 1:  # the portal is on host 1's veth here: one route to it, nothing else
                _run("ip", "-n", ns, "route", "add", f"{SUBNET}.1.1/32", "via", f"{SUBNET}.{n}.1")
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
        portal = f"{SUBNET}.1.1:{PORTAL_PORT}"
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
            lambda: _listening(None, f"{SUBNET}.1.1", PORTAL_PORT),
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
        if made_privsep:
            with contextlib.suppress(OSError):
                privsep.rmdir()
