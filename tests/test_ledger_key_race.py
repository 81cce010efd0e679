"""The leftovers ledger's key is created once, whole, when several threads record paths at once (the
guest tier creates a boot's images from a thread pool): no thread may read it half-written."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from iomatrix.backing.leftovers import pending, register_temp_path


def test_threads_recording_into_a_fresh_workdir_share_one_whole_key(tmp_path: Path) -> None:
    for i in range(40):  # the race needs the key not to exist yet: a fresh workdir each time
        workdir = tmp_path / f"w{i}"
        workdir.mkdir()
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda j, w=workdir: register_temp_path(w, w / f"img{j}"), range(6)))
        assert len(pending(workdir)) == 6
        state = workdir / ".iomatrix"
        assert [p.name for p in state.iterdir() if p.name.startswith("ledger.key")] == [
            "ledger.key"
        ]
        assert (state / "ledger.key").stat().st_size == 32
