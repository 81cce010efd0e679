"""The shared-storage axes of issue 34 (lun_type, lun_write_cache, initiator, nfs_client, rtt):
their registry entries, the rules that keep each on the backings it belongs to (with the reason
`plan --explain` shows), the kernel-client probe on this host, and the null LUN / LUN write cache as
the safety requirements read them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from iomatrix import protocols, storage_clients
from iomatrix.backing import iscsi as iscsi_lab
from iomatrix.domain import SafetyLevel, axes, network_axes
from iomatrix.domain.axes import BackingFacts, RuleContext
from iomatrix.domain.rtt import rtt_ms
from iomatrix.matrix import Cell, complete
from iomatrix.report.query import CellWorkload
from iomatrix.report.recommend.requirements import REQUIREMENTS
from iomatrix.report.recommend.risks import TARGET_POWER_LOSS, risk_statements
from tests.conftest import run_cli

LOCAL = BackingFacts(unavailable=None, o_direct=True, is_device=False)
ISCSI = BackingFacts(unavailable=None, o_direct=True, is_device=True, protocol="iscsi")
NFS = BackingFacts(unavailable=None, o_direct=True, is_device=False, protocol="nfs")
NEW = ("lun_type", "lun_write_cache", "initiator", "nfs_client", "rtt")


def _cell(**values: str) -> dict[str, str]:
    """A block-layer cell at every axis's default, with `values` over them."""
    base = {a.name: a.default for a in axes.plan_axes()}
    return {**base, "tier": "blocklayer", "backing": "b", "bus": "-", "cache": "none", **values}


def _why(facts: BackingFacts, **values: str) -> str | None:
    return axes.prune_reason(_cell(**values), RuleContext(facts, "b"))


def test_the_new_axes_are_registered_as_the_brief_names_them() -> None:
    got = {n: (axes.get(n).values, axes.get(n).default) for n in NEW}
    assert got == {
        "lun_type": (("null", "fileio", "blockio"), "fileio"),
        "lun_write_cache": (("off", "on"), "off"),
        "initiator": (("libiscsi", "kernel"), "libiscsi"),
        "nfs_client": (("libnfs", "kernel"), "libnfs"),
        "rtt": (("0", "0.5ms", "1ms", "2ms", "5ms"), "0"),
    }
    for n in NEW:
        a = axes.get(n)
        assert not a.always_named and a.summary and a.simpler[0] == a.default
        # block layer and guests; not bare metal (the server-side baseline)
        assert axes.Layer.IMAGE in a.layers


def test_each_protocols_axes_live_in_its_house_in_the_stored_order() -> None:
    """Issue 48: each protocol's axes are its own module's (NetworkProtocol.axes), placed among the
    shared network axes where their cells were first stored: the registry's order keys cells and
    orders tables' columns, so it is the order it was before the move."""
    names = axes.names()
    start = names.index("lun_type")
    assert names[start:] == (
        "lun_type",
        "lun_write_cache",
        "initiator",
        "nfs_client",
        "rtt",
        "clients",
        "rbd_cache",
        "rbd_cache_policy",
        "rbd_cache_writethrough_until_flush",
        "rbd_client",
        "rbd_object_size",
    )
    for network in protocols.protocols():
        for axis in network.axes:
            assert axes.get(axis.name) is axis
    owner = {a.name: p.name for p in protocols.protocols() for a in p.axes}
    assert owner["lun_type"] == "iscsi" and owner["nfs_client"] == "nfs"
    assert owner["rbd_object_size"] == "rbd" and "rtt" not in owner


def test_a_protocols_axes_naming_no_shared_axis_are_refused() -> None:
    own = axes.get("nfs_client")
    with pytest.raises(ValueError, match=r"^axes nfs_client go before 'cache', which is no shared"):
        network_axes.ordered([("cache", (own,))])
    placed = network_axes.ordered([(None, (own,)), ("clients", (axes.get("lun_type"),))])
    assert [a.name for a in placed] == ["rtt", "lun_type", "clients", "nfs_client"]


def test_an_old_cell_keeps_its_key_and_label() -> None:
    # Stored before these axes existed: no new axis is named, so its key and label read as they did.
    stored = {
        "tier": "blocklayer",
        "format": "raw",
        "preallocation": "off",
        "cache": "none",
        "aio": "threads",
        "bus": "-",
        "backing": "dir:/tmp",
        "modifier": "none",
    }
    cell = complete(stored)
    assert all(cell[n] == axes.get(n).default for n in NEW)
    assert not {n for n, _ in axes.named(cell)} & set(NEW)
    assert Cell({**cell, "lun_write_cache": "on"}).key != cell.key
    assert "lun_write_cache=on" in Cell({**cell, "lun_write_cache": "on"}).label()


