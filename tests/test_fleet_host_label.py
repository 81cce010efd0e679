"""A fleet host's inventory name (IOMATRIX_HOST_LABEL, which the Ansible role sets) is stored with
its sweep and names the host in the fleet reports; two hosts that share a hostname stay two hosts
through a merge — by their inventory names, or without them by their machine ids (also when merged
databases are merged again)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from iomatrix.metadata import host_metadata
from iomatrix.report.fleet import select_fleet
from iomatrix.store import Store
from iomatrix.store.db import HOST_COLUMNS
from iomatrix.store.merge import merge


def one_sweep(path: Path) -> None:
    """A database holding one finished sweep of this machine, recorded as `iomatrix run` records its
    host."""
    store = Store(path)
    sweep = store.create_sweep(
        store.host_id(host_metadata()), "quick", "fp-quick", '{"name": "quick"}', [], []
    )
    store.set_sweep_status(sweep, "finished")
    store.close()


def test_two_hosts_sharing_a_hostname_stay_two_named_by_their_inventory_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both "hosts" are this machine: the same hostname, kernel, CPU, tool versions — only the label
    # differs.
    for label in ("pve-gen10-01", "pve-gen10-02"):
        monkeypatch.setenv("IOMATRIX_HOST_LABEL", label)
        one_sweep(tmp_path / f"{label}.sqlite")
    merge(
        tmp_path / "fleet.sqlite",
        [tmp_path / "pve-gen10-01.sqlite", tmp_path / "pve-gen10-02.sqlite"],
    )
    store = Store.open_existing(tmp_path / "fleet.sqlite")
    sweeps = store.fleet_sweeps()
    assert [s.hostname for s in sweeps] == ["pve-gen10-01", "pve-gen10-02"]
    assert len({s.host_id for s in sweeps}) == 2
    host = store.sweep(sweeps[0].id).host
    assert host["hostname"] == host_metadata()["hostname"] and host["host_label"] == "pve-gen10-01"
    assert "machine_id" in host  # recorded beside them (None where /etc/machine-id is missing)


def test_without_a_label_hosts_are_named_and_identified_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IOMATRIX_HOST_LABEL", raising=False)
    one_sweep(tmp_path / "a.sqlite")
    one_sweep(tmp_path / "b.sqlite")
    merge(tmp_path / "fleet.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    sweeps = Store.open_existing(tmp_path / "fleet.sqlite").fleet_sweeps()
    # The same machine twice, no label: one host (its identifying facts are equal), named by its
    # hostname.
    assert len({s.host_id for s in sweeps}) == 1
    assert {s.hostname for s in sweeps} == {host_metadata()["hostname"]}


def sweep_of_machine(
    path: Path, machine_id: str, *, hostname: str = "pve", before_machine_ids: bool = False
) -> None:
    """A database holding one finished sweep of a machine called `hostname` (no inventory name) with
    this machine id and otherwise this machine's facts: a cloned host. `before_machine_ids`: its
    host row as the previous version wrote it (the machine id recorded, but not yet part of the
    identity)."""
    facts = {**host_metadata(), "hostname": hostname, "host_label": None, "machine_id": machine_id}
    store = Store(path)
    sweep = store.create_sweep(
        store.host_id(facts), "quick", "fp-quick", '{"name": "quick"}', [], []
    )
    store.set_sweep_status(sweep, "finished")
    if before_machine_ids:
        # host_id's fingerprint before the machine id joined it
        identity = {k: facts.get(k) for k in HOST_COLUMNS}
        with store.tx() as db:
            db.execute("UPDATE hosts SET fingerprint=?", (json.dumps(identity, sort_keys=True),))
    store.close()


def test_two_merged_databases_holding_same_named_unlabelled_hosts_keep_them_apart(
    tmp_path: Path,
) -> None:
    """Issue 37: two merged databases that both hold a host called pve (two machines, no inventory
    name) gave one host 'pve' when merged together. The machine id keeps them apart, named by its
    start."""
    a, b = "a" * 32, "b" * 32
    sweep_of_machine(tmp_path / "pve-a.sqlite", a)
    sweep_of_machine(tmp_path / "web.sqlite", "c" * 32, hostname="web")
    sweep_of_machine(tmp_path / "pve-b.sqlite", b)
    sweep_of_machine(tmp_path / "db.sqlite", "d" * 32, hostname="db")
    merge(tmp_path / "rack-1.sqlite", [tmp_path / "pve-a.sqlite", tmp_path / "web.sqlite"])
    merge(tmp_path / "rack-2.sqlite", [tmp_path / "pve-b.sqlite", tmp_path / "db.sqlite"])
    merge(tmp_path / "fleet.sqlite", [tmp_path / "rack-1.sqlite", tmp_path / "rack-2.sqlite"])
    store = Store.open_existing(tmp_path / "fleet.sqlite")
    sweeps = store.fleet_sweeps()
    assert sorted(s.hostname for s in sweeps) == [
        "db",
        "pve (machine aaaaaaaa)",
        "pve (machine bbbbbbbb)",
        "web",
    ]
    assert len({s.host_id for s in sweeps}) == 4
    assert len(select_fleet(store).sweeps) == 4  # the fleet answers see four hosts
    store.close()
    again = merge(
        tmp_path / "fleet.sqlite", [tmp_path / "rack-2.sqlite", tmp_path / "pve-a.sqlite"]
    )
    assert again.hosts == 4 and again.sweeps == 4 and all(r.sweeps_added == 0 for r in again.inputs)


def test_databases_recorded_before_the_machine_id_joined_the_identity_are_kept_apart_too(
    tmp_path: Path,
) -> None:
    sweep_of_machine(tmp_path / "pve-a.sqlite", "a" * 32, before_machine_ids=True)
    sweep_of_machine(tmp_path / "pve-b.sqlite", "b" * 32, before_machine_ids=True)
    for name in ("pve-a", "pve-b"):  # as written: one fingerprint for both machines
        con = sqlite3.connect(tmp_path / f"{name}.sqlite")
        assert "machine_id" not in con.execute("SELECT fingerprint FROM hosts").fetchone()[0]
        con.close()
    merged = merge(
        tmp_path / "fleet.sqlite", [tmp_path / "pve-a.sqlite", tmp_path / "pve-b.sqlite"]
    )
    assert merged.hosts == 2
    sweeps = Store.open_existing(tmp_path / "fleet.sqlite").fleet_sweeps()
    assert sorted(s.hostname for s in sweeps) == [
        "pve (machine aaaaaaaa)",
        "pve (machine bbbbbbbb)",
    ]
    # A machine recorded both ways (one database written by both versions) stays one host with both
    # sweeps.
    both = tmp_path / "both.sqlite"
    sweep_of_machine(both, "a" * 32, before_machine_ids=True)
    sweep_of_machine(both, "a" * 32)
    con = sqlite3.connect(both)
    assert con.execute("SELECT COUNT(*) FROM hosts").fetchone()[0] == 2
    con.close()
    merged = merge(tmp_path / "fleet-2.sqlite", [both])
    assert (merged.hosts, merged.sweeps) == (1, 2)
    # the same machine's other database
    merged = merge(tmp_path / "fleet-2.sqlite", [tmp_path / "pve-a.sqlite"])
    assert (merged.hosts, merged.sweeps) == (1, 3)
    assert {
        s.hostname for s in Store.open_existing(tmp_path / "fleet-2.sqlite").fleet_sweeps()
    } == {"pve"}
