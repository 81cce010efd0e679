"""Busy ports are named (issue 50): every lab server checks the ports it binds before it starts, and
a taken one is one line naming the port and its holder's pid and command, at once (rpcbind on a held
port 111 sat 120 s).

Each test holds a port itself (a listening socket of this process, on 127.0.0.1) and checks only
that: a port the machine's own daemons hold (the host's rpcbind on 111) is never bound, the test is
skipped instead."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.backing import iscsi as iscsi_module
from iomatrix.backing import leftovers
from iomatrix.backing.iscsi import IscsiBacking
from iomatrix.backing.nfs import RPCBIND_PORT, NfsBacking
from iomatrix.backing.ports import free_ports_in, port_holders
from iomatrix.backing.provision import provision
from iomatrix.backing.spec import parse_backing
from iomatrix.errors import UserError
from tests.conftest import root_only

SCRATCH = Path("/tmp/iomx-ports")


@contextlib.contextmanager
def _held(port: int = 0, kind: int = socket.SOCK_STREAM) -> Iterator[int]:
    """A socket of this process bound to 127.0.0.1:`port` (0: a free one), listening when TCP: its
    port."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", port))
        if kind == socket.SOCK_STREAM:
            s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def workdir() -> Iterator[Path]:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="ports-", dir=SCRATCH))
    yield d
    leftovers.clean(d, mine=True)
    shutil.rmtree(d, ignore_errors=True)


def _names_us(line: str, server: str, port: int) -> None:
    assert line.startswith(
        f"{server} cannot start: port {port} is in use by pid {os.getpid()} ("
    ), line
    assert "\n" not in line


def test_port_holders_name_this_process_for_tcp_and_udp() -> None:
    with _held() as tcp, _held(kind=socket.SOCK_DGRAM) as udp:
        (holder,) = port_holders(tcp, "127.0.0.1")
        assert (holder.pid, holder.protocol, holder.address) == (os.getpid(), "tcp", "127.0.0.1")
        assert (
            holder.describe().startswith(f"pid {os.getpid()} (")
            and f"tcp 127.0.0.1:{tcp}" in holder.describe()
        )
        assert port_holders(tcp, "0.0.0.0")  # a wildcard bind collides with any address
        assert port_holders(tcp, "127.0.0.2") == []  # another address does not
        assert [h.pid for h in port_holders(udp, "0.0.0.0", ("udp",))] == [os.getpid()]
        assert free_ports_in(tcp, tcp, "127.0.0.1") == 0
    assert port_holders(tcp, "127.0.0.1") == []  # closed: nobody holds it


@root_only
@pytest.mark.skipif(IscsiBacking().availability(set()) is not None, reason="tgt is not installed")
def test_tgtd_names_the_holder_of_its_portal_port(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _held() as port:
        # the port it picks is taken meanwhile
        monkeypatch.setattr(iscsi_module, "free_tcp_port", lambda: port)
        with (
            pytest.raises(UserError) as err,
            provision(parse_backing({"type": "iscsi"}), workdir, set()) as h,
        ):
            pytest.fail(f"tgtd started on a taken port: {h.metadata}")
    _names_us(err.value.one_line(), "tgtd", port)
    assert leftovers.pending(workdir) == []


@root_only
@pytest.mark.skipif(
    NfsBacking().availability(set()) is not None, reason="the NFS lab stack is not installed"
)
def test_rpcbinds_port_111_held_is_named_with_the_way_out(workdir: Path) -> None:
    if port_holders(RPCBIND_PORT, "0.0.0.0", ("tcp", "udp")):
        pytest.skip("port 111 is held on this host (its rpcbind): not ours to take")
    try:
        hold = _held(RPCBIND_PORT)
        port = hold.__enter__()
    except OSError:
        pytest.skip("port 111 was taken meanwhile")
    try:
        with pytest.raises(UserError) as err, provision(NfsBacking(), workdir, set()):
            pytest.fail("a lab NFS server started without port 111")
    finally:
        hold.__exit__(None, None, None)
    line = err.value.one_line()
    _names_us(line, "rpcbind", port)
    assert "rpcbind's fixed port" in line and "docs/shared-storage.md" in line
    assert leftovers.pending(workdir) == [] and not any((workdir / "backings").iterdir())
