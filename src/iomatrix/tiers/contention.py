"""Many clients, one backend: the block-layer tier's run of N clients against one shared network
backing at once.

A cell with ``clients = N > 1`` (the `clients` axis: block-layer tier, network backings) runs N
clients side by side on this host, each exactly what a one-client run is (`tiers.blocklayer`): a
fresh disk of its own on the same server (:meth:`NetworkServer.new_disk`), its own
``qemu-storage-daemon`` exporting it over NBD on a private UNIX socket (one daemon per client: QEMU
7.2 aborts with an IOThread on an NBD export, and separate processes are what separate hosts would
be), and its own fio. The fios run in fio's client/server mode, the mode pbench's ``pbench-fio
--clients`` uses: one ``fio --server`` per client (a UNIX socket in the client's directory, its
working directory, where the job's relative NBD socket resolves), and one ``fio --client=… job
--client=… job`` that connects to every server, sends each its job and only then sends the RUN
command to all of them in one loop (fio ``client.c`` ``fio_start_all_clients``): the synchronised
start. It reports each client's results (``client_stats``) and fio's own sum ("All clients").

What is stored with the run (`RunOutcome.clients`, the store's ``run_clients`` table): each client's
metrics (the same names a one-client run has). The run's own metrics are the aggregate: throughput
(IOPS, MB/s) and CPU summed over the clients, the latency figures of the worst client (the highest
mean and percentiles: a tail the backend gave someone), ``job.runtime_s`` the longest, and
``clients.fairness``, Jain's index of the clients' primary metric (stats/fairness.py). Reports draw
per-client and aggregate throughput and p99 against N, and the saturation point
(report/contention.py).

Honest about one host: the N clients share this host's CPUs with each other and with the server (a
lab-started target or NFS server on loopback), so on a small host they contend for CPU as much as
for the backend; the run records the host's CPU count (``host_cpus``) with the clients' figures. A
backing that names client hosts (``[[backing.client_host]]``) runs client i on host i instead
(tiers/remote_client.py: the daemon and the fio server started there over SSH); this host then only
drives their fio servers, and stores their results in host order."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix import children
from iomatrix.backing.leftovers import forget, register_temp_path
from iomatrix.backing.network import NetworkDisk, NetworkServer
from iomatrix.errors import UserError
from iomatrix.fio.parse import FioOutputError, checked_metrics, fatal_message
from iomatrix.stats.fairness import jain_index
from iomatrix.textfile import last_lines
from iomatrix.tiers.base import RunOutcome, RunRequest
from iomatrix.tiers.network_disks import disk_name, follow_server, network_disk
from iomatrix.tiers.remote_client import READY_WAIT_S, RemoteClient

CLIENT_DIR = "client{}"
FIO_SERVER_SOCKET = "fio-server.sock"
ALL_CLIENTS = "All clients"  # fio's own sum in client_stats
# a fio server creates its socket within milliseconds; generous for a loaded host
SERVER_READY_S = 60.0
STOP_GRACE_S = 5.0
# Log options a one-client job writes for the steady-state series: in client/server mode each server
# would ship its log back to the one client under one name, so a contention run keeps no
# per-interval series.
_LOG_OPTIONS = ("write_iops_log=", "log_avg_msec=", "per_job_logs=")
# Per-client metrics that add up across clients; the rest (latencies) are taken from the worst
# client.
SUMMED = (
    "read.iops",
    "write.iops",
    "trim.iops",
    "total.iops",
    "read.bw_mbps",
    "write.bw_mbps",
    "trim.bw_mbps",
    "total.bw_mbps",
    "cpu.usr_pct",
    "cpu.sys_pct",
    "sync.count",
)
FAIRNESS_METRIC = "clients.fairness"
COUNT_METRIC = "clients.count"


def client_count(cell: Mapping[str, str]) -> int:
    """The cell's number of clients (1 where the axis does not apply: "-")."""
    value = cell.get("clients", "1")
    return int(value) if value.isdigit() else 1


def contention_job(text: str) -> str:
    """A one-client job as each client runs it: without the per-interval log options (see
    `_LOG_OPTIONS`)."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.strip().startswith(_LOG_OPTIONS)
    )


def client_reports_by_host(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """fio's client/server JSON split into one ordinary report ({"jobs": […]}) per client, by the
    name fio gives each server (its ``--client`` host, or socket path), in the order fio listed
    them; fio's "All clients" sum is left out (the aggregate is computed from the clients)."""
    per_host: dict[str, list[dict[str, Any]]] = {}
    for entry in report.get("client_stats", []):
        if isinstance(entry, dict) and entry.get("jobname") != ALL_CLIENTS:
            per_host.setdefault(str(entry.get("hostname", "")), []).append(entry)
    return {host: {"jobs": jobs} for host, jobs in per_host.items()}


