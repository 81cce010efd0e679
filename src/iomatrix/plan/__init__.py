"""The plan: the single source of truth for what a sweep runs."""

from iomatrix.plan.load import load_plan
from iomatrix.plan.model import Plan

__all__ = ["Plan", "load_plan"]
