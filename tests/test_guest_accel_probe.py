"""The accelerator probe: a real boot under KVM with a short timeout, falling back to TCG."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from iomatrix.guest.accel import choose_accel, kvm_accessible
from iomatrix.guest.artifacts import ensure_artifacts
from tests.conftest import needs

pytestmark = [pytest.mark.slow, needs("qemu-system-x86_64")]


def test_probe_decides_and_is_cached(tmp_path: Path) -> None:
    artifacts = ensure_artifacts()
    t0 = time.monotonic()
    first = choose_accel(artifacts, timeout=6.0, cache_dir=tmp_path, reprobe=True)
    took = time.monotonic() - t0
    assert first.accel in ("kvm", "tcg") and first.reason
    usable, why = kvm_accessible()
    if not usable:
        assert first.accel == "tcg" and why in first.reason
    elif first.accel == "tcg":
        # /dev/kvm is there but a guest did not come up: the probe gave up at its timeout, not later
        assert "probe" in first.reason.lower()
        assert took < 6.0 + 15.0, took
    # the verdict is cached: a second choice does not boot anything
    again = choose_accel(artifacts, timeout=6.0, cache_dir=tmp_path)
    assert again.accel == first.accel and "cached" in again.reason
    assert choose_accel(artifacts, force="tcg", cache_dir=tmp_path).accel == "tcg"
