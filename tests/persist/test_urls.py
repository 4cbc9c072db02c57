"""The one redaction core (`sim.runtime.urls`): a table of URLs and texts, a
property test over arbitrary passwords (quoted and raw), the mapping and
environment redactors, the log processor, and `?password=` accepted by every
`postgres://` opener (`PG_PASSTHROUGH`)."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import pytest
import structlog
from hypothesis import example, given
from hypothesis import strategies as st

from catalog.open import open_catalog
from oracle.open import OracleBackend, open_oracles, oracle_spec
from oracle.testing import fresh_timeline
from persist.open import open_consensus
from sim.runtime.core import Runtime
from sim.runtime.errors import Determinate, InvalidUsage
from sim.runtime.logs import configure_logging
from sim.runtime.urls import (
    PG_PASSTHROUGH,
    REDACTED,
    driver_url,
    is_secret_name,
    parse_url,
    redact_env,
    redact_mapping,
    redact_text,
    redact_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

# --- the table ------------------------------------------------------------------------

URL_CASES = [
    # The three cases users found.
    ("postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql://u@h/db?password=s3cret", "postgresql://u@h/db?password=***"),
    ("postgresql://u:ab@cd@host/db", "postgresql://u:***@host/db"),
    # Passwords holding the URL's own delimiters, raw or %-escaped.
    ("postgresql://u:p%40ss%3Aw%2Frd@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:a:b/c?d#e@f@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"),
    ("postgresql://u:p%25x@h/db", "postgresql://u:***@h/db"),
    # IPv6 hosts.
    ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    ("postgres://u:p@w@[2001:db8::7]/db?sslmode=verify-full", "postgres://u:***@[2001:db8::7]/db?sslmode=verify-full"),
    # No password, an empty one, no user.
    ("postgresql://coordsim@127.0.0.1:5432/postgres", "postgresql://coordsim@127.0.0.1:5432/postgres"),
    ("postgresql://u:@h/db", "postgresql://u:***@h/db"),
    ("postgresql://:only-pw@h/db", "postgresql://:***@h/db"),
    ("postgresql://h:5432/db", "postgresql://h:5432/db"),
    # Query-string secrets; a password in the userinfo and the query at once.
    ("postgresql://u@h/db?sslpassword=k3y&sslmode=require", "postgresql://u@h/db?sslpassword=***&sslmode=require"),
    ("postgresql://u:one@h/db?password=two&connect_timeout=3", "postgresql://u:***@h/db?password=***&connect_timeout=3"),
    ("postgresql://u@h/db?password=a%26b%3Dc", "postgresql://u@h/db?password=***"),
    ("postgresql://u@h/db?password=raw&amp;&sslmode=disable", "postgresql://u@h/db?password=***&sslmode=disable"),
    ("https://h/b?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc123&X-Amz-Security-Token=tok",
     "https://h/b?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=***&X-Amz-Security-Token=***"),
    ("https://api.example/x?token=t0k&client_secret=s3c&tokens=5", "https://api.example/x?token=***&client_secret=***&tokens=5"),
    # Nested URLs, each redacted on its own.
    ("s3://bucket/prefix?endpoint=http://AKIA:s3cret@minio:9000", "s3://bucket/prefix?endpoint=http://AKIA:***@minio:9000"),
    ("persist+postgres://u:pw@h/db?blob=s3://b/p&shard=x", "persist+postgres://u:***@h/db?blob=s3://b/p&shard=x"),
    ("s3://bucket/prefix?endpoint=http://127.0.0.1:9000", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000"),
    ("mem://", "mem://"),
    ("file:///tmp/x?fsync=false", "file:///tmp/x?fsync=false"),
    # Already redacted: unchanged.
    ("postgresql://u:***@h/db?password=***", "postgresql://u:***@h/db?password=***"),
]

TEXT_CASES = [
    # Several URLs in one message.
    ("cannot reach postgresql://u:a@b@h/db nor postgres://v:q@k/x: refused",
     "cannot reach postgresql://u:***@h/db nor postgres://v:***@k/x: refused"),
    ("malformed URL 'postgresql://u:pw@h/db?password=x'", "malformed URL 'postgresql://u:***@h/db?password=***"),
    ('{"url": "postgresql://u:pw@h/db", "n": 1}', '{"url": "postgresql://u:***@h/db", "n": 1}'),
    ("unknown parameter 'pool' in postgresql://u@[::1]/db?sslpassword=zz&pool=2",
     "unknown parameter 'pool' in postgresql://u@[::1]/db?sslpassword=***&pool=2"),
    # libpq keyword/value strings, environment lines, JSON and reprs.
    ("host=h port=5432 password='a b c' user=u", "host=h port=5432 password='***' user=u"),
    ("AWS_ACCESS_KEY_ID=AKIA AWS_SECRET_ACCESS_KEY=wJalr/K7 AWS_SESSION_TOKEN=FwoG",
     "AWS_ACCESS_KEY_ID=AKIA AWS_SECRET_ACCESS_KEY=*** AWS_SESSION_TOKEN=***"),
    ("export COORDSIM_POSTGRES_URL=postgresql://coordsim:pw@127.0.0.1:5/postgres",
     "export COORDSIM_POSTGRES_URL=postgresql://coordsim:***@127.0.0.1:5/postgres"),
    ('{"password": "x y", "user": "u"}', '{"password": "***", "user": "u"}'),
    ("{'sslpassword': 'k', 'sslkey': '/k.pem'}", "{'sslpassword': '***', 'sslkey': '/k.pem'}"),
    ('postgres_url = "postgresql://u:pw@h/db"\nseed = 1', 'postgres_url = "postgresql://u:***@h/db"\nseed = 1'),
    # Plain prose is left alone.
    ("password authentication failed for user \"coordsim\"", "password authentication failed for user \"coordsim\""),
    ("mail me at someone@example.org, see http://example.org/a:b", "mail me at someone@example.org, see http://example.org/a:b"),
]


@pytest.mark.parametrize(("url", "redacted"), URL_CASES)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted
    assert redact_url(redacted) == redacted  # idempotent
    # A URL alone in a text is redacted the same way.
    assert redact_text(f"at {url} (x)") == f"at {redacted} (x)"


@pytest.mark.parametrize(("text", "redacted"), TEXT_CASES)
def test_redact_text(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted
    assert redact_text(redacted) == redacted


def test_over_redaction_is_the_safe_side() -> None:
    """An '@' after the host may end a raw password: everything up to the last
    one is hidden (the host shown is then the wrong one, never the password)."""
    assert redact_url("postgresql://u:pw@h/db?application_name=a@b") == "postgresql://u:***@b"


# --- properties -----------------------------------------------------------------------

PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
NO_SPACE = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.sampled_from("é€日"), max_size=40
)
HOSTS = st.sampled_from(["db.example", "127.0.0.1", "[::1]", "[2001:db8::7]", "h"])


@given(password=PRINTABLE | ANY_TEXT, host=HOSTS)
@example(password="ab@cd", host="h")
@example(password="a:b/c?d#e@f%40", host="[::1]")
@example(password="", host="h")
def test_a_quoted_password_never_survives(password: str, host: str) -> None:
    quoted = quote(password, safe="")
    url = f"postgresql://coordsim:{quoted}@{host}:5432/app?sslmode=require"
    assert redact_url(url) == f"postgresql://coordsim:***@{host}:5432/app?sslmode=require"
    query = urlencode({"password": password, "sslpassword": password, "application_name": "x"})
    url = f"postgresql://coordsim@{host}:5432/app?{query}"
    expected = f"postgresql://coordsim@{host}:5432/app?password=***&sslpassword=***&application_name=x"
    assert redact_url(url) == expected
    assert redact_text(f"cannot reach {url}: boom") == f"cannot reach {expected}: boom"


@given(password=PRINTABLE, host=HOSTS)
@example(password="ab@cd", host="h")
@example(password="p@ss:w/rd?#&=x", host="[::1]")
@example(password="0/0@0", host="h")
def test_a_raw_password_never_survives(password: str, host: str) -> None:
    url = f"postgresql://coordsim:{password}@{host}:5432/app?sslmode=require"
    assert redact_url(url) == f"postgresql://coordsim:***@{host}:5432/app?sslmode=require"


@given(password=NO_SPACE, host=HOSTS)
def test_a_raw_password_in_text_never_survives(password: str, host: str) -> None:
    url = f"postgresql://coordsim:{password}@{host}:5432/app"
    assert redact_text(f"error: cannot reach {url} (refused)") == (
        f"error: cannot reach postgresql://coordsim:***@{host}:5432/app (refused)"
    )


# --- mappings, environment, names -------------------------------------------------------


def test_redact_mapping_and_env() -> None:
    cfg = {
        "postgres_url": "postgresql://u:pw@h/db",
        "seed": 1,
        "concurrency": [1, 2],
        "overrides": {"api_token": "t", "note": "AWS_SECRET_ACCESS_KEY=k", "urls": ("s3://b/p", "http://a:b@c")},
        "password": None,
    }
    assert redact_mapping(cfg) == {
        "postgres_url": "postgresql://u:***@h/db",
        "seed": 1,
        "concurrency": [1, 2],
        "overrides": {"api_token": REDACTED, "note": "AWS_SECRET_ACCESS_KEY=***", "urls": ("s3://b/p", "http://a:***@c")},
        "password": None,
    }
    env = {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "wJalr",
        "AWS_SESSION_TOKEN": "FwoG",
        "PGPASSWORD": "pw",
        "COORDSIM_POSTGRES_URL": "postgresql://u:pw@h/db",
        "PWD": "/home/u",
    }
    assert redact_env(env) == {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": REDACTED,
        "AWS_SESSION_TOKEN": REDACTED,
        "PGPASSWORD": REDACTED,
        "COORDSIM_POSTGRES_URL": "postgresql://u:***@h/db",
        "PWD": "/home/u",
    }


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True), ("sslpassword", True), ("PGPASSWORD", True), ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_SESSION_TOKEN", True), ("secretAccessKey", True), ("X-Amz-Signature", True), ("api_key", True),
        ("sig", True), ("AWS_ACCESS_KEY_ID", False), ("sslkey", False), ("tokens", False),
        ("application_name", False), ("PWD", False), ("user", False),
    ],
)
def test_is_secret_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


# --- logs -------------------------------------------------------------------------------


@pytest.fixture
def _restore_structlog() -> Iterator[None]:
    try:
        yield
    finally:
        structlog.reset_defaults()


@pytest.mark.usefixtures("_restore_structlog")
@pytest.mark.parametrize("as_json", [True, False])
def test_no_log_line_leaks(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    configure_logging(json=as_json)  # logs to sys.stderr, which capsys holds
    log = structlog.get_logger()
    log.info(
        "connecting to postgresql://u:pw1@h/db",
        url="postgresql://u:pw2@h/db?password=pw3",
        password="pw4",
        nested={"dsn": "postgres://v:pw5@k/x", "list": ["http://a:pw6@b"]},
        error=ValueError("postgresql://u:pw7@h/db"),
        n=3,
    )
    try:
        raise RuntimeError("cannot reach postgresql://u:pw8@h/db")
    except RuntimeError:
        log.exception("failed", sslpassword="pw9")
    out = capsys.readouterr().err
    for i in range(1, 10):
        assert f"pw{i}" not in out, out
    assert "postgresql://u:***@h/db" in out
    assert "RuntimeError" in out  # the traceback is still there
    if as_json:
        first = json.loads(out.splitlines()[0])
        assert first["n"] == 3
        assert first["password"] == REDACTED


# --- ?password= and the shared passthrough list -------------------------------------------


def test_the_driver_url_keeps_exactly_the_passthrough_parameters() -> None:
    url = "persist+postgres://u@h:5/db?password=a%26b&blob=file:///x&sslmode=require&shard=s&pool_size=2"
    dsn = driver_url(url)
    assert dsn == "postgresql://u@h:5/db?password=a%26b&sslmode=require"
    assert parse_url(dsn).params == {"password": "a&b", "sslmode": "require"}
    assert driver_url("postgres://h/db?application_name=x", drop=("application_name",)) == "postgresql://h/db"
    assert {"password", "sslpassword", "application_name", "connect_timeout", "sslmode"} <= PG_PASSTHROUGH


# Port 1 on the loopback refuses at once: the openers get past URL parsing and
# fail to connect (Determinate), which proves `?password=` was accepted.
_REFUSED = "postgresql://coordsim@127.0.0.1:1/db?password=Hunter2%40x&connect_timeout=5"


def _assert_connect_failure(exc: BaseException) -> None:
    assert isinstance(exc, Determinate), repr(exc)
    assert "unknown parameter" not in str(exc)
    assert "Hunter2" not in str(exc)
    assert "password=***" in str(exc)


@pytest.mark.asyncio
async def test_password_in_the_query_is_accepted_by_every_opener() -> None:
    rt = Runtime(seed=1)
    # Parsing alone (no connection) for the oracle URLs.
    for scheme in ("postgres", "postgresql", "memory+postgres"):
        url = _REFUSED.replace("postgresql", scheme, 1) + "&sslpassword=k&application_name=t&pool_size=2"
        assert oracle_spec(url).backend in (OracleBackend.POSTGRES, OracleBackend.MEMORY_POSTGRES)
    with pytest.raises(InvalidUsage, match=r"unknown parameter 'nope'") as info:
        oracle_spec(_REFUSED + "&nope=1")
    assert "Hunter2" not in str(info.value)

    with pytest.raises(Determinate) as persist_exc:
        await open_consensus(_REFUSED + "&pool_size=2&application_name=t")
    _assert_connect_failure(persist_exc.value)
    with pytest.raises(Determinate) as oracle_exc:
        await open_oracles(_REFUSED, rt)
    _assert_connect_failure(oracle_exc.value)
    with pytest.raises(Determinate) as catalog_exc:
        async with open_catalog(_REFUSED.replace("postgresql", "stash+postgres", 1), rt):
            pass
    _assert_connect_failure(catalog_exc.value)


def _password_in_query(url: str) -> str:
    """`url` with its userinfo password moved into `?password=`."""
    parts = urlsplit(url)
    assert parts.password, "the test server's URL carries a password"
    netloc = f"{parts.username}@{parts.hostname}:{parts.port}"
    query = "&".join(q for q in (parts.query, urlencode({"password": parts.password})) if q)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_a_correct_password_in_the_query_connects(pg_url: str) -> None:
    url = _password_in_query(pg_url)
    rt = Runtime(seed=2)
    async with await open_consensus(url + "&pool_size=1") as consensus:
        assert await consensus.head(f"test-urls-{uuid.uuid4().hex}") is None
    async with await open_oracles(url, rt) as oracles:
        oracle = await oracles.timeline(fresh_timeline("urls"))
        assert (await oracle.write_ts()).ts >= 0
    env = f"test-urls-{uuid.uuid4().hex[:12]}"
    async with open_catalog(url.replace("postgresql", "stash+postgres", 1) + f"&env={env}", rt) as catalog:
        assert catalog is not None
