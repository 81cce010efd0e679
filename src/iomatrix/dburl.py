"""A database URL where a database path goes (`--db postgresql://…`), and its redaction.

The object stands where a `Path` stood in the commands: printing it in any message (`f"{db}"`,
`str`, `repr`) gives the URL without its password (nor a `password=` parameter), so that credentials
never reach output, logs or stored metadata; only `conninfo` holds the URL as given, and only the
driver reads it. Credentials are best kept out of the URL altogether: libpq reads PGPASSFILE
(~/.pgpass), a service file (PGSERVICEFILE, `?service=`) and PGPASSWORD by itself."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

SCHEMES = ("postgresql://", "postgres://")


def is_database_url(text: str) -> bool:
    return text.startswith(SCHEMES)


# Connection parameters whose value is a secret: the password, and the passphrase of a client key.
SECRET_KEYS = frozenset({"password", "sslpassword"})
SHOWN = "***"

_SCHEME = re.compile(r"[A-Za-z][\w+.-]*://")
# key=value conninfo (libpq's other syntax, as in its own messages): a quoted or a bare value
_KEYWORD = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)


def _without_credentials(rest: str) -> str:
    """`rest` (what follows 'scheme://') without the password, split as libpq splits a URL
    (conninfo_uri_parse_options): the credentials are everything before the first '@' met before
    any '/', so a password may hold '#', '?', ':' or '%', which a URL parser would stop at."""
    cut = re.search(r"[@/]", rest)
    if cut is None or cut.group() != "@":
        return rest
    credentials = rest[: cut.start()]
    if ":" not in credentials:
        return rest
    user = credentials.split(":", 1)[0]
    return (f"{user}@" if user else "") + rest[cut.end() :]


def _without_secret_params(url_rest: str) -> str:
    """The query of a URL with every secret parameter's value shown as ***. libpq splits the query
    at '&' only ('#' is part of a value) and percent-decodes each key: `pass%77ord=` is a
    password too."""
    q = url_rest.find("?")
    if q < 0:
        return url_rest
    params = []
    for param in url_rest[q + 1 :].split("&"):
        key, eq, _ = param.partition("=")
        secret = eq and unquote(key).strip().lower() in SECRET_KEYS
        params.append(f"{key}={SHOWN}" if secret else param)
    return url_rest[: q + 1] + "&".join(params)


def redact(conninfo: str) -> str:
    """A database URL without its secrets: postgresql://user:secret@h/db?password=x →
    postgresql://user@h/db?password=*** (the rest as given, character for character). The whole
    string is one URL, parsed as libpq parses it: 'postgresql://u:ab#cd?ef@h/x' shows
    'postgresql://u@h/x'. A string that is no URL has its key=value passwords hidden."""
    m = _SCHEME.match(conninfo)
    if m is None:
        return _KEYWORD.sub(lambda k: k.group(1) + SHOWN, conninfo)
    return m.group() + _without_secret_params(_without_credentials(conninfo[m.end() :]))


def redact_urls(text: str) -> str:
    """Free text (an error message, a traceback) with the secrets of every URL and key=value
    password in it hidden, and those of every URL this process was given wherever they stand. A
    URL's credentials are cut as libpq cuts them, across spaces if need be (libpq does not stop at
    one); its query ends at a space or a quote."""
    return hide_secrets("".join(_redact_line(line) for line in text.splitlines(keepends=True)))


def _redact_line(line: str) -> str:
    m = _SCHEME.search(line)
    if m is None:
        return _KEYWORD.sub(lambda k: k.group(1) + SHOWN, line)
    before = _KEYWORD.sub(lambda k: k.group(1) + SHOWN, line[: m.start()])
    rest = _without_credentials(line[m.end() :])
    end = re.search(r"[\s'\"]", rest)
    e = end.start() if end else len(rest)
    return before + m.group() + _without_secret_params(rest[:e]) + _redact_line(rest[e:])


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with every argument's URL secrets hidden (`--db URL` and `--db=URL`): the
    URL runs to the end of its argument, so it is parsed whole."""
    out = []
    for arg in argv:
        m = _SCHEME.search(arg)
        out.append(arg if m is None else arg[: m.start()] + redact(arg[m.start() :]))
    return out


def secrets_of(conninfo: str) -> set[str]:
    """The secrets of a URL as written and percent-decoded (libpq's split, as in `redact`): the
    password of its credentials and the values of its secret parameters."""
    m = _SCHEME.match(conninfo)
    if m is None:
        return {k.group(2).strip("'") for k in _KEYWORD.finditer(conninfo)} - {""}
    rest = conninfo[m.end() :]
    found: set[str] = set()
    cut = re.search(r"[@/]", rest)
    if cut is not None and cut.group() == "@" and ":" in rest[: cut.start()]:
        found.add(rest[: cut.start()].split(":", 1)[1])
    q = rest.find("?")
    if q >= 0:
        for param in rest[q + 1 :].split("&"):
            key, eq, value = param.partition("=")
            if eq and unquote(key).strip().lower() in SECRET_KEYS:
                found.add(value)
    return {v for s in found for v in (s, unquote(s)) if v}


# Secrets of every URL this process was given: libpq's own messages quote parts of a URL it cannot
# parse ('invalid percent-encoded token: "<the password>"'), so every error line hides them too
# (`hide_secrets`, cli._one_line and the crash log).
_SEEN_SECRETS: set[str] = set()


def hide_secrets(text: str) -> str:
    """`text` with every secret of a URL given to this process shown as ***, the longest first (a
    password holding another's text is hidden whole)."""
    for secret in sorted(_SEEN_SECRETS, key=len, reverse=True):
        text = text.replace(secret, SHOWN)
    return text


class DatabaseURL:
    """A PostgreSQL store's URL: prints redacted; `conninfo` is the URL as given (for the driver
    only)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        # (a secret of one or two characters is not searched for in free text: it would blank out
        # those letters everywhere; `redact` hides it in the URL itself)
        _SEEN_SECRETS.update(s for s in secrets_of(conninfo) if len(s) >= 3)

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
