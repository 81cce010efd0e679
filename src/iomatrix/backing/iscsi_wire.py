"""Just enough of the iSCSI protocol (RFC 3720) to ask a target two questions an initiator sees the
answer to.

* Is the LUN's write cache on? (SCSI MODE SENSE(6) of the caching mode page 8, its WCE bit.) tgtadm
  sets the page but never shows it, and no libiscsi-bin tool reads mode pages: reading it back over
  the wire is the one check that what was asked for is what an initiator (QEMU) is told.
* How long is a round trip through this portal? (NOP-Out/NOP-In pings inside a logged-in session.)
  Used by the delaying relay (`backing.delay_relay`) to measure the RTT it achieved, on the iSCSI
  path itself.

One session, no authentication (CHAP is not used by lab-started targets), no digests, one command at
a time. Read-only: MODE SENSE and NOP never change the LUN."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

# Opcodes (initiator → target, target → initiator).
OP_NOP_OUT, OP_SCSI_CMD, OP_LOGIN, OP_LOGOUT = 0x00, 0x01, 0x03, 0x06
OP_NOP_IN, OP_SCSI_RSP, OP_LOGIN_RSP, OP_DATA_IN, OP_LOGOUT_RSP = 0x20, 0x21, 0x23, 0x25, 0x26
BHS = 48
IMMEDIATE = 0x40
INITIATOR_NAME = "iqn.2026-11.org.iomatrix:probe"
CACHING_PAGE = 0x08
WCE = 0x04  # byte 2 of the caching mode page (SBC-3 §6.4.5)
UNIT_ATTENTION = 0x06
CHECK_CONDITION = 0x02


class IscsiProbeError(Exception):
    """The target refused the login or a command, or the connection broke."""


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _keys(pairs: dict[str, str]) -> bytes:
    return _pad(b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs.items()))


def lun_field(lun: int) -> bytes:
    """The 8-byte LUN field: peripheral device addressing below 256, flat space above (SAM-5
    §4.7)."""
    if lun < 256:
        return bytes([0, lun]) + bytes(6)
    return bytes([0x40 | (lun >> 8), lun & 0xFF]) + bytes(6)


def caching_wce(mode_data: bytes) -> bool:
    """The WCE bit of a MODE SENSE(6) answer holding the caching page (header, block descriptors,
    page)."""
    if len(mode_data) < 4:
        raise IscsiProbeError(f"MODE SENSE answer too short ({len(mode_data)} bytes)")
    page = mode_data[4 + mode_data[3] :]
    if len(page) < 3 or page[0] & 0x3F != CACHING_PAGE:
        raise IscsiProbeError(f"MODE SENSE answer holds no caching page: {mode_data.hex()}")
    return bool(page[2] & WCE)


@dataclass
class _Pdu:
    header: bytes
    data: bytes

    @property
    def opcode(self) -> int:
        return self.header[0] & 0x3F


class Session:
    """One logged-in iSCSI session to (host, port, target)."""

    def __init__(self, host: str, port: int, target: str, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.isid = bytes([0x80]) + os.urandom(5)  # "random" ISID format (RFC 3720 §10.12.5)
        self.itt = 0
        self.cmdsn = 1
        self.statsn = 0
        self.tsih = 0
        self.target = target

    # -- framing ---------------------------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise IscsiProbeError("the target closed the connection")
            buf += chunk
        return bytes(buf)

    def _recv(self) -> _Pdu:
        header = self._recv_exact(BHS)
        ahs = header[4] * 4
        length = int.from_bytes(header[5:8], "big")
        rest = self._recv_exact(ahs + length + (-length % 4))
        return _Pdu(header, rest[ahs : ahs + length])

    def _next_itt(self) -> bytes:
        self.itt += 1
        return self.itt.to_bytes(4, "big")

    # -- login -----------------------------------------------------------------------------------
    def _login_step(self, csg: int, nsg: int, keys: dict[str, str]) -> None:
        data = _keys(keys)
        header = (
            bytes([IMMEDIATE | OP_LOGIN, 0x80 | (csg << 2) | nsg, 0, 0, 0])
            + len(data).to_bytes(3, "big")
            + self.isid
            + self.tsih.to_bytes(2, "big")
            + self._next_itt()
            + bytes(4)
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1 if self.statsn else 0).to_bytes(4, "big")
            + bytes(16)
        )
        self.sock.sendall(header + data)
        rsp = self._recv()
        if rsp.opcode != OP_LOGIN_RSP:
            raise IscsiProbeError(f"login: unexpected answer opcode 0x{rsp.opcode:02x}")
        status = (rsp.header[36], rsp.header[37])
        if status != (0, 0):
            what = {
                (2, 1): "authentication failed",
                (2, 2): "not authorised (ACL)",
                (2, 3): f"target {self.target} not found",
            }.get(status, f"status class {status[0]} detail {status[1]}")
            raise IscsiProbeError(f"login refused: {what}")
        self.tsih = int.from_bytes(rsp.header[14:16], "big")
        self.statsn = int.from_bytes(rsp.header[24:28], "big")

    def login(self) -> None:
        self._login_step(
            0,
            1,
            {
                "InitiatorName": INITIATOR_NAME,
                "TargetName": self.target,
                "SessionType": "Normal",
                "AuthMethod": "None",
            },
        )
        self._login_step(
            1,
            3,
            {
                "HeaderDigest": "None",
                "DataDigest": "None",
                "MaxRecvDataSegmentLength": "262144",
                "InitialR2T": "Yes",
                "ImmediateData": "No",
                "ErrorRecoveryLevel": "0",
            },
        )

    # -- full feature phase ----------------------------------------------------------------------
    def _send_cmd(self, lun: int, cdb: bytes, read_len: int) -> tuple[int, bytes]:
        header = (
            bytes([OP_SCSI_CMD, 0xC1, 0, 0, 0, 0, 0, 0])
            + lun_field(lun)
            + self._next_itt()
            + read_len.to_bytes(4, "big")
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + cdb.ljust(16, b"\0")
        )
        self.cmdsn += 1
        self.sock.sendall(header)
        data = bytearray()
        while True:
            rsp = self._recv()
            if rsp.opcode == OP_DATA_IN:
                data += rsp.data
                if rsp.header[1] & 0x01:  # S bit: the status rides on the last Data-In
                    self.statsn = int.from_bytes(rsp.header[24:28], "big")
                    return rsp.header[3], bytes(data)
            elif rsp.opcode == OP_SCSI_RSP:
                self.statsn = int.from_bytes(rsp.header[24:28], "big")
                sense = rsp.data[2:] if len(rsp.data) >= 2 else b""
                return rsp.header[3], bytes(sense) if rsp.header[3] == CHECK_CONDITION else bytes(
                    data
                )
            elif rsp.opcode != OP_NOP_IN:
                raise IscsiProbeError(f"unexpected answer opcode 0x{rsp.opcode:02x}")

    def command(self, lun: int, cdb: bytes, read_len: int) -> bytes:
        """Run a read-type SCSI command; retried once after the unit attention a fresh nexus gets
        first."""
        for _attempt in range(3):
            status, data = self._send_cmd(lun, cdb, read_len)
            if status == 0:
                return data
            if not (
                status == CHECK_CONDITION and len(data) > 2 and data[2] & 0x0F == UNIT_ATTENTION
            ):
                raise IscsiProbeError(
                    f"SCSI command 0x{cdb[0]:02x} on LUN {lun} failed: status {status}, "
                    f"sense {data[:18].hex()}"
                )
        raise IscsiProbeError(
            f"SCSI command 0x{cdb[0]:02x} on LUN {lun}: unit attention did not clear"
        )

    def nop(self) -> None:
        """One NOP-Out answered by a NOP-In (a ping inside the session)."""
        header = (
            bytes([IMMEDIATE | OP_NOP_OUT, 0x80, 0, 0, 0, 0, 0, 0])
            + bytes(8)
            + self._next_itt()
            + b"\xff\xff\xff\xff"
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + bytes(16)
        )
        self.sock.sendall(header)
        while True:
            rsp = self._recv()
            if rsp.opcode == OP_NOP_IN and rsp.header[16:20] == self.itt.to_bytes(4, "big"):
                self.statsn = int.from_bytes(rsp.header[24:28], "big")
                return
            if rsp.opcode != OP_NOP_IN:
                raise IscsiProbeError(f"NOP: unexpected answer opcode 0x{rsp.opcode:02x}")

    def logout(self) -> None:
        header = (
            bytes([IMMEDIATE | OP_LOGOUT, 0x80, 0, 0, 0, 0, 0, 0])
            + bytes(8)
            + self._next_itt()
            + bytes(4)
            + self.cmdsn.to_bytes(4, "big")
            + (self.statsn + 1).to_bytes(4, "big")
            + bytes(16)
        )
        with contextlib.suppress(OSError, IscsiProbeError):
            self.sock.sendall(header)
            self._recv()


@contextlib.contextmanager
def session(host: str, port: int, target: str, timeout: float = 10.0) -> Iterator[Session]:
    """A logged-in session, logged out and closed afterwards. Raises IscsiProbeError or OSError."""
    try:
        s = Session(host, port, target, timeout)
    except OSError as exc:
        raise IscsiProbeError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    try:
        s.login()
        yield s
        s.logout()
    except (OSError, TimeoutError) as exc:
        raise IscsiProbeError(f"{host}:{port}: {exc}") from None
    finally:
        s.sock.close()


def read_write_cache(host: str, port: int, target: str, lun: int, timeout: float = 10.0) -> bool:
    """Whether the LUN reports its write cache on (WCE of the caching mode page), as an initiator
    reads it."""
    cdb = bytes([0x1A, 0x08, CACHING_PAGE, 0, 255, 0])  # MODE SENSE(6), DBD, current values, page 8
    with session(host, port, target, timeout) as s:
        return caching_wce(s.command(lun, cdb, 255))


def nop_rtts(
    host: str, port: int, target: str, count: int = 30, timeout: float = 10.0
) -> list[float]:
    """Round-trip times in seconds of `count` NOP pings in one session (the first one is not
    counted: it may pay for a cold path)."""
    times = []
    with session(host, port, target, timeout) as s:
        s.nop()
        for _ in range(count):
            t0 = time.perf_counter()
            s.nop()
            times.append(time.perf_counter() - t0)
    return times
