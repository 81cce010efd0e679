"""Plans that would hurt the host are refused at load with one line; plans written naturally are
read as meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.backing.spec import HOST_ROOTS, SYSTEM_ROOTS, DirBacking
from iomatrix.errors import UserError
from iomatrix.plan.load import load_plan
from tests.conftest import run_cli


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "root", [*HOST_ROOTS, *SYSTEM_ROOTS, "/etc/iomatrix", "/usr/local", "/boot/x", "/run/x"]
)
def test_a_dir_backing_on_a_host_root_is_refused_at_load(tmp_path: Path, root: str) -> None:
    plan = write(
        tmp_path / "p.toml", f'tier = ["baremetal"]\n[[backing]]\ntype = "dir"\npath = "{root}"\n'
    )
    with pytest.raises(UserError, match=r"backing\[1\]\.path: path .* (host root|under /)") as err:
        load_plan(str(plan))
    assert "\n" not in str(err.value)


def test_a_directory_inside_a_host_root_is_accepted(tmp_path: Path) -> None:
    plan = write(
        tmp_path / "p.toml",
        f'tier = ["baremetal"]\n[[backing]]\ntype = "dir"\npath = "{tmp_path}"\n',
    )
    assert load_plan(str(plan))[0].backing[0] == DirBacking(type="dir", path=tmp_path)


def test_the_cli_refuses_path_slash_in_one_line(tmp_path: Path) -> None:
    write(tmp_path / "p.toml", 'tier = ["baremetal"]\n[[backing]]\ntype = "dir"\npath = "/"\n')
    for command in (("plan", "p.toml"), ("run", "p.toml", "--db", "r.sqlite", "--workdir", "w")):
        proc = run_cli(*command, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "path / is a host root" in lines[0]
        assert not (tmp_path / "w").exists() and not (tmp_path / "r.sqlite").exists()


@pytest.mark.parametrize(
    ("option", "ok"),
    [
        ("errors=panic", False),
        ("errors=remount-ro", True),
        ("errors=continue", True),
        ("errors=bogus", False),
    ],
)
def test_errors_panic_is_not_a_mount_option_a_benchmark_may_set(
    tmp_path: Path, option: str, ok: bool
) -> None:
    plan = write(
        tmp_path / "p.toml",
        'tier = ["baremetal"]\n[[backing]]\ntype = "loopfs"\nfs = "ext4"\n'
        f'size = "1G"\nmount_options = ["{option}"]\n',
    )
    if ok:
        assert load_plan(str(plan))[0].backing[0].mount_options == (option,)
        return
    with pytest.raises(
        UserError, match=rf"'{option}' is not allowed for ext4.*errors=continue, errors=remount-ro"
    ):
        load_plan(str(plan))


def test_a_relative_dir_path_is_relative_to_the_plan_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = write(
        tmp_path / "plans" / "p.toml",
        'tier = ["baremetal"]\n[[backing]]\ntype = "dir"\npath = "data"\n',
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    p, base = load_plan(str(plan))
    assert p.backing[0].path == tmp_path / "plans" / "data" and base == tmp_path / "plans"


def test_numeric_axis_values_may_be_written_as_numbers(tmp_path: Path) -> None:
    as_numbers = write(tmp_path / "n.toml", 'tier = ["baremetal"]\nqueues = [1, 2]\n')
    as_strings = write(tmp_path / "s.toml", 'tier = ["baremetal"]\nqueues = ["1", "2"]\n')
    numbers, strings = load_plan(str(as_numbers))[0], load_plan(str(as_strings))[0]
    assert numbers.axis_settings["queues"] == strings.axis_settings["queues"] == ["1", "2"]
    # A number that is not one of the axis's values is still refused, naming it.
    bad = write(tmp_path / "b.toml", 'tier = ["baremetal"]\nqueues = [3]\n')
    with pytest.raises(UserError, match=r"queues\.0: 3 is not valid"):
        load_plan(str(bad))
    boolean = write(tmp_path / "t.toml", 'tier = ["baremetal"]\nqueues = [true]\n')
    with pytest.raises(UserError, match="is not valid"):
        load_plan(str(boolean))


def test_the_space_check_counts_a_sparse_thin_image_by_what_is_written_not_its_virtual_size() -> (
    None
):
    """`modern`'s rand-read-4k-sparse-1t runs on a 1 TiB thin image written one block per 512 MiB:
    128 MiB of data clusters and 128 MiB of L2 tables land on the backing (at 64 KiB clusters).
    Counting its virtual size refused `run modern` on a host with 238 GiB free."""
    from iomatrix.backing.space import unit_bytes
    from iomatrix.runner import plan_expansion

    plan, _ = load_plan("modern")
    sparse = [
        u
        for u in plan_expansion(plan, None, set()).units
        if u.workload.name == "rand-read-4k-sparse-1t"
    ]
    assert sparse
    for unit in sparse:
        n, what = unit_bytes(plan, unit)
        assert (128 << 20) < n <= (512 << 20), (n, what)
        assert "1 TiB virtual" in what
