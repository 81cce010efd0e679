"""Bad input gets one line naming the problem and the fix, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


def assert_one_line_error(proc, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_malformed_plan(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('cache = ["none"\n')
    assert_one_line_error(run_cli("plan", str(p)), "bad.toml", "line", "column")


def test_unknown_axis_value(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('bus = ["scsi"]\n')
    assert_one_line_error(run_cli("plan", str(p)), "'scsi'", "virtio-scsi", "nvme")


def test_unknown_plan_name() -> None:
    assert_one_line_error(run_cli("plan", "nosuch"), "unknown plan", "quick")


def test_results_without_database(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("results", "--db", str(tmp_path / "none.sqlite")), "does not exist"
    )


@pytest.mark.parametrize("device", ["/dev/vda", "/dev/nonexistent-disk"])
def test_unallowed_or_missing_device_refused(tmp_path: Path, device: str) -> None:
    p = tmp_path / "dev.toml"
    p.write_text(f'tier = ["baremetal"]\n[[backing]]\ntype = "blockdev"\ndevice = "{device}"\n')
    proc = run_cli(
        "run",
        str(p),
        "--db",
        str(tmp_path / "r.sqlite"),
        "--workdir",
        str(tmp_path / "w"),
        "--allow-destroy",
        device,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert device in proc.stderr


def test_plan_explain_lists_cells_and_pruned() -> None:
    proc = run_cli("plan", "full-matrix-fs", "--explain")
    assert proc.returncode == 0, proc.stderr
    assert "aio=native needs O_DIRECT" in proc.stdout
    assert "estimated duration" in proc.stdout


def test_usage_errors_are_not_tracebacks() -> None:
    for args in ((), ("run", "--no-such-option"), ("results", "--format", "xml")):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.returncode)
        assert "Traceback" not in proc.stderr + proc.stdout, args


@pytest.mark.parametrize("command", [["rank"], ["recommend"], ["report", "--html", "out.html"]])
@pytest.mark.parametrize(
    "option,needle", [(["--min-runs", "1"], "--min-runs 1"), (["--max-noise", "0"], "--max-noise")]
)
def test_ranking_options_checked_by_every_ranking_command(
    tmp_path: Path, command: list[str], option: list[str], needle: str
) -> None:
    # The shipped schema-1 fixture is copied: report commands must refuse the option before reading
    # anything.
    import shutil

    db = tmp_path / "r.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "schema1" / "iomatrix-schema1.sqlite", db)
    proc = run_cli(*command, "--db", str(db), *option, cwd=tmp_path)
    assert_one_line_error(proc, needle)


def test_an_html_report_on_an_install_without_charts_says_so_in_one_line(
    tmp_path: Path, data_dir: Path
) -> None:
    """A measuring-only install (scripts/setup.sh --measure-only) has no matplotlib: `report --html`
    refuses in one line with the fix, before it writes anything. The interpreter is told matplotlib
    cannot be imported (the package is absent from such an install, not broken)."""
    import os
    import shutil
    import subprocess
    import sys

    db = tmp_path / "r.sqlite"
    shutil.copy(data_dir / "answers" / "unsafe-fastest.sqlite", db)
    code = "import sys; sys.modules['matplotlib'] = None; from iomatrix.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "report", "--html", str(tmp_path / "r.html"), "--db", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert_one_line_error(
        proc, "matplotlib", "--measure-only", "iomatrix recommend --format markdown|json"
    )
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    "body, needles",
    [
        (
            '[[backing]]\ntype = "directory"\npath = "/tmp"\n',
            ["'directory' is not valid", "did you mean 'dir'?"],
        ),
        ('cache = ["writebak"]\n', ["'writebak' is not valid", "did you mean 'writeback'?"]),
        ('tier = ["baremetl"]\n', ["'baremetl' is not valid", "did you mean 'baremetal'?"]),
        (
            '[[backing]]\ntype = "loopfs"\nsize = "1G"\nfs = "ext5"\n',
            ["'ext5' is not valid", "did you mean 'ext4'?"],
        ),
    ],
)
def test_a_mistyped_value_gets_the_closest_valid_one(
    tmp_path: Path, body: str, needles: list[str]
) -> None:
    """Did-you-mean for values as for keys (issue 49): a backing type, an axis value, a tier, a
    backing option."""
    p = tmp_path / "typo.toml"
    p.write_text('name = "typo"\n' + body)
    assert_one_line_error(run_cli("plan", str(p)), "typo.toml", *needles)


def test_a_value_close_to_none_gets_no_guess(tmp_path: Path) -> None:
    """'glusterfs' is a storage iomatrix does not speak, not a typo of one it does: no did-you-mean,
    only the valid values. (It was 'nbd' until NBD became a protocol of its own, issue 48.)"""
    p = tmp_path / "gluster.toml"
    p.write_text('name = "gluster"\n[[backing]]\ntype = "glusterfs"\n')
    proc = run_cli("plan", str(p))
    assert_one_line_error(proc, "'glusterfs' is not valid", "rbd")
    assert "did you mean" not in proc.stderr
