"""Which units race each other: the groups the answers are decided in (one per backing on shared
storage, one per emulated RTT), and the ceilings (null-co, a null iSCSI LUN) kept out of every
race."""

from __future__ import annotations

from iomatrix.domain import NA
from iomatrix.domain.axes import BackingFacts
from iomatrix.matrix import expand
from iomatrix.plan.model import Plan
from iomatrix.sweep.units import is_baseline, race_group
from iomatrix.workloads import resolve

ISCSI = BackingFacts(None, True, False, protocol="iscsi", lab_started=True)
NFS = BackingFacts(None, True, False, protocol="nfs", lab_started=True)


def _shared_storage_units() -> list:
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["baremetal", "blocklayer"],
            "format": ["raw"],
            "cache": ["none", "writeback"],
            "lun_type": ["null", "fileio"],
            "workloads": ["rand-write-4k"],
            "null_ceiling": True,
            "backing": [{"type": "iscsi"}, {"type": "nfs"}],
        }
    )
    return list(expand(plan, {"iscsi": ISCSI, "nfs": NFS}, [resolve("rand-write-4k", None)]).units)


def test_on_shared_storage_each_backing_races_apart_and_the_null_lun_not_at_all() -> None:
    units = _shared_storage_units()
    groups: dict[str, set[str]] = {}
    for u in units:
        if not is_baseline(u, compared=True):
            groups.setdefault(race_group(u, per_backing=True), set()).add(u.cell.backing)
    # The block layer's cells race per protocol: an NFS cell is never stopped against an iSCSI one.
    assert groups == {
        "blocklayer::rand-write-4k::iscsi::rtt=0::clients=1": {"iscsi"},
        "blocklayer::rand-write-4k::nfs::rtt=0::clients=1": {"nfs"},
    }
    racing = [u for u in units if not is_baseline(u, compared=True)]
    assert racing and all(dict(u.cell).get("lun_type", NA) != "null" for u in racing)
    # The ceilings and the server-side baseline are all there, held at their minimum runs.
    held = {
        (u.cell.tier, u.cell.backing, dict(u.cell).get("lun_type", NA))
        for u in units
        if is_baseline(u, True)
    }
    assert ("blocklayer", "iscsi", "null") in held and ("blocklayer", "null", NA) in held
    assert {t for t, _, _ in held} == {"baremetal", "blocklayer"}
    # Local backings (no network one in the plan): one race per workload within a tier, across
    # backings.
    assert {race_group(u) for u in racing} == {"blocklayer::rand-write-4k::rtt=0::clients=1"}


def test_an_emulated_rtt_is_a_condition_each_value_races_apart() -> None:
    plan = Plan.model_validate(
        {
            "name": "t",
            "tier": ["blocklayer"],
            "format": ["raw"],
            "cache": ["none"],
            "rtt": ["0", "2ms"],
            "workloads": ["rand-write-4k"],
            "backing": [{"type": "iscsi"}],
        }
    )
    units = [
        u
        for u in expand(plan, {"iscsi": ISCSI}, [resolve("rand-write-4k", None)]).units
        if not is_baseline(u, compared=True)
    ]
    assert {race_group(u, per_backing=True) for u in units} == {
        "blocklayer::rand-write-4k::iscsi::rtt=0::clients=1",
        "blocklayer::rand-write-4k::iscsi::rtt=2ms::clients=1",
    }
    # Bare metal races when it is all the sweep measures (nothing is compared against it); a ceiling
    # never does.
    bare = Plan.model_validate(
        {
            "name": "t",
            "tier": ["baremetal"],
            "cache": ["none", "writeback"],
            "workloads": ["rand-write-4k"],
            "backing": [{"type": "dir"}],
        }
    )
    ok = BackingFacts(None, True, False)
    assert not any(
        is_baseline(u, compared=False)
        for u in expand(bare, {"dir": ok}, [resolve("rand-write-4k", None)]).units
    )
