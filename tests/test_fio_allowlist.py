"""Custom fio job files: only workload-shape options pass, and what fio runs is what was checked."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix import workloads as wl
from iomatrix.errors import UserError
from iomatrix.fio.allowlist import ALLOWED, CELL_OPTIONS, validate_job_text
from iomatrix.fio.jobs import JobShape, baremetal_job
from iomatrix.fio.parse import extract_json, report_metrics
from tests.conftest import needs

# Each of these ran a command, touched a path outside the backing or wrote a log anywhere
# with the filter this allowlist replaces (issue #14).
HOSTILE = [
    ("exec_prerun=touch /tmp/pwned", "exec_prerun"),
    ("exec_postrun=rm -rf /", "exec_postrun"),
    ("opendir=/etc", "opendir"),
    ("unlink=1", "unlink"),
    ("write_iolog=/tmp/x.log", "write_iolog"),
    ("write_bw_log=/tmp/bw", "write_bw_log"),
    ("write_lat_log=/tmp/lat", "write_lat_log"),
    ("read_iolog=/tmp/trace", "read_iolog"),
    ("replay_redirect=/dev/loop7", "replay_redirect"),
    ("ioengine=external:/tmp/evil.so", "ioengine"),
    ("filename=/dev/sda", "filename"),
    ("directory=/", "directory"),
    ("cgroup=evil", "cgroup"),
    ("continue_on_error=all", "continue_on_error"),
    ("group_reporting", "group_reporting"),
    ("FILENAME=/dev/sda", "FILENAME"),
    ("verify_state_save=1", "verify_state_save"),
    ("trigger_cmd=reboot", "trigger_cmd"),
    ("pre_read=1", "pre_read"),
]


@pytest.mark.parametrize(("line", "option"), HOSTILE)
def test_options_outside_the_allowlist_are_refused_with_file_line_and_option(
    tmp_path: Path, line: str, option: str
) -> None:
    f = tmp_path / "job.fio"
    f.write_text(f"# a comment\n[job]\nrw=randwrite\n{line}\n")
    with pytest.raises(UserError) as err:
        wl.resolve("file:job.fio", tmp_path)
    msg = err.value.one_line()
    assert f"{f}:4:" in msg and f"'{option}'" in msg and "\n" not in msg
    assert ("set by iomatrix" in msg) == (option in CELL_OPTIONS)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("include /etc/evil.fio\n[job]\nrw=read\n", "'include'"),
        ("[job]\nrw=read\ninclude other.fio\n", "'include'"),
        ("[job-${HOME}]\nrw=read\n", "'$' expansion"),
        ("[job]\nbs=${BS}\n", "'$' expansion"),
        ("[job]\nrw=trim\n", "trims are not offered"),
        ("[job]\nnumjobs=100000\n", "1 to 64"),
        ("[job]\nbs=4k # inline\n", "bad value"),
        ("[prefill]\nrw=write\n", "reserved"),
        ("rw=read\n[job]\n", "before any [section]"),
        ("[global]\nrw=read\n", "no fio job section"),
        ("[job\nrw=read\n", "bad section header"),
        ("[job]\nrw=read\x07\n", "control character"),
    ],
)
def test_directives_expansions_and_bad_values_are_refused(
    tmp_path: Path, text: str, needle: str
) -> None:
    (tmp_path / "j.fio").write_text(text)
    with pytest.raises(UserError, match=None) as err:
        wl.resolve("file:j.fio", tmp_path)
    assert needle in err.value.one_line()


def test_kernel_files_binaries_and_non_utf8_are_refused_cleanly(tmp_path: Path) -> None:
    shutil.copyfile(shutil.which("ls") or "/bin/ls", tmp_path / "ls")
    (tmp_path / "leads-to-etc.fio").symlink_to("/etc/passwd")
    for spec, needle in [
        ("file:/proc/self/mem", "kernel interface"),
        ("file:/sys/kernel/notes", "kernel"),
        ("file:/dev/zero", "kernel interface"),
        ("file:ls", "binary"),
        (f"file:{shutil.which('ls')}", "outside the plan's directory"),
        ("file:../elsewhere.fio", "outside the plan's directory"),
        ("file:/etc/shadow", "under /etc"),
        ("file:leads-to-etc.fio", "leads to a file under /etc"),
        (f"file:{tmp_path}", "not a regular file"),
        ("file:", "no path given"),
        ("file:nope.fio", "no such fio job file"),
    ]:
        with pytest.raises(UserError, match=needle):
            wl.resolve(spec, tmp_path)
    (tmp_path / "latin1.fio").write_bytes(b"[job]\n# caf\xe9\nrw=read\n")
    with pytest.raises(UserError, match=r"latin1\.fio:2: not UTF-8"):
        wl.resolve("file:latin1.fio", tmp_path)
    (tmp_path / "huge.fio").write_text("[job]\n" + "# padding\n" * 10000)
    with pytest.raises(UserError, match="larger than"):
        wl.resolve("file:huge.fio", tmp_path)


def test_same_basename_in_two_directories_stays_two_workloads(tmp_path: Path) -> None:
    for d, rw in (("a", "randread"), ("b", "randwrite")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "job.fio").write_text(f"[job]\nrw={rw}\n")
    a, b = wl.resolve("file:a/job.fio", tmp_path), wl.resolve("file:b/job.fio", tmp_path)
    assert a.name == "file:a/job.fio" and b.name == "file:b/job.fio"
    assert a.reads and not a.writes and b.writes and not b.reads


def test_fio_is_given_the_checked_text_not_the_file(tmp_path: Path) -> None:
    f = tmp_path / "job.fio"
    f.write_text(
        "; comment\n[global]\n  bs = 16k  \n[job]\nrw=randrw:4\nrwmixread=70\nnorandommap\n"
    )
    w = wl.resolve("file:job.fio", tmp_path)
    assert w.custom_text == "[global]\nbs=16k\n\n[job]\nrw=randrw:4\nrwmixread=70\nnorandommap\n"
    f.write_text("[job]\nexec_prerun=touch /tmp/x\n")  # a later edit changes nothing for this load
    assert "exec" not in (w.custom_text or "")


@needs("fio")
def test_every_allowed_option_is_one_fio_knows() -> None:
    unknown = []
    for opt in sorted(ALLOWED):
        out = subprocess.run(
            ["fio", f"--cmdhelp={opt}"], capture_output=True, text=True, timeout=30
        )
        if "No such command" in out.stdout + out.stderr:
            unknown.append(opt)
    assert not unknown, unknown


@needs("fio")
def test_a_rich_allowed_job_runs_under_real_fio(tmp_path: Path) -> None:
    (tmp_path / "rich.fio").write_text(
        "[global]\nbs=4k\nnorandommap\nrandrepeat=0\nrandom_distribution=zipf:1.2\n"
        "time_based=1\nruntime=300ms\n"
        "description=OLTP-like mix (70/30)\nrefill_buffers\n"
        "[oltp]\nrw=randrw\nrwmixread=70\niodepth=4\nfdatasync=8\nthinktime=10\nrate_iops=2000\n"
        "[scan]\nstonewall\nrw=read\nbssplit=64k/50:1m/50\nnumjobs=2\nio_size=4m\n"
    )
    w = wl.resolve("file:rich.fio", tmp_path)
    job = baremetal_job(
        w,
        cache="writeback",
        aio="threads",
        target=str(tmp_path / "data.bin"),
        shape=JobShape(size_bytes=8 << 20, runtime_s=0.3),
        custom_text=w.custom_text,
    )
    (tmp_path / "job.fio").write_text(job)
    out = subprocess.run(
        ["fio", "--output-format=json", str(tmp_path / "job.fio")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = extract_json(out.stdout)
    assert sorted(j["jobname"] for j in report["jobs"]) == ["oltp", "scan", "scan"]
    assert all(j["error"] == 0 for j in report["jobs"])
    assert report_metrics(report)["total.iops"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "job.fio", "rich.fio"]


def test_validate_reports_directions() -> None:
    jf = validate_job_text("[a]\nrw=write\n[b]\nreadwrite=randread\n", "x.fio")
    assert jf.reads and jf.writes and jf.jobs == ("a", "b")
    assert json.dumps(jf.text)  # plain text


def test_workload_slugs_are_file_names_and_stay_distinct(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "job.fio").write_text("[job]\nrw=randread\n")
    slugs = {wl.resolve(f"file:{d}/job.fio", tmp_path).slug for d in ("a", "b")}
    assert len(slugs) == 2 and all("/" not in s and ":" not in s for s in slugs)
    assert wl.resolve("rand-read-4k").slug == "rand-read-4k"
