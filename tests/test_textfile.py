"""Plans and fio job files are read by one bounded, UTF-8-checking reader (iomatrix.textfile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.plan.load import MAX_PLAN_BYTES, load_plan
from iomatrix.workloads import load_custom


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'tier = ["baremetal"]\nname = "caf\xe9"\n', r"p\.toml:2: not UTF-8 text \(byte 0xe9\)"),
        (b'tier = ["baremetal"]\0\n', "is a binary file, not a plan"),
        (b"#" * (MAX_PLAN_BYTES + 1), "larger than 1024 KiB, not a plan"),
    ],
)
def test_a_plan_file_that_is_not_small_utf8_text_is_one_clear_error(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    (tmp_path / "p.toml").write_bytes(content)
    with pytest.raises(UserError, match=needle):
        load_plan(str(tmp_path / "p.toml"))


def test_plans_and_job_files_name_the_same_problems_the_same_way(tmp_path: Path) -> None:
    for name in ("p.toml", "j.fio"):
        (tmp_path / name).write_bytes(b"[x]\nrw=\xff\n")
    with pytest.raises(UserError, match=r"plan file .*p\.toml:2: not UTF-8 text"):
        load_plan(str(tmp_path / "p.toml"))
    with pytest.raises(
        UserError, match=r"custom workload 'file:j\.fio': .*j\.fio:2: not UTF-8 text"
    ):
        load_custom("file:j.fio", tmp_path)
    with pytest.raises(UserError, match="under /proc, a kernel interface, not a plan"):
        load_plan("/proc/self/status")
