"""Tiers issue I/O: bare metal (fio on the host), guest (fio inside QEMU), and whatever else is
declared.

The registry maps a tier's name to its declaration (:mod:`iomatrix.tiers.declaration`: layers,
order, plan settings, workload kind, prune rules, wording) and, lazily, to its implementation.
Declarations are found in the modules of ``iomatrix/tiers/declared/`` and in installed packages'
``iomatrix.tiers`` entry points; an implementation is imported only when :func:`tier_class` is asked
for it (a sweep runs the tier), so the plan model, the matrix and the fio builders read tiers
without importing QEMU or guest code. Nothing outside a tier's own modules names a tier: adding one
is a declaration module, its implementation and its report companion."""

from __future__ import annotations

# The registry lives in iomatrix.tiers.registry; its names are re-exported here, where callers
# have always found them.
from iomatrix.tiers.registry import (
    DECLARED_PACKAGE,
    ENTRY_POINT_GROUP,
    declaration,
    declarations,
    is_reference,
    known_tier,
    listed_tier_workloads,
    page_cache_method,
    reference_tier,
    register,
    registered,
    tier_class,
    tier_classes,
    tier_names,
    tier_order,
    tier_workload,
    workload_owner,
    workload_prune_reason,
)

__all__ = [
    "DECLARED_PACKAGE",
    "ENTRY_POINT_GROUP",
    "declaration",
    "declarations",
    "is_reference",
    "known_tier",
    "listed_tier_workloads",
    "page_cache_method",
    "reference_tier",
    "register",
    "registered",
    "tier_class",
    "tier_classes",
    "tier_names",
    "tier_order",
    "tier_workload",
    "workload_owner",
    "workload_prune_reason",
]
