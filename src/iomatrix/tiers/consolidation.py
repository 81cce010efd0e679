"""Consolidation tier: N tiles of guests started together, each tile a set of roles that load
each other; one run is one sweep point (a tile count), and it ends when every role has ended.

Every guest boots on a fresh image of the cell's format, cache mode, aio and bus; the two ends of a
file-copy pair talk over a private link of their own (two QEMU `-netdev dgram` unix sockets, nothing
else on it). A role that fails, or a point that outlives run_timeout, stops every guest of the point
at once; the run is recorded failed with the failing guest's console tail and the sweep goes on.
Guests are children of `iomatrix.children`, so none survives an interrupt or a crash of iomatrix.

The host view of the point (each QEMU's CPU and peak RSS, host CPU split, memory without cache, KSM,
disk) comes from `iomatrix.consolidation.hostview`; the runner's sampler follows every QEMU too
(on_process)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

from iomatrix import children
from iomatrix.backing.leftover_kinds import KSM_RUN
from iomatrix.backing.leftovers import forget, record, release, short_scratch_dir
from iomatrix.consolidation.hostview import PointProbe
from iomatrix.consolidation.memory import available_mb, check_memory
from iomatrix.consolidation.roles import GuestPlan, guests_per_tile, point_guests
from iomatrix.consolidation.spec import tiles_of
from iomatrix.errors import UserError
from iomatrix.fio.parse import FioOutputError, report_metrics
from iomatrix.guest.accel import AccelChoice, choose_accel
from iomatrix.guest.artifacts import GuestArtifacts, ensure_artifacts
from iomatrix.guest.job import GuestJob
from iomatrix.guest.kernel import BUS_MODULES, FS_MODULES, NET_MODULES
from iomatrix.guest.process import GuestHandle, kill_all_guests, start_guest
from iomatrix.guest.stream import GuestOutcome
from iomatrix.guest.stream import parse_result_stream as _parse_stream
from iomatrix.images import remove_image
from iomatrix.matrix import Cell
from iomatrix.monitor.devices import resolve_device_chain
from iomatrix.plan.model import Plan
from iomatrix.qemu_block import DiskSpec
from iomatrix.tiers.base import RunOptions, RunOutcome, RunRequest, Tier, fresh_image
from iomatrix.tiers.declared.consolidation import Consolidation, spec_of

POLL_S = 0.1


class ConsolidationTier(Consolidation, Tier):
    """Runs the consolidation tier (declared in iomatrix.tiers.declared.consolidation)."""

    def __init__(self, plan: Plan, opts: RunOptions) -> None:
        super().__init__(plan, opts)
        self.spec = spec_of(plan)
        self.workdir = opts.workdir
        self._ksm_entry: str | None = None
        self._ksm_previous: str | None = None

    # -- sweep-level set-up ------------------------------------------------------------------------
    @classmethod
    def preflight(cls, plan: Plan) -> None:
        cls.check_memory_of(plan, Path("/proc/meminfo").read_text())

    def open(self) -> None:
        self.check_memory()
        log = self.opts.log
        self.artifacts: GuestArtifacts = ensure_artifacts(kernel=self.opts.kernel, log=log)
        missing = [m for m in NET_MODULES if m.replace("-", "_") not in self.artifacts.module_load]
        if missing:
            raise UserError(
                f"the guest kernel {self.artifacts.kernel_version} lacks {', '.join(missing)}",
                hint="the consolidation tier needs a virtio network card in its guests",
            )
        force = self.opts.accel
        if log and force == "auto":
            log(
                "choosing the guest accelerator (a KVM probe boots one guest, ≤ 10 s, "
                "cached afterwards)"
            )
        self.choice: AccelChoice = choose_accel(
            self.artifacts, force=None if force == "auto" else force
        )
        if self.spec.ksm:
            self._enable_ksm()

    @staticmethod
    def check_memory_of(plan: Plan, meminfo_text: str) -> None:
        """Refuse the plan if its largest point's guests cannot fit in this host's memory."""
        spec = spec_of(plan)
        check_memory(
            max(spec.tiles),
            guests_per_tile(spec.roles),
            plan.guest_memory_mb,
            available_mb(meminfo_text),
        )

    def check_memory(self, meminfo_text: str | None = None) -> None:
        """The same, again when the sweep opens the tier (memory may have been taken meanwhile)."""
        self.check_memory_of(
            self.plan,
            meminfo_text if meminfo_text is not None else Path("/proc/meminfo").read_text(),
        )

    def _enable_ksm(self) -> None:
        try:
            previous = Path(KSM_RUN).read_text().strip()
        except OSError as err:
            raise UserError(
                f"KSM was allowed but {KSM_RUN} cannot be read: {err.strerror}",
                hint="set ksm = false, or run on a kernel with CONFIG_KSM",
            ) from None
        if previous == "1":
            return  # already on: nothing to restore
        # The ledger entry comes first, so `iomatrix clean` restores the setting even after a kill
        # -9.
        self._ksm_entry = record(self.workdir, "ksm", KSM_RUN, previous=previous)
        self._ksm_previous = previous
        try:
            Path(KSM_RUN).write_text("1")
        except OSError as err:
            self._restore_ksm()
            raise UserError(
                f"cannot enable KSM ({KSM_RUN}): {err.strerror}",
                hint="run as root, or set ksm = false",
            ) from None

    def _restore_ksm(self) -> None:
        if self._ksm_previous is None:
            return
        with contextlib.suppress(OSError):
            Path(KSM_RUN).write_text(self._ksm_previous)
        if self._ksm_entry is not None:
            release(self.workdir, self._ksm_entry)
        self._ksm_entry = self._ksm_previous = None

    def accel(self) -> str:
        return self.choice.accel

    def describe(self) -> str:
        note = (
            " — under TCG every guest is emulated on the host's CPUs, so the scaling "
            "measured is bound by "
            "emulation CPU, not by the disk"
            if self.choice.accel == "tcg"
            else ""
        )
        return (
            f"consolidation tier: accelerator {self.choice.accel} ({self.choice.reason}); tiles "
            f"{self.spec.tiles} of {', '.join(self.spec.roles)} "
            f"({guests_per_tile(self.spec.roles)} guests "
            f"each), slowdown bound {self.spec.slowdown_bound:g}×{note}"
        )

    def close(self) -> None:
        try:
            kill_all_guests()
        finally:
            self._restore_ksm()

    # -- one sweep point ---------------------------------------------------------------------------
    def _modules(self, cell: Cell, g: GuestPlan) -> str:
        names = list(BUS_MODULES[cell.bus])
        if g.kind == "role-filecopy":
            names += list(FS_MODULES[self.plan.guest_fs]) + list(NET_MODULES)
        return " ".join(self.artifacts.modules_for(names))

    @staticmethod
    def _net_args(g: GuestPlan, sock_dir: Path) -> list[str]:
        if g.link is None:
            return []
        # Two ends of one link: each binds its own unix datagram socket and sends to the other's.
        me, peer = ("a", "b") if g.env.get("IOMX_COPY_SIDE") == "source" else ("b", "a")
        local, remote = sock_dir / f"{g.link}-{me}", sock_dir / f"{g.link}-{peer}"
        return [
            "-netdev",
            f"dgram,id=n0,local.type=unix,local.path={local},remote.type=unix,remote.path={remote}",
            "-device",
            f"virtio-net-pci,netdev=n0,mac={g.mac},romfile=",
        ]

    def run(self, req: RunRequest) -> RunOutcome:
        cell = req.cell
        tiles = tiles_of(req.workload.name)
        if tiles is None:
            return RunOutcome(ok=False, error=f"workload {req.workload.name} is not a tile count")
        guests = point_guests(tiles, self.spec.roles, self.spec.scale)
        devices: list[str] = []
        if req.target.kind == "dir" and req.target.path is not None:
            with contextlib.suppress(OSError, ValueError):
                devices = resolve_device_chain(req.target.path)
        probe = PointProbe(devices)
        images: list[Path] = []
        handles: dict[str, GuestHandle] = {}
        # Unix socket paths must stay short (108 bytes): a private directory under /tmp, not the run
        # dir. Recorded before it is made (a SIGKILLed sweep's `clean` removes it, though it lies
        # outside the workdir).
        sock_dir = short_scratch_dir(self.workdir, "net")
        outcomes: dict[str, GuestOutcome] = {}
        blocks: dict[str, dict[str, str]] = {}
        try:
            with children.SigtermGuard():
                for g in guests:
                    image, _ours = fresh_image(
                        req, self.workdir, self.plan.image_size_bytes, f"iomatrix-consol-{g.label}"
                    )
                    assert image is not None
                    images.append(image)
                probe.start()
                t0 = time.monotonic()
                for g in guests:
                    job = GuestJob(
                        kind=g.kind,
                        fs=self.plan.guest_fs,
                        files=dict(g.files),
                        env={**g.env, "IOMX_MODULES": self._modules(cell, g)},
                    )
                    disk = DiskSpec.for_cell(cell, images[len(handles)], self.plan.image_size_bytes)
                    h = start_guest(
                        self.artifacts,
                        self.choice.accel,
                        disk,
                        job,
                        req.run_dir / g.label,
                        wrapper=req.wrapper or None,
                        memory_mb=self.plan.guest_memory_mb,
                        extra_args=self._net_args(g, sock_dir),
                    )
                    handles[g.label] = h
                    probe.follow(h.pid, g.label)
                    if req.on_process is not None:
                        with contextlib.suppress(ProcessLookupError):
                            req.on_process(h.pid)
                start_window = time.monotonic() - t0
                failure = self._wait_all(
                    handles, probe, outcomes, blocks, t0 + req.timeout_s, req.timeout_s
                )
                wall = time.monotonic() - t0
        finally:
            for h in handles.values():
                h.kill()
            for image in images:
                remove_image(image)
                forget(self.workdir, image)
            shutil.rmtree(sock_dir, ignore_errors=True)
            forget(self.workdir, sock_dir)
        host = probe.finish()
        result = self._outcome(
            guests,
            outcomes,
            blocks,
            failure=failure,
            wall=wall,
            start_window=start_window,
            host=host,
            req=req,
        )
        if result.ok:  # a failed point keeps its consoles and QEMU command lines for inspection
            shutil.rmtree(req.run_dir, ignore_errors=True)
        return result

    def _wait_all(
        self,
        handles: dict[str, GuestHandle],
        probe: PointProbe,
        outcomes: dict[str, GuestOutcome],
        blocks: dict[str, dict[str, str]],
        deadline: float,
        timeout_s: float,
    ) -> str | None:
        """Wait until every guest has powered off. The first failing role, or the deadline, stops
        the rest. Returns the label of the guest that failed first (None when all succeeded)."""
        pending = dict(handles)
        failed: str | None = None
        while pending:
            probe.poll()
            for label, h in list(pending.items()):
                # WNOWAIT: see the exit without reaping, so the probe reads the zombie's final CPU
                # ticks first.
                try:
                    exited = (
                        os.waitid(os.P_PID, h.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                    )
                except ChildProcessError:
                    exited = True
                if not exited:
                    continue
                probe.poll()
                outcomes[label] = h.wait(5)
                blocks[label] = _parse_stream(h.reader.text()).blocks
                del pending[label]
                if not outcomes[label].ok and failed is None:
                    failed = label
            if failed is not None and pending:
                for label, h in pending.items():
                    h.kill(f"stopped because role {failed} failed")
                    outcomes[label] = h.wait(5)
                    blocks[label] = {}
                pending.clear()
            elif pending and time.monotonic() > deadline:
                for label, h in pending.items():
                    h.kill(
                        f"the point did not finish within {timeout_s:g} s: killed QEMU "
                        f"(pid {h.pid})"
                    )
                    outcomes[label] = h.wait(5)
                    blocks[label] = {}
                    failed = failed or label
                pending.clear()
            else:
                time.sleep(POLL_S)
        return failed

    def _outcome(
        self,
        guests: list[GuestPlan],
        outcomes: dict[str, GuestOutcome],
        blocks: dict[str, dict[str, str]],
        failure: str | None,
        wall: float,
        start_window: float,
        host: dict[str, float],
        req: RunRequest,
    ) -> RunOutcome:
        meta: dict = {
            "accel_reason": self.choice.reason,
            "guest_artifacts": self.artifacts.as_metadata(),
            "tiles": tiles_of(req.workload.name),
            "roles": list(self.spec.roles),
            "slowdown_bound": self.spec.slowdown_bound,
            "scale": self.spec.scale,
            "guests": {},
        }
        job_text = "\n".join(
            f"# {g.label}: {g.kind} {json.dumps(g.env, sort_keys=True)}\n"
            + "".join(g.files.values())
            for g in guests
        )
        for g in guests:
            out = outcomes.get(g.label)
            meta["guests"][g.label] = {
                "role": g.role,
                "tile": g.tile,
                "ok": bool(out and out.ok),
                "error": out.error if out else None,
                "phases": out.phases if out else {},
                "qemu_argv": out.qemu_argv if out else [],
            }
        phases = {"wall_s": round(wall, 3), "start_window_s": round(start_window, 3)}
        if failure is not None:
            out = outcomes.get(failure)
            why = out.error if out is not None else "no outcome"
            tail = out.console_tail if out is not None else ""
            return RunOutcome(
                ok=False,
                phases=phases,
                job_text=job_text,
                error=f"role {failure} failed: {why}",
                console_tail=f"[console of guest {failure}]\n{tail}",
                meta=meta,
                metrics=host,
            )
        metrics: dict[str, float] = {
            "point.wall_s": round(wall, 3),
            "point.start_window_s": round(start_window, 3),
            "point.guests": float(len(guests)),
            "point.tiles": float(tiles_of(req.workload.name) or 0),
        }
        by_role: dict[str, list[dict[str, float]]] = {}
        try:
            for g in guests:
                out = outcomes[g.label]
                m: dict[str, float] = {}
                if "workload_s" in out.phases:
                    m["seconds"] = out.phases["workload_s"]
                if out.fio_json is not None:
                    m.update(report_metrics(out.fio_json))
                if "copy" in blocks.get(g.label, {}):
                    with contextlib.suppress(ValueError):
                        for k, v in json.loads(blocks[g.label]["copy"]).items():
                            if isinstance(v, int | float) and not isinstance(v, bool):
                                m[k] = float(v)
                by_role.setdefault(g.role, []).append(m)
        except FioOutputError as err:
            return RunOutcome(
                ok=False, phases=phases, job_text=job_text, error=f"guest fio: {err}", meta=meta
            )
        for role, per_tile in by_role.items():
            keys = sorted({k for m in per_tile for k in m})
            for k in keys:
                vals = [m[k] for m in per_tile if k in m]
                metrics[f"role.{role}.{k}"] = round(sum(vals) / len(vals), 6)
            secs = [m["seconds"] for m in per_tile if "seconds" in m]
            if secs:
                # The answer asks whether every copy of a role stays within the bound: the slowest
                # one counts.
                metrics[f"role.{role}.seconds_max"] = round(max(secs), 6)
        metrics.update(host)
        return RunOutcome(ok=True, metrics=metrics, phases=phases, job_text=job_text, meta=meta)
