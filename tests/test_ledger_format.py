"""The leftovers ledger's on-disk format, written by hand: a ledger an earlier iomatrix left must
still be read, verified and cleaned, with the same messages, and what iomatrix writes must stay in
that format.

Format (version 2): `<workdir>/.iomatrix/leftovers.json` = {"version": 2, "entries": [...]}, indent
    1; each
entry {id, kind, target, pid, pid_start, created, info, mac}; `mac` = HMAC-SHA256 with the 32-byte
`.iomatrix/ledger.key` over the JSON (sorted keys) of the other fields plus "workdir" (its real
path)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from iomatrix.backing import leftovers

KEY = bytes(range(32))


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _signed(workdir: Path, entry: dict[str, Any]) -> dict[str, Any]:
    payload = {**entry, "workdir": os.path.realpath(workdir)}
    mac = hmac.new(
        KEY, json.dumps(payload, sort_keys=True, default=str).encode(), hashlib.sha256
    ).hexdigest()
    return {**entry, "mac": mac}


def _entry(
    n: int, kind: str, target: str | Path, pid: int, pid_start: int | None = None, **info: Any
) -> dict[str, Any]:
    return {
        "id": f"{n:012x}",
        "kind": kind,
        "target": str(target),
        "pid": pid,
        "pid_start": pid_start,
        "created": 1700000000.5 + n,
        "info": info,
    }


def _ledger_text(entries: list[dict[str, Any]]) -> str:
    return json.dumps({"version": 2, "entries": entries}, indent=1) + "\n"


def _own_start() -> int:
    text = Path(f"/proc/{os.getpid()}/stat").read_text()
    return int(text[text.rfind(")") + 2 :].split()[19])


def test_an_old_ledger_is_cleaned_with_the_same_messages_and_what_remains_keeps_its_format(
    tmp_path: Path,
) -> None:
    wd = tmp_path / "wd"
    sdir = wd / ".iomatrix"
    sdir.mkdir(parents=True, mode=0o700)
    key = sdir / "ledger.key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    dead = _dead_pid()
    (wd / "img.qcow2").write_text("img")
    (wd / "disk.img").write_bytes(b"\0" * 4096)
    st = os.stat(wd / "disk.img")
    (wd / "mnt").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    entries = [
        _signed(wd, _entry(1, "path", wd / "img.qcow2", dead)),
        _signed(wd, _entry(2, "path", wd / "gone", dead)),
        _signed(
            wd,
            _entry(
                3, "loop", wd / "disk.img", dead, inode=[st.st_dev, st.st_ino], device="/dev/loop9"
            ),
        ),
        _signed(wd, _entry(4, "mount", wd / "mnt", dead, source="/dev/loop9", chain="ab12cd34")),
        _signed(wd, _entry(5, "lv", "vg0/root", dead)),
        _signed(
            wd, _entry(6, "ksm", "/sys/kernel/mm/transparent_hugepage/enabled", dead, previous="0")
        ),
        _signed(wd, _entry(7, "zfs", "tank/iomx-1-abcdef/../x", dead)),
        _signed(wd, _entry(8, "path", outside, dead)),
        _signed(wd, _entry(9, "path", wd / "live", os.getpid(), _own_start())),
        {**_entry(10, "path", wd / "unsigned", dead), "mac": ""},
    ]
    state = sdir / "leftovers.json"
    state.write_text(_ledger_text(entries))

    assert [e.id for e in leftovers.pending(wd)] == [e["id"] for e in entries]
    lines = leftovers.clean(wd)

    mnt = os.path.realpath(wd / "mnt")
    fix = f"not touched (check it, then remove it from {state} by hand)"
    assert lines == [
        f"refused: path {wd / 'unsigned'}: its signature does not verify with this "
        "workdir's ledger key (not "
        f"written by iomatrix for this workdir); {fix}",
        f"left alone: path {wd / 'live'} (pid {os.getpid()} is still running)",
        f"refused: path {outside}: {outside} is outside the working directory "
        f"{os.path.realpath(wd)}; {fix}",
        "refused: ZFS dataset tank/iomx-1-abcdef/../x: tank/iomx-1-abcdef/../x is not a "
        "name iomatrix gives "
        f"its volumes; {fix}",
        "refused: KSM setting changed at /sys/kernel/mm/transparent_hugepage/enabled: "
        "/sys/kernel/mm/transparent_hugepage/enabled with previous value '0' is not a "
        "KSM setting iomatrix "
        f"changes; {fix}",
        "refused: logical volume vg0/root: vg0/root is not a name iomatrix gives its "
        f"volumes; {fix}",
        f"removed mountpoint {mnt}",
        f"forgot loop device over {wd / 'disk.img'} (already gone)",
        f"forgot path {wd / 'gone'} (already gone)",
        f"deleted {wd / 'img.qcow2'}",
    ]
    assert not (wd / "img.qcow2").exists() and not (wd / "mnt").exists() and outside.is_dir()
    kept = [entries[i] for i in (4, 5, 6, 7, 8, 9)]
    assert state.read_text() == _ledger_text(kept)


def test_recorded_entries_are_written_in_the_format(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    entry_id = leftovers.record(
        wd, "mount", wd / "m", source="iomatrix-tmpfs-00ff", chain="c0ffee00"
    )
    leftovers.update(wd, entry_id, extra=[1, 2])
    key = wd / ".iomatrix" / "ledger.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    text = (wd / ".iomatrix" / "leftovers.json").read_text()
    data = json.loads(text)
    assert text == _ledger_text(data["entries"]) and data["version"] == 2
    (e,) = data["entries"]
    assert list(e) == ["id", "kind", "target", "pid", "pid_start", "created", "info", "mac"]
    assert (
        e["id"] == entry_id
        and e["kind"] == "mount"
        and e["target"] == str(wd / "m")
        and e["pid"] == os.getpid()
    )
    assert e["info"] == {"source": "iomatrix-tmpfs-00ff", "chain": "c0ffee00", "extra": [1, 2]}
    fields = {k: v for k, v in e.items() if k != "mac"}
    payload = {**fields, "workdir": os.path.realpath(wd)}
    want = hmac.new(
        key.read_bytes(), json.dumps(payload, sort_keys=True, default=str).encode(), hashlib.sha256
    ).hexdigest()
    assert e["mac"] == want
    leftovers.release(wd, entry_id)
    assert json.loads((wd / ".iomatrix" / "leftovers.json").read_text()) == {
        "version": 2,
        "entries": [],
    }
