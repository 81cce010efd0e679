"""The metric registry: every metric a tier emits has a unit and a direction."""

from __future__ import annotations

import json

from iomatrix.fio.parse import job_metrics
from iomatrix.metrics import REGISTRY, higher_is_better, metric_info, registry_json
from iomatrix.tiers import listed_tier_workloads
from iomatrix.workloads import PRESETS


def test_every_metric_fio_parsing_emits_is_registered() -> None:
    side = {
        "total_ios": 10,
        "bw_bytes": 2e6,
        "iops": 500.0,
        "clat_ns": {"mean": 2000.0, "percentile": {"50.000000": 1, "99.000000": 2, "99.900000": 3}},
    }
    job = {
        "read": side,
        "write": side,
        "usr_cpu": 1.0,
        "sys_cpu": 2.0,
        "job_runtime": 1000,
        "sync": {"lat_ns": {"N": 5, "mean": 1000.0, "percentile": {"99.000000": 2000}}},
    }
    names = set(job_metrics(job))
    assert names and names <= set(REGISTRY), names - set(REGISTRY)


def test_every_preset_primary_metric_agrees_with_the_preset_direction() -> None:
    for w in [*PRESETS.values(), *listed_tier_workloads().values()]:  # a tier's own workloads too
        info = metric_info(w.primary_metric)
        assert info.known, w.primary_metric
        assert info.higher_is_better == w.higher_is_better, w.name


def test_directions() -> None:
    assert higher_is_better("write.iops") and not higher_is_better("sync.lat_p99_us")
    assert not higher_is_better("workload.seconds") and not higher_is_better(
        "phase.boot_to_workload_s"
    )


def test_unknown_metrics_follow_the_stated_rule() -> None:
    lat = metric_info("custom.lat_ms")
    assert not lat.known and not lat.higher_is_better and "registry" in lat.rule
    assert metric_info("custom.ops").higher_is_better
    assert not metric_info("fs.extract.seconds").higher_is_better


def test_registry_json_round_trips() -> None:
    doc = json.loads(registry_json())
    assert doc["metrics"]["write.iops"] == {
        "unit": "IOPS",
        "direction": "higher",
        "description": REGISTRY["write.iops"].description,
    }
    assert "unknown_rule" in doc
