"""Jain's fairness index: whether clients sharing one backend got equal shares of it.

For the throughputs x_1 … x_n of n clients that ran at the same time against one backend (R. Jain,
D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and Discrimination for Resource Allocation in
Shared Computer Systems", DEC-TR-301, 1984):

    J = (Σ x_i)² / (n · Σ x_i²)

J is 1 when every client got the same throughput and 1/n when one client got everything; more
generally, when k of the n clients share the backend equally and the others get nothing, J = k/n. It
is independent of scale (IOPS or MB/s give the same J) and of n's size, so a sweep's J at 2 and at 4
clients can be read side by side.

A single client is trivially fair (J = 1). Undefined (None) for no clients, or when no client did
any I/O (0/0); a negative throughput is damage, not a measurement (ValueError)."""

from __future__ import annotations

from collections.abc import Sequence


def jain_index(throughputs: Sequence[float]) -> float | None:
    """J = (Σx)² / (n·Σx²) of the clients' `throughputs` (see the module docstring)."""
    if any(x < 0 for x in throughputs):
        raise ValueError(f"a throughput is negative: {min(throughputs)}")
    n = len(throughputs)
    squares = sum(x * x for x in throughputs)
    if n == 0 or squares == 0:
        return None
    return sum(throughputs) ** 2 / (n * squares)
