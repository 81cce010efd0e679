"""Client hosts of a network backing: the `[[backing.client_host]]` tables of a plan (issue 35,
"many clients, one backend", across hosts).

A contention run (tiers/contention.py) runs its N clients on this host by default. A network backing
that names client hosts runs client i on the i-th of them instead: iomatrix reaches the host over
SSH, starts there what a local client is (a qemu-storage-daemon serving the cell's graph on the
backend over NBD, a ``fio --server`` on the host's `address`), and drives every host's fio server
from this host with one ``fio --client`` (the synchronised start, as ``pbench-fio --clients`` does).
The model here is pure: it validates and names; the remote side's life is tiers/remote_client.py's.

Only a server the client hosts reach can be shared that way: a lab-started server listens on
127.0.0.1 of this host, so client hosts go with an existing target, export or pool (checked where
the backing is, in spec.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from iomatrix.domain.clients import CLIENTS_MAX
from iomatrix.protocol_registry import network_protocol
from iomatrix.protocols.place import address_problem

# user@host or host, as ssh takes it: no option (a leading '-'), no space, no shell metacharacter.
SSH_DESTINATION = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}@)?[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}"
)
# An address fio's server binds and this host's fio client connects to: a host name or an IPv4
# address.
FIO_ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
FIO_DEFAULT_PORT = 8765  # fio's own default for --server


class ClientHost(BaseModel):
    """One host a contention run's client runs on (module docstring)."""

    # built when it first validates, not at import (as backing.spec's models, issue 52)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    ssh: str = Field(
        description="how iomatrix reaches the host: an ssh destination, HOST or USER@HOST"
    )
    address: str | None = Field(
        default=None,
        description="where the host's fio server listens and this host "
        "connects to it (default: the host of `ssh`)",
    )
    # `true` or "8765" is a mistake
    port: int = Field(
        default=FIO_DEFAULT_PORT,
        ge=1,
        le=65535,
        strict=True,
        description="the fio server's TCP port",
    )
    ssh_config: Path | None = Field(
        default=None, description="an ssh_config file for this host (ssh -F)"
    )

    @field_validator("ssh")
    @classmethod
    def _ssh_destination(cls, v: str) -> str:
        if not SSH_DESTINATION.fullmatch(v):
            raise ValueError(
                f"ssh = {v[:60]!r} is not an ssh destination; write HOST or USER@HOST, e.g. "
                'ssh = "root@host1.example.org"'
            )
        if (why := address_problem(v.rsplit("@", 1)[-1])) is not None:
            raise ValueError(f"ssh = {v[:60]!r}: {why}")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not FIO_ADDRESS.fullmatch(v):
            raise ValueError(
                f"address = {v[:60]!r} is not a host name or IPv4 address, e.g. address "
                '= "10.0.0.2"'
            )
        if v is not None and (why := address_problem(v)) is not None:
            raise ValueError(f"address = {why}")
        return v

    @field_validator("ssh_config")
    @classmethod
    def _ssh_config(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_absolute():
            raise ValueError(
                f"ssh_config = {str(v)[:60]!r} is relative; give the file's absolute path"
            )
        return v

    @property
    def host(self) -> str:
        """The host part of the ssh destination."""
        return self.ssh.rsplit("@", 1)[-1]

    @property
    def fio_address(self) -> str:
        """Where its fio server listens: `address`, else the ssh destination's host."""
        return self.address or self.host

    @property
    def label(self) -> str:
        return self.host

    def ssh_argv(self, connect_timeout_s: int = 10) -> list[str]:
        """ssh up to the remote command: no password prompt (BatchMode), a bounded connect."""
        config = ["-F", str(self.ssh_config)] if self.ssh_config is not None else []
        return [
            "ssh",
            *config,
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={connect_timeout_s}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            self.ssh,
            "--",
        ]

    def fio_server_arg(self) -> str:
        """The fio --server/--client value naming this host's fio server."""
        return f"ip:{self.fio_address},{self.port}"


def lab_started_reason(protocol: str) -> str:
    """Why a lab-started server cannot have client hosts."""
    network = network_protocol(protocol)
    # ("an iSCSI target", "an NFS server", "a Ceph cluster")
    kind = "a server" if network is None else f"{network.article} {network.server_noun}"
    return (
        f"client hosts need {kind} they reach: a lab-started one listens on 127.0.0.1 of "
        "this host; "
        "name an existing one in this backing, or drop [[backing.client_host]] to run "
        "the clients here"
    )


class SharedServer(BaseModel):
    """The part of a network backing (spec.py: iscsi, nfs, rbd) that names its client hosts: a
    server other hosts may share, when it is an existing one they reach."""

    client_host: tuple[ClientHost, ...] = Field(default=(), max_length=CLIENTS_MAX)

    @model_serializer(mode="wrap")
    def _dump_client_hosts_when_named(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        # A backing without client hosts dumps as it did before they existed: the plan's fingerprint
        # (resume) and the backing recorded with every result stay the same.
        data = handler(self)
        if isinstance(data, dict) and not data.get("client_host"):
            data.pop("client_host", None)
        return data

    @model_validator(mode="after")
    def _client_hosts_reach_the_server(self) -> SharedServer:
        if self.client_host and getattr(self, "lab_started", True):
            raise ValueError(lab_started_reason(getattr(self, "protocol", None) or "network"))
        seen: set[tuple[str, int]] = set()
        for host in self.client_host:
            where = (host.fio_address, host.port)
            if where in seen:
                raise ValueError(
                    f"two client hosts have their fio server at {where[0]} port "
                    f"{where[1]}; give each "
                    "host its own address (or port)"
                )
            seen.add(where)
        return self
