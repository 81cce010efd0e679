"""With --current the answer changes what the user runs only on a decision (issue 71).

Before: on a quickstart whose database job could not tell raw · writeback from the user's qcow2 ·
cache=none (0.36–133× on the data job's p99), `recommend --current db01.xml` printed "No answer yet,
the tie-break's pick: raw · writeback", then a `qemu-img convert` of the user's data and a virt-xml
line switching cache=none to writeback. Now the same sweep says to keep what runs, and why; a sweep
slice where the change is decided still prints it (the control: the rule can say "change")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import DATA, run_cli

# A captured quickstart (bench/quickstart.py --keep; tests/test_role_margin.py says what it holds)
QUICKSTART = DATA / "quickstart-roles" / "sweep.sqlite"

DB01 = """<domain type='kvm'>
  <name>db01</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' io='threads'/>
      <source file='/var/lib/libvirt/images/db01.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
  </devices>
</domain>
"""


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    db = tmp_path / "q.sqlite"
    shutil.copy(QUICKSTART, db)
    vm = tmp_path / "db01.xml"
    vm.write_text(DB01)
    return db, vm


def test_an_undecided_change_keeps_what_runs(tmp_path: Path) -> None:
    db, vm = _setup(tmp_path)
    done = run_cli("recommend", "--db", str(db), "--current", str(vm), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Keep what you run: qcow2 · cache=none" in text, text
    assert "For a database VM: keep what you run, qcow2 · cache=none" in " ".join(text.split())
    # no data conversion, no cache change, no snippet of the candidate
    assert "qemu-img convert" not in text and "virt-xml" not in text, text
    assert "writeback" not in text.split("Keep what you run")[1].split("\n")[0], text
    assert "driver.cache" not in text and 'cache="writeback"' not in text, text
    # the reason names the job where it is not decided, with the interval reached
    assert "not decided better here (database:data 1.48–32×)" in " ".join(text.split()), text
    doc = json.loads(
        run_cli("recommend", "--db", str(db), "--current", str(vm), "--format", "json").stdout
    )
    picks = doc["headline"]["picks"]  # the settled workloads' and the unsettled one's
    assert picks and all(p["keep_current"]["candidate"] == "raw · writeback" for p in picks)
    assert all(p["snippet"] is None and "data_step" not in p for p in picks)


def test_a_decided_change_is_still_made(tmp_path: Path) -> None:
    """The file server's job alone: raw · writeback is 1.41× (1.12–1.76) the user's qcow2 ·
    cache=none, decided; the answer changes the cache mode."""
    db, vm = _setup(tmp_path)
    done = run_cli(
        "recommend", "--db", str(db), "--current", str(vm), "--workload", "file-server:files"
    )
    assert done.returncode == 0, done.stderr
    assert "Keep what you run" not in done.stdout, done.stdout
    assert "driver.cache=writeback" in done.stdout, done.stdout