@pytest.mark.parametrize(
    ("values", "facts", "expected"),
    [
        (
            {"lun_type": "blockio"},
            LOCAL,
            "lun_type applies to iscsi backings only; b is a local backing",
        ),
        (
            {"lun_write_cache": "on"},
            NFS,
            "lun_write_cache applies to iscsi backings only; b is a nfs backing",
        ),
        ({"initiator": "kernel"}, LOCAL, "initiator applies to iscsi backings only"),
        ({"nfs_client": "kernel"}, ISCSI, "nfs_client applies to nfs backings only"),
        ({"lun_type": "null", "format": "qcow2"}, ISCSI, "a null LUN stores nothing"),
        ({"lun_type": "null", "lun_write_cache": "on"}, ISCSI, "no write cache to turn on"),
        ({"rtt": "2ms"}, NFS, "QEMU's nfs driver has no port option"),
        ({"rtt": "0.5ms"}, LOCAL, "b is a local backing"),
        ({"aio": "io_uring"}, ISCSI, "aio=io_uring is an option of QEMU's file protocol"),
        ({"aio": "native"}, NFS, "QEMU's nfs driver on backing b"),
    ],
)
def test_a_value_where_it_does_not_belong_is_pruned_with_the_reason(
    values: dict[str, str], facts: BackingFacts, expected: str
) -> None:
    why = _why(facts, **values)
    assert why is not None and expected in why


@pytest.mark.parametrize(
    ("values", "facts"),
    [
        ({"lun_type": "blockio", "lun_write_cache": "on", "rtt": "2ms"}, ISCSI),
        ({"lun_type": "null", "format": "raw"}, ISCSI),
        ({"format": "qcow2", "cache": "writeback"}, NFS),
        # through the kernel's initiator the LUN is a device
        ({"aio": "io_uring", "initiator": "kernel"}, ISCSI),
        ({"aio": "io_uring"}, LOCAL),
    ],
)
def test_a_value_where_it_belongs_runs(values: dict[str, str], facts: BackingFacts) -> None:
    assert _why(facts, **values) is None


def test_without_backing_facts_no_network_rule_applies() -> None:
    # A snippet for the user's own storage: iomatrix does not know the backing, the user says what
    # it is.
    assert (
        axes.prune_reason(_cell(lun_type="blockio", rtt="2ms", nfs_client="kernel"), RuleContext())
        is None
    )


def test_the_kernel_clients_are_pruned_with_what_this_host_lacks() -> None:
    # The real probe of this host: its reason reaches the rule through BackingFacts, as the runner
    # hands it over.
    for protocol, axis in (("iscsi", "initiator"), ("nfs", "nfs_client")):
        missing = storage_clients.kernel_client_missing(protocol)
        facts = BackingFacts(
            unavailable=None,
            o_direct=True,
            is_device=False,
            protocol=protocol,
            kernel_client_missing=missing,
        )
        why = _why(facts, **{axis: "kernel"})
        if missing is None:
            assert why is None
        else:
            assert why == f"{axis}=kernel needs the host's kernel client: {missing}"
    if shutil.which("iscsiadm") is None:
        assert "open-iscsi" in (iscsi_lab.probe_kernel_client() or "")
    assert storage_clients.kernel_client_missing(None) is None


def test_the_kernel_client_decisions() -> None:
    assert storage_clients.iscsi_missing("/usr/sbin/iscsiadm", True) is None
    assert (
        storage_clients.iscsi_missing(None, True)
        == "no iscsiadm (Debian package open-iscsi) on this host"
    )
    assert "iscsi_tcp" in (storage_clients.iscsi_missing("/usr/sbin/iscsiadm", False) or "")
    assert storage_clients.nfs_missing("/usr/sbin/mount.nfs", True) is None
    assert "nfs-common" in (storage_clients.nfs_missing(None, True) or "")
    assert "no NFS client in this kernel" in (
        storage_clients.nfs_missing("/usr/sbin/mount.nfs", False) or ""
    )


@pytest.mark.parametrize("value", ["0", "0.5ms", "2ms", "500us", "1000ms"])
def test_rtt_takes_free_form_round_trip_times(value: str) -> None:
    assert axes.get("rtt").invalid(value) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2 ms", "is not a round-trip time"),
        ("fast", "is not a round-trip time"),
        ("0ms", 'write it "0"'),
        ("5s", "is not a round-trip time"),
        ("2000ms", "above 1000 ms"),
        ("-1ms", "is not a round-trip time"),
    ],
)
def test_a_bad_rtt_is_one_line_naming_the_fix(value: str, expected: str) -> None:
    why = axes.get("rtt").invalid(value)
    assert why is not None and expected in why and "\n" not in why
    assert rtt_ms("0.5ms") == 0.5 and rtt_ms("500us") == 0.5 and rtt_ms("0") == 0


