"""A password in a database URL never reaches the terminal, a crash log or JSON (issue 69): the URL
is cut as libpq cuts it, so a password holding '#', '?', ':', '/' or a percent-escape is hidden
whole. libpq itself (psycopg's conninfo_to_dict) is the judge of what the password is."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from iomatrix.dburl import redact, redact_argv, redact_urls
from tests.test_bad_input_campaign import run_cli

psycopg = pytest.importorskip("psycopg")
from psycopg.conninfo import conninfo_to_dict  # noqa: E402

# Passwords as a user may write them into a URL (libpq takes each of these as the password).
PASSWORDS = [
    "s3cret",
    "ab#cd?ef",
    "with:colon",
    "q?x=1&password",
    "per%25cent",
    "hash#only",
    "semi;colon",
    "dollar$sign",
    "tilde~and.dot",
    "quote'in",
]


def urls(password: str, port: int = 5432) -> list[str]:
    return [
        f"postgresql://lab:{password}@127.0.0.1:{port}/iomatrix",
        f"postgres://lab:{password}@db.example/iomatrix?sslmode=require",
        f"postgresql://:{password}@[::1]:{port}/x",
        f"postgresql://lab@127.0.0.1:{port}/x?password={password}",
        f"postgresql://lab@127.0.0.1:{port}/x?sslmode=disable&pass%77ord={password}",
        f"postgresql://lab@127.0.0.1:{port}/x?sslpassword={password}&application_name=a",
    ]


def libpq_reads(url: str) -> bool:
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # e.g. a second '=' in a query value: libpq refuses the URL
        return False
    return True


CASES = [u for p in PASSWORDS for u in urls(p) if libpq_reads(u)]


def secrets_of(url: str) -> list[str]:
    """What libpq reads as the URL's secrets (percent-decoded)."""
    parsed = conninfo_to_dict(url)
    found = [v for k, v in parsed.items() if k in ("password", "sslpassword") and v]
    assert found, f"libpq reads no password in {url}"
    return found


def test_the_cases_cover_every_password_in_the_credentials_and_the_query() -> None:
    assert len(CASES) >= 50 and all(any(p in u for u in CASES) for p in PASSWORDS)


@pytest.mark.parametrize("url", CASES)
def test_a_url_prints_without_what_libpq_reads_as_its_password(url: str) -> None:
    for secret in secrets_of(url):
        for shown in (
            redact(url),
            redact_urls(f"error: cannot reach {url} — check it"),
            redact_urls(repr(["iomatrix", "results", "--db", url])),
            repr(redact_argv(["iomatrix", "results", f"--db={url}"])),
        ):
            assert secret not in shown, (url, shown)
    assert "127.0.0.1" in redact(url) or "db.example" in redact(url) or "::1" in redact(url)


def test_keyword_passwords_and_plain_text_are_kept_apart() -> None:
    assert redact_urls("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert redact_urls("no secrets here: path/to/x") == "no secrets here: path/to/x"
    assert redact("postgresql:///iomatrix?host=/run/postgresql") == (
        "postgresql:///iomatrix?host=/run/postgresql"
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


@pytest.mark.parametrize("command", ["results", "rank", "recommend", "history"])
def test_a_command_given_a_password_url_never_prints_it(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A URL with a password that ends up nowhere: the connection is refused, the error line names
    # the store without its password, and no crash log is written (argv would hold it).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "5")
    url = f"postgresql://u:ab#cd?ef@127.0.0.1:{closed_port()}/x"
    code, out, err = run_cli([command, "--db", url])
    assert code == 2, (out, err)
    assert "ab#cd" not in out + err and "cd?ef" not in out + err, err
    assert "127.0.0.1" in err and err.startswith("error:"), err
    assert not (tmp_path / "cache" / "iomatrix" / "logs").exists()
