"""The option base of the commands that answer from a sweep (rank, recommend, report): which store
and sweep, what is optimised and required, how cells are ranked, whose snippet, which fleet group.

Each option is declared once here (its typer alias, with its help, from `iomatrix.commands.options`,
and its default), in the order every command's --help lists them. A command takes the ones it uses
with
:func:`answer_command` and reads them from one :class:`AnswerOptions` parameter; its own options (rank's
--metric, recommend's --detail, report's --html) stay its parameters. Before this base the same
block of a dozen parameters, defaults and the ranking call was written three times."""  # noqa: E501

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iomatrix.commands.options import (
    DEFAULT_DB,
    DEFAULT_MAX_NOISE,
    DEFAULT_MIN_RUNS,
    DEFAULT_TARGET,
    DEFAULT_THRESHOLD,
    DEFAULT_TIE_BREAK,
    AllowDataLossOpt,
    ByHostOpt,
    CurrentOpt,
    FleetGroupOpt,
    MaxNoiseOpt,
    MinRunsOpt,
    ObjectiveOpt,
    ReadDbOpt,
    RequireOpt,
    SweepOpt,
    TargetOpt,
    ThresholdOpt,
    TieBreakOpt,
    WorkloadOpt,
    ranking_arguments,
)


@dataclass(frozen=True)
class AnswerOptions:
    """The values of the base's options a command was given (the ones it does not take keep their
    defaults)."""

    db: Path = DEFAULT_DB
    sweep: int | None = None
    workload: str | None = None
    objective: str | None = None
    current: str | None = None
    require: list[str] = field(default_factory=list)
    min_runs: int = DEFAULT_MIN_RUNS
    max_noise: float = DEFAULT_MAX_NOISE
    threshold: float = DEFAULT_THRESHOLD
    tie_break: str = DEFAULT_TIE_BREAK
    target: str = DEFAULT_TARGET
    by_host: bool = False
    group: str | None = None
    allow_data_loss: bool = False

    def ranking(self) -> dict[str, Any]:
        """The ranking options, checked, as the rankings' keyword arguments
        (`ranking_arguments`)."""
        return ranking_arguments(self.min_runs, self.max_noise, self.threshold, self.tie_break)


# Each option of the base: its typer alias (spelling, help, parser) and its default, in --help's
# order.
OPTIONS: dict[str, tuple[Any, Any]] = {
    "db": (ReadDbOpt, DEFAULT_DB),
    "sweep": (SweepOpt, None),
    "workload": (WorkloadOpt, None),
    "objective": (ObjectiveOpt, None),
    "current": (CurrentOpt, None),
    "require": (RequireOpt, []),
    "min_runs": (MinRunsOpt, DEFAULT_MIN_RUNS),
    "max_noise": (MaxNoiseOpt, DEFAULT_MAX_NOISE),
    "threshold": (ThresholdOpt, DEFAULT_THRESHOLD),
    "tie_break": (TieBreakOpt, DEFAULT_TIE_BREAK),
    "target": (TargetOpt, DEFAULT_TARGET),
    "by_host": (ByHostOpt, False),
    "group": (FleetGroupOpt, None),
    "allow_data_loss": (AllowDataLossOpt, False),
}
# What every answering command takes: a sweep of a store, ranked; and what the commands answering
# "what should I use" add (what you run today, what the answer must guarantee, whose snippet it
# shows).
RANKING = ("db", "sweep", "objective", "min_runs", "max_noise", "threshold", "tie_break", "group")
ANSWERING = (*RANKING, "current", "require", "target", "allow_data_loss")
# The parameter of a command that receives the base's values.
PARAMETER = "opts"


def answer_command(names: Collection[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking the base's options `names`: typer sees them in place of its `opts:
    AnswerOptions` parameter (in the base's order, each with its help and default), and the command
    is called with them gathered in `opts`."""
    unknown = sorted(set(names) - set(OPTIONS))
    if unknown:
        raise ValueError(f"not options of the base: {', '.join(unknown)}")

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        # The command's own annotations, resolved where it is written (its module's aliases), as
        # typer reads them from the wrapper's signature.
        hints = typing.get_type_hints(command, include_extras=True)
        params: list[inspect.Parameter] = []
        for p in inspect.signature(command).parameters.values():
            if p.name == PARAMETER:
                params += [
                    inspect.Parameter(
                        n, inspect.Parameter.KEYWORD_ONLY, annotation=alias, default=default
                    )
                    for n, (alias, default) in OPTIONS.items()
                    if n in names
                ]
            else:
                params.append(
                    p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name])
                )

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            shared = {n: given.pop(n) for n in OPTIONS if n in given}
            return command(**given, **{PARAMETER: AnswerOptions(**shared)})

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate
