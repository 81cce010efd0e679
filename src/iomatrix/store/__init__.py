"""The results store: one SQLite file (see db.py), its schema and migrations (schema.py), and the
typed read API reports use (queries.py)."""

from iomatrix.store.db import RunRecord, Store
from iomatrix.store.queries import (
    FailedRun,
    MonitorPoint,
    RunListing,
    RunRow,
    Sample,
    SweepRow,
    UnitStop,
)
from iomatrix.store.schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "FailedRun",
    "MonitorPoint",
    "RunListing",
    "RunRecord",
    "RunRow",
    "Sample",
    "Store",
    "SweepRow",
    "UnitStop",
]
