"""The rules a network protocol's own axes are built with (issue 34): an axis of one protocol only
(:func:`only_on`), a client axis whose kernel value needs the host's kernel client
(:func:`kernel_client_rule`). The protocols' modules build their axes with them, apart from the
axes no protocol owns (:mod:`iomatrix.domain.network_axes`), whose rules ask the protocols what they
allow. Generic: no protocol is named here."""

from __future__ import annotations

from collections.abc import Mapping

from iomatrix.domain.axis_model import KERNEL_CLIENT, Rule, RuleContext


def backing_protocol(ctx: RuleContext) -> str | None:
    """The protocol of the cell's backing; None for a local one or where no backing facts are known
    (a snippet)."""
    return ctx.backing.protocol if ctx.backing is not None else None


def only_on(protocol: str, axis: str, default: str) -> Rule:
    """An axis of one protocol's server or client: any other backing keeps its default (a local
    backing runs no server and no network client)."""

    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if ctx.backing is None or values[axis] == default:
            return None  # no backing facts (a snippet): the user's storage is whatever they say
        mine = backing_protocol(ctx)
        if mine != protocol:
            on = f"a {mine} backing" if mine else "a local backing"
            return f"{axis} applies to {protocol} backings only; {ctx.backing_label} is {on}"
        return None

    return Rule((axis,), check)


def kernel_client_rule(axis: str, kernel_value: str = KERNEL_CLIENT) -> Rule:
    """A client axis's kernel value where the host has no kernel client of the protocol (probed by
    iomatrix.storage_clients): pruned with the probe's reason."""

    def check(values: Mapping[str, str], ctx: RuleContext) -> str | None:
        if (
            values[axis] != kernel_value
            or ctx.backing is None
            or ctx.backing.kernel_client_missing is None
        ):
            return None
        missing = ctx.backing.kernel_client_missing
        return f"{axis}={kernel_value} needs the host's kernel client: {missing}"

    return Rule((axis,), check)
