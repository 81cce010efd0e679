"""The tiers read a plan through `iomatrix.domain.plan_view.PlanView` (they cannot import the plan
model, which imports the tier registry): a real `Plan` provides every attribute and method the view
names, with the types the view declares, so a tier written against the view works on the plan a
sweep hands it."""

from __future__ import annotations

import inspect
import typing

from iomatrix.domain.plan_view import BackingView, PlanView, RepetitionsView
from iomatrix.plan.load import plan_from_dict
from iomatrix.plan.model import Plan


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(
        typing.get_type_hints(protocol)
    )


def test_a_plan_provides_everything_the_view_names() -> None:
    plan = plan_from_dict(
        {"name": "p", "tier": ["durability"], "workloads": ["rand-read-4k"], "size": "32M"},
        "p.toml",
    )
    assert isinstance(plan, Plan)
    for view, obj in (
        (PlanView, plan),
        (RepetitionsView, plan.repetitions),
        (BackingView, plan.backing[0]),
    ):
        missing = sorted(n for n in _members(view) if not hasattr(obj, n))
        assert not missing, f"{type(obj).__name__} lacks {missing} of {view.__name__}"
    for name in ("axis_values", "setting", "set_setting"):
        declared = list(inspect.signature(getattr(PlanView, name)).parameters)[1:]
        assert list(inspect.signature(getattr(plan, name)).parameters) == declared, name
    assert isinstance(plan.tier, list) and isinstance(plan.null_ceiling, bool)
    assert isinstance(plan.repetitions.precision_max, dict) and isinstance(
        plan.model_fields_set, set
    )
    # the durability tier's own setting, through the view
    assert isinstance(plan.setting("cuts"), int)
