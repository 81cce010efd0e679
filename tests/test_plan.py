from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.plan.load import builtin_names, load_plan


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return str(p)


def test_builtin_plans_load() -> None:
    assert {"quick", "full-matrix-fs", "block-size-sweep"} <= set(builtin_names())
    assert not {"hallyn", "salter"} & set(builtin_names())  # old names: hidden aliases
    for name in builtin_names():
        plan, base = load_plan(name)
        assert plan.name == name and base is None


def test_malformed_toml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\ncache = ["none",\ntier = 3\n')
    with pytest.raises(UserError) as e:
        load_plan(path)
    msg = e.value.one_line()
    assert "plan.toml" in msg and "line 3" in msg and "column" in msg and "\n" not in msg


def test_unknown_axis_value_lists_valid_values(tmp_path: Path) -> None:
    path = write(tmp_path, 'cache = ["none", "nocache"]\n')
    with pytest.raises(UserError) as e:
        load_plan(path)
    msg = e.value.one_line()
    assert "cache.1" in msg and "'nocache'" in msg
    for valid in ("none", "writeback", "writethrough", "directsync", "unsafe"):
        assert valid in msg


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown key 'caches'"):
        load_plan(write(tmp_path, 'caches = ["none"]\n'))


def test_repetitions_order_and_sizes(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="max"):
        load_plan(write(tmp_path, "[repetitions]\nmin = 5\nmax = 2\n"))
    with pytest.raises(UserError, match="size"):
        load_plan(write(tmp_path, 'size = "lots"\n'))
    with pytest.raises(UserError, match="duration"):
        load_plan(write(tmp_path, 'time_budget = "soon"\n'))


def test_duplicate_axis_value(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="twice"):
        load_plan(write(tmp_path, 'aio = ["threads", "threads"]\n'))


def test_missing_plan_and_unknown_builtin(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_plan(str(tmp_path / "nope.toml"))
    with pytest.raises(UserError, match="built-in plans"):
        load_plan("no-such-plan")


def test_fingerprint_is_stable_and_sensitive(tmp_path: Path) -> None:
    a, _ = load_plan(write(tmp_path, 'cache = ["none"]\n'))
    b, _ = load_plan(write(tmp_path, 'cache = ["none"]\n'))
    c, _ = load_plan(write(tmp_path, 'cache = ["writeback"]\n'))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    # A setting written out at its default is the same plan (and so is one a later release adds with
    # a default).
    d, _ = load_plan(write(tmp_path, 'cache = ["none"]\nretry_disturbed = true\n'))
    assert d.fingerprint() == a.fingerprint()


def test_retry_disturbed_is_a_boolean_plan_key(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('tier = ["baremetal"]\nretry_disturbed = false\n')
    assert load_plan(str(tmp_path / "p.toml"))[0].retry_disturbed is False
    (tmp_path / "q.toml").write_text('tier = ["baremetal"]\nretry_disturbed = "sometimes"\n')
    with pytest.raises(UserError, match="retry_disturbed"):
        load_plan(str(tmp_path / "q.toml"))


def test_precision_max_names_tiers_of_the_plan_and_exceeds_max(tmp_path: Path) -> None:
    plan, _ = load_plan(
        write(
            tmp_path,
            'tier = ["baremetal", "blocklayer"]\n[repetitions]\nmax = 6\n'
            "precision_max = { blocklayer = 20 }\n",
        )
    )
    assert plan.repetitions.precision_max == {"blocklayer": 20}
    assert load_plan("quick")[0].repetitions.precision_max == {"blocklayer": 30}
    for text, expected in (
        (
            'tier = ["baremetal"]\n[repetitions]\nprecision_max = { blocklayer = 20 }\n',
            "does not run",
        ),
        (
            'tier = ["blocklayer"]\n[repetitions]\nmax = 6\nprecision_max = { blocklayer = 6 }\n',
            "more than max",
        ),
        (
            'tier = ["blocklayer"]\n[repetitions]\nprecision_max = { blocklayer = "lots" }\n',
            "precision_max",
        ),
        (
            'tier = ["durability"]\ncuts = 3\n[repetitions]\nmin = 3\nmax = '
            "3\nprecision_max = { durability = 9 }\n",
            "cuts",
        ),
    ):
        with pytest.raises(UserError) as e:
            load_plan(write(tmp_path, text))
        msg = e.value.one_line()
        assert expected in msg and "\n" not in msg, msg
