"""Whether a server a network backing names can be reached, asked the way a run would ask it and
bounded in time (issue 50): `run` refuses a backing that cannot serve before its sweep, and `plan`
says so. Only connects and reads: nothing is written to the server."""

from __future__ import annotations

import socket
import subprocess

from iomatrix.protocols.iscsi_names import IscsiLun

ISCSI_PROBE_TIMEOUT_S = 15


def _run_bounded(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


PORTAL_CONNECT_TIMEOUT_S = 5


def portal_problem(host: str, port: int, timeout_s: float = PORTAL_CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to host:port cannot be made (a name that does not resolve, nothing
    listening, no answer within `timeout_s`), in a few words; None when it connects. Only connects:
    nothing is sent."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.gaierror as err:
        return f"the name {host!r} does not resolve ({err.strerror})"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as err:
        return f"cannot connect to {host}:{port} ({err.strerror or err})"


def iscsi_lun_problem(lun: IscsiLun, timeout_s: float = ISCSI_PROBE_TIMEOUT_S) -> str | None:
    """Why `lun` cannot serve: its portal does not connect, or libiscsi's iscsi-readcapacity16 (a
    login and a READ CAPACITY, read-only) fails: a wrong IQN, a LUN the target does not have, an ACL
    that shuts this host out. None when it answers; the caller has checked that the tool is
    installed."""
    why = portal_problem(lun.portal.host.strip("[]"), lun.portal.port)
    if why is not None:
        return why
    out = _run_bounded(["iscsi-readcapacity16", "-s", lun.url], timeout=timeout_s)
    if out is None:
        return f"iscsi-readcapacity16 got no answer within {timeout_s:g} s"
    if out.returncode != 0:
        err = (out.stderr or out.stdout).strip().splitlines()
        return (
            f"{err[-1].strip() if err else f'iscsi-readcapacity16 exit {out.returncode}'} "
            "(check the IQN, the LUN number and the target's ACL)"
        )
    return None
