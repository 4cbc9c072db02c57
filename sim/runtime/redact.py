"""The one redaction core: every URL, DSN, config, log event, free text — and
every error a driver (asyncpg, the S3 client, a server) raises — that coordsim
prints, logs or stores passes through here first, so a password never leaves
the process.

Two layers. *Patterns* (`redact_url`, `redact_text`, `redact_mapping`,
`redact_env`) hide a URL's password and the value of every secret-named
parameter, and remember what they hid. *Known secrets* (`redact_error`, for a
driver's error): a driver that parses a URL otherwise than we do — a raw `@`,
`:`, `/`, `?`, `#`, `[` or `]` in a password — may echo a piece of it in its
message with no scheme or `password=` around it (`bad query field:
'Wv?Kx@host/db'`), which no pattern recognizes; so every piece of three or
more characters a parser may cut out of a remembered password (raw,
percent-decoded or percent-encoded) is hidden as well. That may hide a few
innocent letters of a driver's message too: the safe side.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote, unquote

__all__ = [
    "REDACTED",
    "forget_secrets",
    "is_secret_name",
    "redact_env",
    "redact_error",
    "redact_mapping",
    "redact_text",
    "redact_url",
    "remember_secret",
]

#: What a secret is replaced by.
REDACTED: Final = "***"
#: The shortest piece of a known secret `redact_error` hides.
MIN_FRAGMENT: Final = 3
#: How many secrets are remembered (the oldest are forgotten first); a
#: process handles a handful.
_KNOWN_MAX: Final = 256
#: Variables whose value is a URL or a password the drivers may be given.
_SECRET_ENV: Final = ("COORDSIM_POSTGRES_URL", "PGPASSWORD")

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
    user, colon, password = url[authority:at].partition(":")
    if not colon:
        return url
    if password != REDACTED:
        remember_secret(password)
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
            if qm.group()[1:-1] != REDACTED:
                remember_secret(qm.group()[1:-1])
            out.append(f"{s[done:start]}{s[start]}{REDACTED}{s[start]}")
            done = pos = qm.end()
        else:
            vm = (_VALUE_IN_TEXT if text else _VALUE_IN_URL).match(s, start)
            assert vm is not None  # the pattern matches the empty string
            if vm.group() != REDACTED:
                remember_secret(vm.group())
            out.append(f"{s[done:start]}{REDACTED}")
            done = pos = vm.end()
    out.append(s[done:])
    return "".join(out)


# --- known secrets ---------------------------------------------------------------------------
#
# A driver that parses a URL otherwise than we do splits a password at one of
# the URL's delimiters and echoes a piece: `invalid port 'Zq'`, `bad query
# field: 'Wv?Kx@host/db'`. Such a piece starts or ends where the password
# does or at one of its delimiters, so those are the pieces hidden: every
# substring of a known secret of `MIN_FRAGMENT` or more characters that starts
# or ends at such a cut. Any substring at all would hide far more innocent
# text (`unt` of a password `Hunter2` in every `RuntimeError`).

#: Where a URL parser may cut a password (and `%`, where a decoder may).
_CUTS: Final = frozenset("@:/?#[]%&=;, ")

#: The longest piece looked for (a longer secret's ends and cuts still are).
_MAX_PIECE: Final = 64

# Remembered secrets (oldest first: a dict as an ordered set); their pieces
# (longest first) and the trigrams of those (a quick test that a text may
# hold one), rebuilt when the secrets changed (None); guarded by `_LOCK` (a
# watcher thread may describe an error while the loop redacts a URL).
_KNOWN: dict[str, None] = {}
_INDEX: list[tuple[frozenset[str], tuple[str, ...]] | None] = [None]
_LOCK: Final = threading.Lock()
_ENV_SEEN: dict[str, str] = {}


def remember_secret(secret: str) -> None:
    """Makes `redact_error` hide `secret` and its pieces of `MIN_FRAGMENT` or
    more characters that a URL parser may cut out of it, in the forms a
    driver may echo: as given, percent-decoded and percent-encoded. Shorter
    secrets are hidden only by the patterns. Every secret the patterns hide
    is remembered so."""
    forms = {secret, unquote(secret), quote(unquote(secret), safe="")}
    with _LOCK:
        for form in forms:
            if len(form) >= MIN_FRAGMENT and form not in _KNOWN:
                _KNOWN[form] = None
                _INDEX[0] = None
        while len(_KNOWN) > _KNOWN_MAX:
            del _KNOWN[next(iter(_KNOWN))]


def forget_secrets() -> None:
    """Forgets every remembered secret (tests: each starts as a fresh process
    would, and a secret one test showed cannot hide text in another)."""
    with _LOCK:
        _KNOWN.clear()
        _INDEX[0] = None
        _ENV_SEEN.clear()


def _index() -> tuple[frozenset[str], tuple[str, ...]]:
    """The trigrams and the pieces (longest first) of every known secret."""
    with _LOCK:
        index = _INDEX[0]
        if index is None:
            pieces = {piece for known in _KNOWN for piece in _pieces(known)}
            grams = frozenset(p[i : i + MIN_FRAGMENT] for p in pieces for i in range(len(p) - MIN_FRAGMENT + 1))
            index = _INDEX[0] = (grams, tuple(sorted(pieces, key=lambda p: (-len(p), p))))
        return index


def _pieces(secret: str) -> set[str]:
    """The substrings of `secret` of `MIN_FRAGMENT` to `_MAX_PIECE` characters
    (and `secret` itself) that start or end at a cut: its ends, and either
    side of each delimiter."""
    cuts = {0, len(secret)}
    for i, ch in enumerate(secret):
        if ch in _CUTS:
            cuts.update((i, i + 1))
    out = {secret}
    for c in cuts:
        out.update(secret[c:j] for j in range(c + MIN_FRAGMENT, min(len(secret), c + _MAX_PIECE) + 1))
        out.update(secret[i:c] for i in range(max(0, c - _MAX_PIECE), c - MIN_FRAGMENT + 1))
    return out


def _remember_env() -> None:
    """Remembers the secrets of the variables the drivers may be handed
    (`$COORDSIM_POSTGRES_URL`'s password, `$PGPASSWORD`), once per value."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if not value or _ENV_SEEN.get(name) == value:
            continue
        _ENV_SEEN[name] = value
        if name == "PGPASSWORD":
            remember_secret(value)
        else:
            redact_url(value)  # remembers what it hides


def _scrub(text: str) -> str:
    """`text` with every piece of a known secret (`_pieces`) in it hidden."""
    if len(text) < MIN_FRAGMENT:
        return text
    grams, pieces = _index()
    if not any(text[i : i + MIN_FRAGMENT] in grams for i in range(len(text) - MIN_FRAGMENT + 1)):
        return text
    covered = bytearray(len(text))
    for piece in pieces:
        at = text.find(piece)
        while at >= 0:
            covered[at : at + len(piece)] = b"\x01" * len(piece)
            at = text.find(piece, at + 1)
    if not any(covered):
        return text
    out: list[str] = []
    for hidden, run in itertools.groupby(range(len(text)), key=covered.__getitem__):
        idx = list(run)
        out.append(REDACTED if hidden else text[idx[0] : idx[-1] + 1])
    return "".join(out)


def redact_error(error: BaseException | str) -> str:
    """What a driver's error (or any text an external component wrote, a
    traceback of one) becomes before it is printed, logged or stored: its
    secrets hidden by the patterns (`redact_text`), then every piece of a
    known secret (`remember_secret`). An exception becomes one line: its type, SQLSTATE
    if any, and message; text keeps its lines."""
    if isinstance(error, BaseException):
        sqlstate = getattr(error, "sqlstate", None)
        code = f" [SQLSTATE {sqlstate}]" if isinstance(sqlstate, str) else ""
        message = " ".join(str(error).split()) or "(no message)"
        text = f"{type(error).__name__}{code}: {message}"
    else:
        text = error
    _remember_env()
    return _scrub(redact_text(text))
