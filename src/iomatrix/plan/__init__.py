"""The plan: the single source of truth for what a sweep runs.

`Plan` and `load_plan` are imported when first asked (`iomatrix.lazy_names`): a reader of
`iomatrix.plan.current_cell` or `iomatrix.plan.sections` does not load the plan model and loader
(pydantic models, every backing's spec)."""

from __future__ import annotations

from iomatrix.lazy_names import lazy_names

_WHERE = {"load_plan": "load", "Plan": "model"}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
