"""--current from plain axes: ``cache=none,aio=threads,format=qcow2,bus=virtio-blk``."""

from __future__ import annotations

from iomatrix.domain import axes
from iomatrix.errors import UserError
from iomatrix.vmconfig.reading import FORMS, CurrentConfig, _bad, _value


def from_axes(text: str) -> CurrentConfig:
    """Any axis of the registry as key=value (tier and backing are not a disk's configuration)."""
    values: dict[str, str] = {}
    known = [a.name for a in axes.plan_axes()]
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k not in known:
            raise _bad("axis", part, f"{', '.join(known)} as key=value; or {FORMS}")
        value = _value(k, k, v)
        if values.get(k, value) != value:  # 'cache=none,…,cache=unsafe': which one is today's?
            raise UserError(
                f"--current: {k} is given twice ({values[k]} and {value})", hint=f"give {k}= once"
            )
        values[k] = value
    if "cache" not in values:
        raise UserError(
            "--current: the axes give no cache mode",
            hint=f"add cache=… ({axes.get('cache').choices()})",
        )
    return CurrentConfig(values, "axes given on the command line")