def aggregate_metrics(
    clients: Sequence[Mapping[str, float]], primary_metric: str
) -> dict[str, float]:
    """The run's metrics from its clients' (module docstring): sums of throughput and CPU, the worst
    client's latencies, the longest runtime, Jain's fairness index of the primary metric and the
    number of clients."""
    out: dict[str, float] = {}
    for values in clients:
        for key, value in values.items():
            if key in SUMMED:
                out[key] = out.get(key, 0.0) + value
            else:
                out[key] = max(out.get(key, value), value)
    fairness = jain_index([values.get(primary_metric, 0.0) for values in clients])
    if fairness is not None:
        out[FAIRNESS_METRIC] = fairness
    out[COUNT_METRIC] = float(len(clients))
    return out


def extract_client_json(text: str) -> dict[str, Any]:
    """The JSON report of ``fio --client`` inside `text` (it prints its servers' text lines before
    it)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        with contextlib.suppress(ValueError):
            obj, _ = decoder.raw_decode(text, start)
            if isinstance(obj, dict) and "client_stats" in obj:
                return obj
        start = text.find("{", start + 1)
    raise FioOutputError("no fio client/server JSON report (client_stats) found in fio's output")


# Starts one client's qemu-storage-daemon exporting `disk` on a socket in the client's directory
# (the tier's own daemon command line, tiers/blocklayer.py); returns the daemon and the files it
# leaves for us to remove.
StartDaemon = Callable[[NetworkDisk, Path], tuple[subprocess.Popen, list[Path]]]
# Stops a child the tier started (and forgets it): the process, the grace before SIGKILL.
StopChild = Callable[[subprocess.Popen, float], None]
# The daemon's command line as a client host runs it (tiers/remote_client.py): the cell's graph on
# `disk`, exported on the UNIX socket the job names, in the remote directory.
RemoteDaemonArgv = Callable[[NetworkDisk], list[str]]


@dataclass
class Client:
    """One client of a contention run: its directory, disk, daemon and fio server."""

    index: int
    directory: Path
    disk: NetworkDisk | None = None
    daemon: subprocess.Popen | None = None
    fio_server: subprocess.Popen | None = None
    # sockets to remove after the processes have stopped
    paths: list[Path] = field(default_factory=list)
    remote: RemoteClient | None = None  # on a client host: its daemon and fio server run there

    @property
    def server_socket(self) -> Path:
        return self.directory / FIO_SERVER_SOCKET


@dataclass
class ContentionRun:
    """One run of N clients (module docstring). :meth:`run` returns its outcome; everything it
    started is stopped and every disk given back on every exit (an error, Ctrl-C, SIGTERM)."""

    req: RunRequest
    fio: str
    job_text: str
    workdir: Path
    image_bytes: int
    start_daemon: StartDaemon
    stop_child: StopChild
    meta: dict[str, Any]
    remote_daemon_argv: RemoteDaemonArgv | None = None
    clients: list[Client] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    def run(self) -> RunOutcome:
        t0 = time.monotonic()
        n = client_count(self.req.cell)
        self.meta.update(
            {
                "clients": n,
                "host_cpus": os.cpu_count(),
                "synchronised_start": "fio client/server mode: one fio --server per client, RUN "
                "sent to all by one fio --client",
            }
        )
        hosts = self.req.target.client_hosts[:n]
        if hosts:  # each client on a host of its own: this host only drives their fio servers
            self.meta["client_hosts"] = [h.label for h in hosts]
            self.meta["clients_ran_on"] = (
                "client hosts over SSH ([[backing.client_host]]): client i on host i; "
                "their CPU is not sampled here (host_cpus is this host's)"
            )
        with children.SigtermGuard(), contextlib.ExitStack() as disks:
            try:
                outcome = self._prepare(disks, n)
                if outcome is None:
                    outcome = self._drive()
            except BaseException:
                self._stop_all(grace_s=0.0)
                raise
            finally:
                t_stop = time.monotonic()
                self._stop_all(grace_s=STOP_GRACE_S)
                self.phases["teardown_s"] = time.monotonic() - t_stop
        self.phases["wall_s"] = time.monotonic() - t0
        self.phases["overhead_s"] = max(
            0.0, self.phases["wall_s"] - self.phases.get("workload_s", 0.0)
        )
        outcome.phases = self.phases
        if outcome.ok:
            shutil.rmtree(self.req.run_dir, ignore_errors=True)
        elif remote := [c.remote for c in self.clients if c.remote is not None]:
            # A client host's script writes its daemon's and fio server's last lines to ssh's log as
            # it stops.
            lines = [f"client host {r.host.label}: {r.ssh_error()}" for r in remote]
            outcome.console_tail = "\n".join(filter(None, [outcome.console_tail, *lines]))
        return outcome

    def _failed(self, error: str, raw: str = "", tail: str = "") -> RunOutcome:
        return RunOutcome(
            ok=False,
            job_text=self.job_text,
            raw_output=raw,
            console_tail=tail,
            meta=self.meta,
            error=error,
        )

    def _prepare(self, disks: contextlib.ExitStack, n: int) -> RunOutcome | None:
        """Every client's disk, daemon and fio server, ready; an outcome only when one cannot be
        made."""
        server = self.req.target.server
        if server is None:
            return self._failed(
                "clients > 1 needs a network backing (a shared server); this cell has none"
            )
        t0 = time.monotonic()
        disk_metas = []
        for i in range(n):
            client = Client(i, self.req.run_dir / CLIENT_DIR.format(i))
            shutil.rmtree(client.directory, ignore_errors=True)
            client.directory.mkdir(parents=True)
            self.clients.append(client)
            (client.directory / "job.fio").write_text(contention_job(self.job_text))
            try:
                client.disk, disk_meta = disks.enter_context(
                    network_disk(
                        server,
                        self.req.cell,
                        size_bytes=self.image_bytes,
                        name=disk_name(f"blk-c{i}", self.req.workload.slug),
                        workdir=self.workdir,
                    )
                )
            # a disk the server cannot make (no room): this run fails, the sweep goes on
            except UserError as err:
                return self._failed(f"client {i}: {err.one_line()}")
            disk_metas.append(disk_meta["network_disk"])
            self.meta.setdefault("network_server", disk_meta["network_server"])
            if self.req.target.client_hosts:
                assert self.remote_daemon_argv is not None
                client.remote = RemoteClient(
                    self.req.target.client_hosts[i], client.directory / "ssh.log"
                )
                client.remote.start(self.remote_daemon_argv(client.disk))
                continue
            client.daemon, client.paths = self.start_daemon(client.disk, client.directory)
            self._start_fio_server(client)
        self.meta["network_disks"] = disk_metas
        self.meta["network_disk"] = disk_metas[0]
        self.phases["setup_s"] = time.monotonic() - t0
        self._follow(server)
        why = self._await_servers()
        return None if why is None else self._failed(why, tail=self._logs())

    def _start_fio_server(self, client: Client) -> None:
        register_temp_path(self.workdir, client.server_socket)
        client.paths.append(client.server_socket)
        with open(client.directory / "fio-server.log", "wb") as log:
            client.fio_server = children.spawn(
                [self.fio, f"--server=sock:{FIO_SERVER_SOCKET}"],
                cwd=client.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _await_servers(self) -> str | None:
        """Wait (bounded, by polling the condition) until every fio server listens; why not, else
        None."""
        if self.req.target.client_hosts:
            deadline = time.monotonic() + READY_WAIT_S
            for client in self.clients:
                assert client.remote is not None
                if (why := client.remote.await_ready(deadline)) is not None:
                    return why
            self.meta["client_host_dirs"] = [
                c.remote.remote_dir for c in self.clients if c.remote is not None
            ]
            return None
        deadline = time.monotonic() + SERVER_READY_S
        for client in self.clients:
            assert client.fio_server is not None
            while not client.server_socket.exists():
                if client.fio_server.poll() is not None:
                    return (
                        f"fio --server of client {client.index} exited with status "
                        f"{client.fio_server.returncode}"
                    )
                if time.monotonic() > deadline:
                    return (
                        f"fio --server of client {client.index} was not listening within "
                        f"{SERVER_READY_S:g} s"
                    )
                time.sleep(0.01)
        return None

    def _follow(self, server: NetworkServer) -> None:
        """The host sampler follows every daemon (the I/O path) and fio server (the load), and the
        server."""
        for client in self.clients:
            if self.req.on_process and client.daemon is not None:
                self.req.on_process(client.daemon.pid)
            if self.req.on_load_process and client.fio_server is not None:
                with contextlib.suppress(ProcessLookupError):
                    self.req.on_load_process(client.fio_server.pid)
        follow_server(server, self.req.on_server_process, self.meta)

    def _drive(self) -> RunOutcome:
        """Run the fio client against every server and turn its report into the run's outcome."""
        run_dir = self.req.run_dir
        argv = [self.fio, "--output-format=json", "--output=fio.json"]
        for client in self.clients:
            where = (
                client.remote.host.fio_server_arg()
                if client.remote is not None
                else f"sock:{client.server_socket.relative_to(run_dir)}"
            )
            argv += [f"--client={where}", str((client.directory / "job.fio").relative_to(run_dir))]
        self.meta["fio_argv"] = argv
        t_fio = time.monotonic()
        proc = children.spawn(
            argv,
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, stderr = proc.communicate(timeout=max(1.0, self.req.timeout_s))
        except subprocess.TimeoutExpired:
            children.kill(proc, tree=True)
            return self._failed(f"fio did not finish within {self.req.timeout_s:g} s; killed")
        except BaseException:
            children.kill(proc, tree=True)
            raise
        finally:
            children.release(proc)
        self.phases["fio_s"] = time.monotonic() - t_fio
        out = run_dir / "fio.json"
        raw = out.read_text(errors="replace") if out.exists() else ""
        if proc.returncode != 0:
            why = fatal_message(stderr + raw) or last_lines(stderr, 3) or "no message"
            return self._failed(
                f"fio --client exited with status {proc.returncode}: {why}",
                raw,
                last_lines(stderr + self._logs(), 40),
            )
        return self._outcome(raw, stderr)

    def _outcome(self, raw: str, stderr: str) -> RunOutcome:
        primary = self.req.workload.primary_metric
        try:
            by_host = client_reports_by_host(extract_client_json(raw))
            reports = list(by_host.values())
            hosts = [c.remote.host.fio_address for c in self.clients if c.remote is not None]
            if hosts:  # client i is host i's, whatever order fio listed them in
                if missing := [h for h in hosts if h not in by_host]:
                    raise FioOutputError(
                        f"fio reported no results from client host(s) {', '.join(missing)}"
                    )
                reports = [by_host[h] for h in hosts]
            if len(reports) != len(self.clients):
                raise FioOutputError(
                    f"fio reported {len(reports)} clients, {len(self.clients)} ran"
                )
            per_client = [checked_metrics(r, stderr, primary) for r in reports]
        except FioOutputError as err:
            return self._failed(str(err), raw, last_lines(stderr, 40))
        metrics = aggregate_metrics(per_client, primary)
        self.phases["workload_s"] = metrics.get("job.runtime_s", 0.0)
        self.phases["fio_overhead_s"] = max(0.0, self.phases["fio_s"] - self.phases["workload_s"])
        return RunOutcome(
            ok=True,
            metrics=metrics,
            job_text=self.job_text,
            raw_output=raw,
            console_tail=last_lines(stderr, 40),
            meta=self.meta,
            clients=per_client,
        )

    def _logs(self) -> str:
        """The daemons' and fio servers' last lines: what says why a client failed."""
        parts = []
        for client in self.clients:
            if client.remote is not None:
                parts.append(
                    f"client {client.index} on {client.remote.host.label}: "
                    f"{client.remote.ssh_error()}"
                )
                continue
            for name in ("daemon.log", "fio-server.log"):
                with contextlib.suppress(OSError):
                    text = (client.directory / name).read_text(errors="replace").strip()
                    if text:
                        parts.append(f"client {client.index} {name}: {last_lines(text, 5)}")
        return "\n".join(parts)

    def _stop_all(self, grace_s: float) -> None:
        """Stop every fio server and daemon (fio first: nothing issues I/O to a stopping daemon),
        then remove their sockets. The disks are given back after this, when the caller's ExitStack
        closes."""
        for client in self.clients:
            if client.remote is not None:  # its script stops the fio server and the daemon there
                client.remote.stop(grace_s)
            if client.fio_server is not None:
                self.stop_child(client.fio_server, grace_s)
                client.fio_server = None
        for client in self.clients:
            if client.daemon is not None:
                self.stop_child(client.daemon, grace_s)
                client.daemon = None
            for path in client.paths:
                path.unlink(missing_ok=True)
                forget(self.workdir, path)
            client.paths = []
