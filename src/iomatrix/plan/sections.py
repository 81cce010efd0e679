"""Plan settings that tiers declare for themselves (``Tier.plan_settings``), validated and dumped
with the plan.

A tier's settings are written at the plan's top level like the plan model's own keys (the durability
tier's ``cuts = 20``, the consolidation tier's ``[consolidation]`` table), and they appear in the
plan's dumps (its stored definition, its fingerprint) exactly as fields of the plan model would. The
plan model cannot declare them as fields: the tiers import the plan model, so the model learns them
from the tier registry when a plan is first validated; this module gathers them into one pydantic
model, with the plan model's strictness."""

from __future__ import annotations

from functools import cache
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from iomatrix.tiers import tier_classes

_CORE_ERRORS = set(get_args(ErrorType))


@cache
def settings_model() -> type[BaseModel]:
    """One model holding every registered tier's plan settings, as fields (key → type, default)."""
    fields: dict[str, Any] = {}
    for tier in tier_classes():
        for key, (annotation, default) in tier.plan_settings.items():
            if key in fields:
                raise AssertionError(f"plan setting '{key}' is declared by two tiers")
            fields[key] = (annotation, default)
    return create_model(
        "TierSettings",
        __config__=ConfigDict(extra="forbid", strict=True),
        __module__=__name__,
        **fields,
    )


def __getattr__(name: str) -> Any:
    # The settings model is built on first use; its name resolves here too (pickle finds classes by
    # name).
    if name == "TierSettings":
        return settings_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def setting_keys() -> set[str]:
    return set(settings_model().model_fields)


def split(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the plan's own keys, the tiers' settings) of a plan as written."""
    keys = setting_keys()
    return {k: v for k, v in data.items() if k not in keys}, {
        k: v for k, v in data.items() if k in keys
    }


def error_details(err: ValidationError) -> list[InitErrorDetails]:
    """`err`'s errors, to raise again (merged with others) with
    ValidationError.from_exception_data."""
    out: list[InitErrorDetails] = []
    for e in err.errors(include_url=False):
        ctx = e.get("ctx")
        kind: Any = (
            e["type"]
            if e["type"] in _CORE_ERRORS
            else PydanticCustomError(e["type"], e["msg"], ctx)
        )
        detail: InitErrorDetails = {"type": kind, "loc": e["loc"], "input": e["input"]}
        if ctx is not None and isinstance(kind, str):
            detail["ctx"] = ctx
        out.append(detail)
    return out
