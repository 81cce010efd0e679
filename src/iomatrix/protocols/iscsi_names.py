"""iSCSI names and addresses (issue 34): portals, IQNs and ``iscsi://`` URLs, parsed and checked.

Pure: nothing here opens a socket. Used by the iSCSI backing's validation (the plan's
``[[backing]]``), by ``--allow-destroy iscsi://HOST:PORT/IQN/LUN`` (`iomatrix.safety`) and by the
iSCSI server (`backing.iscsi`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

ISCSI_PORT = 3260
# RFC 3720 §3.2.6.3: "iqn." + year-month + "." + reversed domain [":" anything], "eui." + 16 hex
# digits, "naa." + 16 or 32 hex digits. Names are case-insensitive and normalised to lower case
# (stringprep).
_IQN = re.compile(
    r"iqn\.\d{4}-(0[1-9]|1[0-2])\.[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
    r"(:[a-z0-9.:_-]+)?"
)
_EUI = re.compile(r"eui\.[0-9a-f]{16}")
_NAA = re.compile(r"naa\.([0-9a-f]{16}|[0-9a-f]{32})")
_HOSTNAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
IQN_EXAMPLE = (
    'e.g. "iqn.2003-01.org.example:disk1", "eui.02004567a425678d" or "naa.52004567ba64678d"'
)
PORTAL_EXAMPLE = 'write HOST:PORT, e.g. "192.0.2.10:3260" or "[2001:db8::1]:3260"'
# SAM's LUN space as QEMU's iscsi driver and libiscsi address it (flat space up to 16383; tgt allows
# 0-255).
MAX_LUN = 16383
# How --allow-destroy URLs arrive: typer turns the argument into a Path, which folds "//" into "/".
_URL = re.compile(
    r"iscsi:/{1,2}(?P<portal>\[[0-9A-Fa-f:.]+\](:\d+)?|[^/\[\]]+)/(?P<iqn>[^/]+)/(?P<lun>\d+)"
)


def check_iqn(name: str) -> str:
    """The iSCSI name in its canonical (lower-case) form, or ValueError naming what is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"empty iSCSI name: {IQN_EXAMPLE}")
    low = name.strip().lower()
    if len(low.encode()) > 223:  # RFC 3720 §3.2.6.1: at most 223 bytes
        raise ValueError(f"iSCSI name {name[:40]!r}… is longer than 223 bytes (RFC 3720)")
    if _IQN.fullmatch(low) or _EUI.fullmatch(low) or _NAA.fullmatch(low):
        return low
    raise ValueError(
        f"bad iSCSI name {name[:80]!r}: not an iqn./eui./naa. name (RFC 3720); {IQN_EXAMPLE}"
    )


_NUMERIC_HOST = re.compile(r"[0-9.]+")


def address_problem(host: str) -> str | None:
    """Why `host`, written as an IP address, is not one (``999.1.1.1``, ``10.0.0``, ``1::2::3``);
    None for a valid address or a host name. All digits and dots is an IPv4 address (no top-level
    domain is numeric); a colon makes it IPv6."""
    if _NUMERIC_HOST.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return (
                f"{host!r} is not an IPv4 address (four numbers 0-255 joined by dots, e.g. "
                "192.0.2.10)"
            )
    elif ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address (e.g. 2001:db8::1)"
    return None


@dataclass(frozen=True)
class Portal:
    """An iSCSI portal: host (a name, an IPv4 or an IPv6 address) and TCP port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_portal(text: str) -> Portal:
    """ "HOST:PORT" (IPv6 in brackets) → Portal; ValueError naming the problem otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty portal: {PORTAL_EXAMPLE}")
    t = text.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})", t) or re.fullmatch(
        r"([^:\[\]/\s]+):(\d{1,5})", t
    )
    if m is None:
        raise ValueError(f"bad portal {text[:80]!r}: {PORTAL_EXAMPLE}")
    host, port = m.group(1), int(m.group(2))
    if not 1 <= port <= 65535:
        raise ValueError(f"bad portal {text[:80]!r}: port {port} is not between 1 and 65535")
    if t.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"bad portal {text[:80]!r}: {host!r} is not an IPv6 address") from None
    elif not _HOSTNAME.fullmatch(host) or len(host) > 253:
        raise ValueError(
            f"bad portal {text[:80]!r}: {host!r} is not a host name or address; {PORTAL_EXAMPLE}"
        )
    elif (why := address_problem(host)) is not None:
        raise ValueError(f"bad portal {text[:80]!r}: {why}")
    return Portal(host, port)


@dataclass(frozen=True)
class IscsiLun:
    """One LUN of one target behind one portal: what ``--allow-destroy iscsi://HOST:PORT/IQN/LUN``
    hands over."""

    portal: Portal
    iqn: str
    lun: int

    @property
    def url(self) -> str:
        return f"iscsi://{self.portal}/{self.iqn}/{self.lun}"


def parse_iscsi_url(text: str) -> IscsiLun:
    """``iscsi://HOST:PORT/IQN/LUN`` (also the ``iscsi:/…`` a Path makes of it) → IscsiLun;
    ValueError otherwise."""
    m = _URL.fullmatch(str(text).strip())
    if m is None:
        raise ValueError(
            f"bad iSCSI URL {str(text)[:100]!r}: write iscsi://HOST:PORT/IQN/LUN, "
            "e.g. iscsi://192.0.2.10:3260/iqn.2003-01.org.example:disk1/1"
        )
    lun = int(m.group("lun"))
    if lun > MAX_LUN:
        raise ValueError(f"bad iSCSI URL {str(text)[:100]!r}: LUN {lun} is above {MAX_LUN}")
    return IscsiLun(parse_portal(m.group("portal")), check_iqn(m.group("iqn")), lun)


def is_iscsi_url(text: object) -> bool:
    """Whether an --allow-destroy argument is meant as an iSCSI URL (it starts with the scheme)."""
    return str(text).strip().lower().startswith("iscsi:")


def target_name(name: str, *, prefix: str = "iqn.2026-11.org.iomatrix") -> str:
    """A valid IQN for a target iomatrix creates, from a free-form disk name."""
    tail = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip(".-")[:120] or "disk"
    return check_iqn(f"{prefix}:{tail}")