def test_a_null_lun_never_meets_a_safety_requirement_and_the_lun_write_cache_is_like_a_disk_cache() -> (  # noqa: E501
    None
):
    safe, durable = REQUIREMENTS["power-loss-safe"], REQUIREMENTS["every-write-durable"]
    null = _cell(lun_type="null", cache="writethrough")
    assert axes.risk_level(null) == SafetyLevel.UNSAFE
    assert not safe.met_by(null) and not durable.met_by(null)
    # The LUN's write cache: tgt fdatasyncs on SYNCHRONIZE CACHE and on FUA writes, and QEMU's iscsi
    # driver sends a SYNCHRONIZE CACHE for every guest flush; so the cache mode's own guarantee
    # stands.
    cached = _cell(lun_write_cache="on", cache="none")
    assert axes.risk_level(cached) == SafetyLevel.LIKE_A_DISK_CACHE
    assert safe.met_by(cached) and not durable.met_by(cached)
    assert durable.met_by(_cell(lun_write_cache="on", cache="writethrough"))
    assert not safe.met_by(_cell(lun_write_cache="on", cache="unsafe"))


def _plan(tmp_path: Path, extra: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'tier = ["blocklayer"]\nworkloads = ["rand-write-4k-qd1"]\n{extra}\n'
        f'[[backing]]\ntype = "dir"\npath = "{tmp_path}"\n'
    )
    return plan


def test_plan_explain_tells_why_a_local_backing_runs_no_lun_or_latency(tmp_path: Path) -> None:
    r = run_cli(
        "plan",
        "--explain",
        str(_plan(tmp_path, 'lun_write_cache = ["off", "on"]\nrtt = ["0", "2ms"]')),
    )
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "lun_write_cache applies to iscsi backings only" in text
    assert "rtt emulates the network between a disk's client and its storage server" in text


def test_a_bad_rtt_in_a_plan_is_one_line(tmp_path: Path) -> None:
    r = run_cli("plan", str(_plan(tmp_path, 'rtt = ["0", "2 ms"]')))
    assert r.returncode != 0
    assert "rtt.1: '2 ms' is not a round-trip time" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2


def test_the_answer_names_the_target_power_loss_risk_of_the_lun_write_cache() -> None:
    def situations(**values: str) -> list[str]:
        cell = CellWorkload(
            1, "k", _cell(**values), {"backing_type": "iscsi"}, "rand-write-4k-qd1", []
        )
        return {r.situation: r.text for r in risk_statements(cell.axes["cache"], "none", cell)}

    # what a target power loss loses, for the LUN's write cache setting the answer has (issue 49)
    on, off = situations(lun_write_cache="on"), situations()
    assert "lun_write_cache=on, loses what the guest has not flushed yet" in on[TARGET_POWER_LOSS]
    assert "lun_write_cache=off, loses no acknowledged write" in off[TARGET_POWER_LOSS]


@pytest.mark.parametrize(
    ("protocol", "client_axis", "client", "server"),
    [
        ("iscsi", "initiator", "libiscsi", "iSCSI target"),
        ("nfs", "nfs_client", "libnfs", "NFS server"),
    ],
)
def test_writeback_on_qemus_own_network_client_is_not_described_as_the_host_page_cache(
    protocol: str, client_axis: str, client: str, server: str
) -> None:
    """QEMU's libiscsi and libnfs keep nothing in the host: the file texts ("in the host page
    cache") were wrong for them; a kernel client (an NFS mount) keeps the file texts."""

    def risks(**values: str) -> dict[str, str]:
        cell = CellWorkload(
            1,
            "k",
            _cell(cache="writeback", backing=protocol, **values),
            {"backing_type": protocol},
            "rand-write-4k",
            [],
        )
        return {r.situation: r.text for r in risk_statements("writeback", cell=cell)}

    own = risks(**{client_axis: client})
    assert (
        f"QEMU's {client} keeps no cache in this host" in own["QEMU crash"]
        and server in own["QEMU crash"]
    )
    assert not any("page cache is" in t and "no host page cache" not in t for t in own.values()), (
        own
    )
    kernel = risks(**{client_axis: "kernel"})
    assert "host page cache" in kernel["QEMU crash"]
