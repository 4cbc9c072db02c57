"""Parsing and redaction of the location URLs that choose backends.

Every URL, DSN, config or free text that is printed, logged or stored goes
through one redaction core (`redact_url`, `redact_text`, `redact_mapping`,
`redact_env`; `sim.runtime.logs` runs it over every log event), so a password never
leaves the process. The Postgres driver parameters every `postgres://` opener
passes through (`PG_PASSTHROUGH`) live here too, so the openers cannot drift.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "PG_PASSTHROUGH",
    "REDACTED",
    "ParsedUrl",
    "driver_url",
    "is_secret_name",
    "parse_url",
    "redact_env",
    "redact_mapping",
    "redact_text",
    "redact_url",
    "with_query_param",
]

#: What a secret is replaced by.
REDACTED: Final = "***"

#: libpq connection parameters a `postgres://` URL may carry, passed to the
#: driver untouched (asyncpg reads all of them from the query string; it sends
#: `application_name` as a startup setting, and the openers take
#: `connect_timeout` out as the client-side timeout).
PG_PASSTHROUGH: Final = frozenset(
    {
        "host",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslcrl",
        "sslpassword",
        "target_session_attrs",
        "connect_timeout",
        "application_name",
    }
)

# --- redaction ---------------------------------------------------------------------------
#
# Userinfo: the password is everything between the first ':' after `scheme://`
# and the LAST '@' of the URL (not the first: a raw password may hold '@', ':',
# '/', '?', '#'). The price of never leaking is over-redaction when a path or
# query holds an '@' as well (`?application_name=a@b` hides the host); that is
# rare, and the safe side. A URL nested in a query value (`?blob=s3://…`) is
# redacted on its own.
#
# Parameters: the value of a secret-named key (`password=`, `sslpassword=`,
# `AWS_SECRET_ACCESS_KEY=`, `"token": "…"`) runs to the next `&name=` (or, in
# free text, whitespace), so a raw '&' or '#' in it stays hidden too.

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
# A URL starts at a scheme not glued to a longer word.
_URL_START: Final = re.compile(rf"(?<![A-Za-z0-9+.\-]){_SCHEME}")
# Inside a URL, another one starts only where a value does (`?blob=s3://…`, a
# list): a raw password containing `x://` is not taken for one.
_NESTED_URL_START: Final = re.compile(rf"(?<=[=,;|(\[<{{'\"]){_SCHEME}")
_WHITESPACE: Final = re.compile(r"\s")

# `name=`, `name = `, `"name": `, `'name': `, `name: ` (a colon needs quotes or a space).
_KEY: Final = re.compile(r"""(?<![\w.\-])(?P<q>["']?)(?P<key>[A-Za-z_][\w.\-]*)(?P=q)(?P<sep>\s*[=:]\s*)""")
_NEXT_PARAM = r"&(?![A-Za-z_][\w.\-]*=)"
_VALUE_IN_URL: Final = re.compile(rf"(?:[^&]|{_NEXT_PARAM})*")
_VALUE_IN_TEXT: Final = re.compile(rf"(?:[^\s&]|{_NEXT_PARAM})*")
_QUOTED: Final = {
    q: re.compile(rf"{q}(?:[^{q}\\]|\\.)*{q}(?=[\s,;)\]}}&>]|$)") for q in ("'", '"')
}
# Cheap test that a string may hold a secret-named key at all.
_SECRET_HINT: Final = re.compile(r"(?i)pass|secret|token|sig|api.?key|private.?key")

_CAMEL: Final = re.compile(r"([a-z0-9])([A-Z])")
_NAME_PARTS: Final = re.compile(r"[_\-.\s]+")
_SECRET_PART: Final = re.compile(r"password|passwd|secret|token$|^(?:sig|signature|apikey|privatekey)$")
_SECRET_PAIRS: Final = frozenset({("api", "key"), ("private", "key")})


def is_secret_name(name: str) -> bool:
    """Whether a parameter, variable or field called `name` holds a secret.

    `password`, `sslpassword`, `PGPASSWORD`, `AWS_SECRET_ACCESS_KEY`,
    `AWS_SESSION_TOKEN`, `client_secret`, `X-Amz-Signature`, `sig`, `api_key`,
    `apiKey`, `private_key` are; `AWS_ACCESS_KEY_ID`, `sslkey` (a file name),
    `tokens` are not.
    """
    parts = [p for p in _NAME_PARTS.split(_CAMEL.sub(r"\1_\2", name).lower()) if p]
    if any(_SECRET_PART.search(p) for p in parts):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(parts))


def redact_url(url: str) -> str:
    """`url` with every password replaced by `***`, the rest unchanged.

    `postgresql://u:pw@h/db?sslmode=require&password=pw` ->
    `postgresql://u:***@h/db?sslmode=require&password=***`. The whole string is
    one URL (a raw password may even hold spaces); URLs nested in query values
    are redacted too. Idempotent.
    """
    return _redact(url, text=False)


def redact_text(text: str) -> str:
    """`text` (a log line, an error message, a traceback, TOML, JSON) with every
    password replaced by `***`: in each URL (which ends at whitespace), and in
    each secret-named `key=value` / `"key": "value"` pair (`password=`,
    `AWS_SECRET_ACCESS_KEY=`, …). Idempotent."""
    return _redact(text, text=True)


