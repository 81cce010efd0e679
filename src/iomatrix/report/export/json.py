"""JSON: every table as {title, columns, rows, notes}, rows with every field they carry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from iomatrix.report.export.table import DataTable


def dumps(obj: Any) -> str:
    """The JSON text of a document (also the recommendation's): indented, anything else as its
    str."""
    return json.dumps(obj, indent=2, default=str)


def export(tables: Sequence[DataTable]) -> str:
    return dumps([t.as_dict() for t in tables]) + "\n"
