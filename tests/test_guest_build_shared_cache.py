"""Two guest builds on one cache (issue 69): `iomatrix guest build` twice at once on one empty
private cache, as `scripts/setup.sh` beside `scripts/test` do on ~/.cache/iomatrix. Before each
cache entry had its lock, one of them said the kernel "lacks ext4" and the other crashed with
"Directory not empty" (guest/cache.py staged_dir). Now the second waits for the first, says so, and
both end with the same build. Real parts: apt-get download of Debian's cloud kernel, dpkg-deb,
depmod, the guest tools' static compile, the initramfs. The static fio (a build of Debian's fio
source, most of the minute two builds took) is taken from the host's cache when it is there: it is
one more entry under the same entry_lock, and scripts/setup.sh builds it on every clean clone."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.guest.cache import default_cache_dir, entry_lock, staged_dir
from tests.conftest import iomatrix_argv


@pytest.mark.slow
def test_two_guest_builds_at_once_on_one_empty_cache_both_succeed(tmp_path: Path) -> None:
    # 40 columns, piped: every line whole all the same (a path split mid-name at the width was
    # what setup.sh's log showed, issue 70)
    env = os.environ | {"IOMATRIX_CACHE": str(tmp_path / "cache"), "COLUMNS": "40"}
    # The host's static fio, if built, copied in: the race is on the kernel, the tools and the
    # initramfs, not on a second compile of fio (without it, both build it as before).
    host_fio = default_cache_dir() / "fio-static"
    fio_static = tmp_path / "cache" / "guest" / "fio-static"
    fio_static.mkdir(parents=True)
    for f in host_fio.glob("fio_*") if host_fio.is_dir() else []:
        shutil.copy2(f, fio_static / f.name)
    procs = [
        subprocess.Popen(
            [*iomatrix_argv(), "guest", "build"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=1800) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}"
        assert "Traceback" not in out + err
    keys = [next(ln for ln in out.splitlines() if ln.startswith("cache_key:")) for out, _ in outs]
    for out, _ in outs:  # each file named on a line of its own, whole
        for name in ("kernel", "initramfs"):
            line = next(ln for ln in out.splitlines() if ln.startswith(f"{name}: /"))
            assert Path(line.split(": ", 1)[1]).is_file(), out
    assert keys[0] == keys[1]  # one build, used by both
    builds = list((tmp_path / "cache" / "guest" / "builds").iterdir())
    assert [b.name for b in builds if not b.name.startswith(".")] == [keys[0].split(": ")[1]]
    # the one that waited said so (at least one entry was being built by the other)
    assert any("waiting for process" in out for out, _ in outs), outs
    # no staging directory or file of either is left: each entry's directory holds its entries and
    # their lock files only
    guest = tmp_path / "cache" / "guest"
    left = [
        p
        for d in ("kernels", "builds", "fio-static", "tools")
        if (guest / d).is_dir()
        for p in (guest / d).iterdir()
        if p.name.startswith(".") and not p.name.endswith(".lock")
    ]
    assert left == [], left
    print("".join(out + err for out, err in outs))


def test_an_entry_lock_makes_the_second_builder_wait_and_say_so(tmp_path: Path) -> None:
    """The lock itself: a second holder waits (one line naming the first's pid) until the first
    lets go, then finds the entry the first published through staged_dir."""
    dest = tmp_path / "entry"
    lines: list[str] = []
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with entry_lock(dest, "the test entry"):
            held.set()
            with staged_dir(dest, ".t-") as tmp:
                (tmp / "done").write_text("1")
                time.sleep(1.5)
            order.append("first")

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    # flock locks belong to open files: a second open in this process waits as another process would
    with entry_lock(dest, "the test entry", lines.append):
        order.append("second")
        assert (dest / "done").read_text() == "1"
    t.join()
    assert order == ["first", "second"]
    assert lines == [f"waiting for process {os.getpid()}, which is building the test entry"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".entry.lock", "entry"]


def test_a_builder_that_waits_too_long_gets_one_line(tmp_path: Path) -> None:
    dest = tmp_path / "entry"
    with (
        entry_lock(dest, "the test entry"),
        pytest.raises(UserError) as err,
        entry_lock(dest, "the test entry", wait_s=1.0),
    ):
        pass
    assert err.value.one_line().startswith(
        f"the test entry is still being built by process {os.getpid()} after 1 s"
    )