def redact_mapping(mapping: Mapping[str, object]) -> dict[str, object]:
    """A copy of `mapping` safe to print or store: the value of a secret-named key
    (`is_secret_name`) becomes `***`; every other string goes through
    `redact_text`; nested mappings, lists and tuples likewise. Other values are
    kept as they are."""
    return {k: _redact_value(k, v) for k, v in mapping.items()}


def redact_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables (`os.environ` by default) safe to print:
    `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `PGPASSWORD`… become `***`, and
    URLs in the others (`COORDSIM_POSTGRES_URL`) lose their passwords."""
    source = os.environ if env is None else env
    return {k: REDACTED if is_secret_name(k) else redact_text(v) for k, v in source.items()}


def _redact_value(key: object, value: object) -> object:
    if isinstance(key, str) and is_secret_name(key) and value is not None:
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redact_value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(None, v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(None, v) for v in value)
    return value


def _redact(s: str, *, text: bool) -> str:
    if "://" in s:
        s = _redact_userinfo(s, text=text)
    if _SECRET_HINT.search(s):
        s = _redact_params(s, text=text)
    return s


def _redact_userinfo(s: str, *, text: bool) -> str:
    out: list[str] = []
    done = 0
    while (m := _URL_START.search(s, done)) is not None:
        end = len(s)
        if text:
            ws = _WHITESPACE.search(s, m.end())
            end = ws.start() if ws is not None else len(s)
        out.append(s[done : m.start()])
        # The URL and the ones nested in it, each redacted on its own.
        start = m.start()
        for nested in _NESTED_URL_START.finditer(s, m.end(), end):
            out.append(_redact_one(s[start : nested.start()]))
            start = nested.start()
        out.append(_redact_one(s[start:end]))
        done = end
    out.append(s[done:])
    return "".join(out)


def _redact_one(url: str) -> str:
    """One `scheme://…` without nested URLs: the password of its userinfo hidden."""
    authority = url.index("://") + 3
    at = url.rfind("@", authority)
    if at < 0:
        return url
    user, colon, _password = url[authority:at].partition(":")
    if not colon:
        return url
    return f"{url[:authority]}{user}:{REDACTED}{url[at:]}"


def _redact_params(s: str, *, text: bool) -> str:
    out: list[str] = []
    done = 0
    pos = 0
    while (m := _KEY.search(s, pos)) is not None:
        pos = m.end()
        sep = m["sep"]
        if not is_secret_name(m["key"]) or (":" in sep and not m["q"] and not sep[-1].isspace()):
            continue
        if ":" in sep and m["key"].endswith(("Error", "Exception", "Warning")):
            continue  # `InvalidPasswordError: password authentication failed`: a message
        start = m.end()
        quoted = _QUOTED.get(s[start : start + 1]) if text else None
        qm = quoted.match(s, start) if quoted is not None else None
        if qm is not None:
            out.append(f"{s[done:start]}{s[start]}{REDACTED}{s[start]}")
            done = pos = qm.end()
        else:
            vm = (_VALUE_IN_TEXT if text else _VALUE_IN_URL).match(s, start)
            assert vm is not None  # the pattern matches the empty string
            out.append(f"{s[done:start]}{REDACTED}")
            done = pos = vm.end()
    out.append(s[done:])
    return "".join(out)


# --- parsing -----------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class ParsedUrl:
    """A location URL split into scheme, network location, path and parameters."""

    url: str
    scheme: str
    netloc: str
    path: str
    params: dict[str, str]

    def require_params(self, allowed: Iterable[str]) -> None:
        """Raises `InvalidUsage` naming the first parameter not in `allowed`."""
        allowed = set(allowed)
        for name in self.params:
            if name not in allowed:
                known = ", ".join(sorted(allowed)) or "none"
                raise InvalidUsage(
                    f"unknown parameter {name!r} in {redact_url(self.url)} (known: {known})"
                )


def parse_url(url: str) -> ParsedUrl:
    """Splits `url`; a repeated or malformed query parameter is `InvalidUsage`."""
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: {redact_text(str(exc))}") from exc
    if not parts.scheme:
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: no scheme (e.g. mem://, file:///path)")
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidUsage(f"parameter {name!r} given twice in {redact_url(url)}")
        params[name] = value
    return ParsedUrl(url, parts.scheme.lower(), parts.netloc, parts.path, params)


def driver_url(url: str, *, drop: Iterable[str] = ()) -> str:
    """`url` as a `postgresql://` DSN for the driver: same user, password, host
    and database, and only the `PG_PASSTHROUGH` parameters not in `drop`
    (coordsim's own parameters would be sent to the server as settings)."""
    keep = PG_PASSTHROUGH.difference(drop)
    parts = urlsplit(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in keep]
    return urlunsplit(parts._replace(scheme="postgresql", query=urlencode(kept)))


def with_query_param(url: str, name: str, value: str) -> str:
    """`url` with `name=value` appended to its query (e.g. an `application_name`
    that says whose connections these are)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), (name, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))
