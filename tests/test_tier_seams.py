"""What tiers declare for themselves: plan settings kept identical in dumps and fingerprints, the
workloads a plan of theirs gets by default, the page-cache wording recorded per run, and the HTML
report's notes."""

from __future__ import annotations

import json

import pytest

from iomatrix import workloads as wl
from iomatrix.plan.load import plan_from_dict
from iomatrix.plan.model import Plan
from iomatrix.report.companions import companion
from iomatrix.tiers import page_cache_method, tier_classes

# Fingerprints the previous release (cuts and [consolidation] declared as plan-model fields) gave
# these plans: sweeps it left unfinished must resume.
EARLIER_FINGERPRINTS = [
    ({}, "edb9eed7f06ccf0b", "91f302cd9018e6be"),
    ({"cuts": 5}, "dd8a53e36710e50a", "3639a032bcbebc14"),
    ({"tier": ["consolidation"]}, "589d355d588880a8", "70a46c5642d2a3d9"),
    (
        {"tier": ["consolidation"], "consolidation": {"tiles": [1, 3]}},
        "ae499d6108449f01",
        "e8132e9ec096e500",
    ),
    ({"tier": ["durability"], "workloads": ["durability"]}, "de6b0be94e4fc13d", "52b32ece6fa1dd0d"),
]


@pytest.mark.parametrize(("extra", "fingerprint", "legacy"), EARLIER_FINGERPRINTS)
def test_tier_settings_keep_the_fingerprints(extra: dict, fingerprint: str, legacy: str) -> None:
    plan = plan_from_dict({"name": "x", **extra}, "test plan")
    assert (plan.fingerprint(), plan.legacy_fingerprints()) == (fingerprint, [legacy])
    # a resumed sweep re-reads its stored plan
    again = Plan.model_validate_json(plan.canonical_json())
    assert again.fingerprint() == fingerprint and again == plan


def test_tier_settings_are_top_level_keys_of_the_dump() -> None:
    dumped = json.loads(Plan(name="x").canonical_json())
    assert dumped["cuts"] == 20 and dumped["consolidation"] is None
    assert Plan(name="x", cuts=7).setting("cuts") == 7


def test_tier_settings_are_validated_like_plan_keys() -> None:
    with pytest.raises(Exception, match=r"cuts: must be ≥ 1 \(got 0\)"):
        plan_from_dict({"name": "x", "cuts": 0}, "p")
    with pytest.raises(Exception, match="did you mean 'cuts'"):
        plan_from_dict({"name": "x", "cutz": 3}, "p")
    with pytest.raises(
        Exception, match=r'a \[consolidation\] table needs tier = \["consolidation"\]'
    ):
        plan_from_dict({"name": "x", "consolidation": {}}, "p")


def test_a_durability_plan_without_workloads_runs_the_durability_workload() -> None:
    plan = plan_from_dict({"name": "d", "tier": ["durability"], "cuts": 4}, "p")
    assert plan.workloads == ["durability"] and (plan.repetitions.min, plan.repetitions.max) == (
        4,
        4,
    )
    named = plan_from_dict(
        {"name": "d", "tier": ["durability"], "workloads": ["durability-xfs"]}, "p"
    )
    assert named.workloads == ["durability-xfs"]
    assert plan_from_dict({"name": "b", "tier": ["baremetal", "guest"]}, "p").workloads == [
        "rand-read-4k",
        "rand-write-4k",
    ]


def test_page_cache_wording_per_tier() -> None:
    read = wl.PRESETS["rand-read-4k"]
    assert page_cache_method(read, tier="guest", cache="writeback", caches_dropped=True) == (
        "guest O_DIRECT; host page cache in use (cache=writeback: reads after the "
        "prefill may hit it, as in a real "
        "VM); host caches dropped before the run"
    )
    assert page_cache_method(read, tier="consolidation", cache="none", caches_dropped=False) == (
        "guest O_DIRECT; host O_DIRECT; host caches NOT dropped"
    )
    assert page_cache_method(read, tier="blocklayer", cache="-", caches_dropped=True) == (
        "no guest page cache (fio sends NBD requests to QEMU's block layer); host "
        "O_DIRECT; host caches dropped "
        "before the run"
    )
    assert page_cache_method(read, tier="baremetal", cache="writeback", caches_dropped=True) == (
        "buffered: fio invalidate=1 (POSIX_FADV_DONTNEED) before the job; host caches "
        "dropped before the run"
    )
    assert page_cache_method(read, tier="durability", cache="none", caches_dropped=True) == (
        "direct I/O (O_DIRECT); host caches dropped before the run"
    )


def test_missing_notes_come_from_the_tiers() -> None:
    def notes(cells: list[dict[str, str]]) -> list[str]:
        return [n for t in tier_classes() for n in companion(t.name).missing_notes(cells)]

    guest = {"tier": "guest", "backing": "dir"}
    assert notes([guest]) == [
        "no bare-metal cells: ratios to bare metal are missing (add tier 'baremetal' to the plan)",
        "no null-co ceiling: ratios to the ceiling are missing (null_ceiling = true)",
    ]
    assert (
        notes(
            [guest, {"tier": "baremetal", "backing": "dir"}, {"tier": "guest", "backing": "null"}]
        )
        == []
    )
    assert notes([]) == []
