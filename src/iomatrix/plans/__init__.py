"""The built-in plans, one TOML file each (`iomatrix plan NAME`)."""

from __future__ import annotations

from importlib import resources


def builtin_names() -> list[str]:
    """The built-in plans' names. Here rather than in `iomatrix.plan.load`: an answer that names the
    plan to re-run (report/recommend) does not import the plan loader and its models for it."""
    return sorted(
        p.name.removesuffix(".toml")
        for p in resources.files("iomatrix.plans").iterdir()
        if p.name.endswith(".toml")
    )
