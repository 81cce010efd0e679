"""One unit for every threshold on the command line (`--threshold`, `compare --fail-above`).

The rule (README, "Thresholds"): `5%` is five percent; a bare number is a fraction and must be below
1, so `0.05` is also five percent. A bare number of 1 or more (`5`) is refused with a one-line error
naming both spellings: read as a percent it would be 5 %, read as a fraction 500 %, and read the
other way round a bare `0.05` would silently mean 0.05 % — so no bare number is ever taken as a
percent."""

from __future__ import annotations

import math

from iomatrix.errors import UserError

RULE_HINT = "write a percentage with its sign (5%) or a fraction below 1 (0.05)"


def parse_fraction(value: str | float, option: str) -> float:
    """'5%' → 0.05, '0.05' → 0.05; a bare number ≥ 1, a negative or a non-number → UserError naming
    `option`."""
    if isinstance(value, int | float):  # a default declared in code is already a fraction
        text = repr(value)
        number, percent = float(value), False
    else:
        text = value.strip()
        percent = text.endswith("%")
        try:
            number = float(text[:-1].strip() if percent else text)
        except ValueError:
            raise UserError(f"{option} {value!r} is not a threshold", hint=RULE_HINT) from None
    if not math.isfinite(number) or number < 0:
        raise UserError(
            f"{option} {text} is out of range", hint="use a threshold ≥ 0: " + RULE_HINT
        )
    if percent:
        return number / 100.0
    if number >= 1:
        raise UserError(
            f"{option} {text} is ambiguous: {number:g}% or {number * 100:g}%?",
            hint=f"{RULE_HINT}; for {number:g} percent write {number:g}%",
        )
    return number


def parse_margin(value: str | float, option: str = "--margin") -> float:
    """A margin of practical equivalence: '5%' → 0.05, '0.05' → 0.05, above 0 and at most 0.5
    (iomatrix.roles: MAX_MARGIN); anything else (2, 60%, 0, a word) → UserError naming `option` and
    the rule. A bare 2 is refused, not read as 2%: the plan key and a role's `margin` are fractions,
    and one spelling per unit keeps them so."""
    from iomatrix.roles import MARGIN_RULE, check_margin

    text = repr(value) if isinstance(value, int | float) else value.strip()
    try:
        number = float(text[:-1].strip()) / 100.0 if text.endswith("%") else float(text)
        return check_margin(number if math.isfinite(number) else None)
    except ValueError:
        raise UserError(
            f"{option} {text}: {MARGIN_RULE}", hint="or a percentage with its sign, e.g. 5%"
        ) from None
