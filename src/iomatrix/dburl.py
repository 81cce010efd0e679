"""A database URL where a database path goes (`--db postgresql://…`), and its redaction.

The object stands where a `Path` stood in the commands: printing it in any message (`f"{db}"`,
`str`, `repr`) gives the URL without its password (nor a `password=` parameter), so that credentials
never reach output, logs or stored metadata; only `conninfo` holds the URL as given, and only the
driver reads it. Credentials are best kept out of the URL altogether: libpq reads PGPASSFILE
(~/.pgpass), a service file (PGSERVICEFILE, `?service=`) and PGPASSWORD by itself."""

from __future__ import annotations

import re
from pathlib import Path

SCHEMES = ("postgresql://", "postgres://")


def is_database_url(text: str) -> bool:
    return text.startswith(SCHEMES)


def redact(conninfo: str) -> str:
    """The URL without its password: postgresql://user:secret@h/db?password=x →
    postgresql://user@h/db?password=*** (the rest as given, character for character)."""
    shown = re.sub(r"^([A-Za-z][\w+.-]*://[^:/@?#]*):[^@/?#]*@", r"\1@", conninfo)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", shown, flags=re.IGNORECASE)


class DatabaseURL:
    """A PostgreSQL store's URL: prints redacted; `conninfo` is the URL as given (for the driver
    only)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo

    def __str__(self) -> str:
        return redact(self.conninfo)

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatabaseURL) and other.conninfo == self.conninfo

    def __hash__(self) -> int:
        return hash(self.conninfo)

    def resolve(self) -> DatabaseURL:
        """Itself: commands compare two --db values by their resolved paths (compare.py), a URL by
        its text."""
        return self


def parse_db(value: str | Path) -> Path | DatabaseURL:
    """A --db value: a PostgreSQL URL, or the path of an SQLite file (typer's parser: `Path` would
    fold '//')."""
    if isinstance(value, (Path, DatabaseURL)):
        return value
    return DatabaseURL(value) if is_database_url(value) else Path(value)
