"""Parsing and redaction of the location URLs that choose backends.

Every URL that reaches a log line or an error message goes through
`redact_url` first, so a password never leaves the process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, final
from urllib.parse import parse_qsl, urlsplit

from persist.location import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ParsedUrl", "parse_url", "redact_text", "redact_url"]

_USERINFO = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*):[^@\s/]*@")


def redact_url(url: str) -> str:
    """`postgresql://u:secret@h/db` -> `postgresql://u:***@h/db`; other URLs unchanged."""
    return _USERINFO.sub(r"\g<head>:***@", url)


def redact_text(text: str) -> str:
    """Redacts every URL password inside free text (log lines, error messages)."""
    return _USERINFO.sub(r"\g<head>:***@", text)


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
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: {exc}") from exc
    if not parts.scheme:
        raise InvalidUsage(f"malformed URL {redact_url(url)!r}: no scheme (e.g. mem://, file:///path)")
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidUsage(f"parameter {name!r} given twice in {redact_url(url)}")
        params[name] = value
    return ParsedUrl(url, parts.scheme.lower(), parts.netloc, parts.path, params)
