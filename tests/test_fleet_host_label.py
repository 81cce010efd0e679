"""A fleet host's inventory name (IOMATRIX_HOST_LABEL, which the Ansible role sets) is stored with its sweep and
names the host in the fleet reports; two hosts that share a hostname stay two hosts through a merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.metadata import host_metadata
from iomatrix.store import Store
from iomatrix.store.merge import merge


def one_sweep(path: Path) -> None:
    """A database holding one finished sweep of this machine, recorded as `iomatrix run` records its host."""
    store = Store(path)
    sweep = store.create_sweep(store.host_id(host_metadata()), "quick", "fp-quick", '{"name": "quick"}', [], [])
    store.set_sweep_status(sweep, "finished")
    store.close()


def test_two_hosts_sharing_a_hostname_stay_two_named_by_their_inventory_names(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Both "hosts" are this machine: the same hostname, kernel, CPU, tool versions — only the label differs.
    for label in ("pve-gen10-01", "pve-gen10-02"):
        monkeypatch.setenv("IOMATRIX_HOST_LABEL", label)
        one_sweep(tmp_path / f"{label}.sqlite")
    merge(tmp_path / "fleet.sqlite", [tmp_path / "pve-gen10-01.sqlite", tmp_path / "pve-gen10-02.sqlite"])
    store = Store.open_existing(tmp_path / "fleet.sqlite")
    sweeps = store.fleet_sweeps()
    assert [s.hostname for s in sweeps] == ["pve-gen10-01", "pve-gen10-02"]
    assert len({s.host_id for s in sweeps}) == 2
    host = store.sweep(sweeps[0].id).host
    assert host["hostname"] == host_metadata()["hostname"] and host["host_label"] == "pve-gen10-01"
    assert "machine_id" in host  # recorded beside them (None where /etc/machine-id is missing)


def test_without_a_label_hosts_are_named_and_identified_as_before(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IOMATRIX_HOST_LABEL", raising=False)
    one_sweep(tmp_path / "a.sqlite")
    one_sweep(tmp_path / "b.sqlite")
    merge(tmp_path / "fleet.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    sweeps = Store.open_existing(tmp_path / "fleet.sqlite").fleet_sweeps()
    # The same machine twice, no label: one host (its identifying facts are equal), named by its hostname.
    assert len({s.host_id for s in sweeps}) == 1
    assert {s.hostname for s in sweeps} == {host_metadata()["hostname"]}
