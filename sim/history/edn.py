"""A small EDN reader and printer: enough of the format for Jepsen/Elle
histories (nil, booleans, numbers, strings, keywords, symbols, vectors, lists,
maps, sets, comments, `#_` discards and tagged literals).

Vectors and lists read as tuples and sets as frozensets, so any value can be a
map key; keywords are `Keyword` values, distinct from strings, because Jepsen
uses both (`:unknown-table` vs `"foo"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, final

from sim.history.model import HistoryError

__all__ = ["Keyword", "Symbol", "Tagged", "dumps", "kw", "loads_all"]


@final
@dataclass(frozen=True, slots=True)
class Keyword:
    name: str

    def __str__(self) -> str:
        return ":" + self.name


@final
@dataclass(frozen=True, slots=True)
class Symbol:
    name: str


@final
@dataclass(frozen=True, slots=True)
class Tagged:
    tag: str
    value: Any


def kw(name: str) -> Keyword:
    return Keyword(name)


_TOKEN: Final = re.compile(
    r"""
    (?P<ws>[\s,]+|;[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<open>\#\{|[\[({])
  | (?P<close>[\])}])
  | (?P<discard>\#_)
  | (?P<tag>\#[A-Za-z][^\s,\[\](){}"]*)
  | (?P<atom>[^\s,\[\](){}"]+)
    """,
    re.VERBOSE,
)
_INT: Final = re.compile(r"[+-]?\d+N?")
_FLOAT: Final = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_ESC: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CLOSE: Final = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_HEX4: Final = re.compile(r"[0-9A-Fa-f]{4}")
#: Integers longer than this are refused: no history value needs more than a
#: 64-bit integer's 19 digits, and Python's int-from-text limit is 4,300.
MAX_INT_DIGITS: Final = 100


def _unescape(s: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u":
                digits = s[i + 2 : i + 6]
                if not _HEX4.fullmatch(digits):
                    raise HistoryError(f"EDN line {line}: bad unicode escape \\u{digits}")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESC.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _atom(tok: str, line: int) -> Any:
    if tok == "nil":
        return None
    if tok == "true":
        return True
    if tok == "false":
        return False
    if tok.startswith(":"):
        if len(tok) == 1:
            raise HistoryError(f"EDN line {line}: empty keyword")
        return Keyword(tok[1:])
    if _INT.fullmatch(tok):
        digits = tok.rstrip("N").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            # Python refuses to convert such strings anyway (its int-str limit).
            raise HistoryError(f"EDN line {line}: an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
        return int(tok.rstrip("N"))
    if _FLOAT.fullmatch(tok):
        return float(tok.rstrip("M"))
    if tok.startswith("\\"):
        raise HistoryError(f"EDN line {line}: character literals are not supported ({tok})")
    return Symbol(tok)


def loads_all(text: str) -> list[Any]:
    """Every top-level form of `text`; `HistoryError` with the line on bad input."""
    tokens: list[tuple[str, str, int]] = []
    line = 1
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise HistoryError(f"EDN line {line}: cannot read {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        tok = m.group()
        if kind != "ws":
            tokens.append((kind, tok, line))
        line += tok.count("\n")
        pos = m.end()
    forms: list[Any] = []
    i = 0

    def parse(i: int) -> tuple[Any, int]:
        kind, tok, ln = tokens[i]
        if kind == "str":
            return _unescape(tok[1:-1], ln), i + 1
        if kind == "atom":
            return _atom(tok, ln), i + 1
        if kind == "close":
            raise HistoryError(f"EDN line {ln}: unexpected {tok!r}")
        if kind == "discard":
            _, j = parse_required(i + 1, ln)
            return _DISCARDED, j
        if kind == "tag":
            v, j = parse_required(i + 1, ln)
            return Tagged(tok[1:], v), j
        close = _CLOSE[tok]
        items: list[Any] = []
        j = i + 1
        while True:
            if j >= len(tokens):
                raise HistoryError(f"EDN line {ln}: {tok!r} is never closed")
            if tokens[j][0] == "close":
                if tokens[j][1] != close:
                    raise HistoryError(f"EDN line {tokens[j][2]}: {tokens[j][1]!r} closes {tok!r}")
                j += 1
                break
            v, j = parse(j)
            if v is not _DISCARDED:
                items.append(v)
        if tok == "{":
            if len(items) % 2:
                raise HistoryError(f"EDN line {ln}: a map needs an even number of forms")
            try:
                m = dict(zip(items[::2], items[1::2], strict=True))
            except TypeError as exc:
                raise HistoryError(f"EDN line {ln}: unhashable map key") from exc
            if len(m) != len(items) // 2:
                # Invalid EDN (the spec: "no duplicate keys"); a reader that
                # kept the last would silently drop part of an event.
                raise HistoryError(f"EDN line {ln}: a map with a duplicate key: {_first_duplicate(items[::2])}")
            return m, j
        if tok == "#{":
            try:
                fs = frozenset(items)
            except TypeError as exc:
                raise HistoryError(f"EDN line {ln}: unhashable set element") from exc
            if len(fs) != len(items):
                raise HistoryError(f"EDN line {ln}: a set with a duplicate element: {_first_duplicate(items)}")
            return fs, j
        return tuple(items), j

    def parse_required(i: int, ln: int) -> tuple[Any, int]:
        if i >= len(tokens):
            raise HistoryError(f"EDN line {ln}: a tag or #_ at the end of input")
        return parse(i)

    try:
        while i < len(tokens):
            v, i = parse(i)
            if v is not _DISCARDED:
                forms.append(v)
    except RecursionError as exc:
        raise HistoryError(f"EDN line {tokens[i][2]}: nested too deeply") from exc
    return forms


_DISCARDED: Final = object()


def _first_duplicate(items: list[Any]) -> str:
    """The first element equal to an earlier one, printed; Python equates
    `1`, `1.0` and `true`, which EDN does not, so such a pair is named as one
    this reader cannot hold apart (not a history's values anyway)."""
    seen: dict[Any, Any] = {}
    for x in items:
        if x in seen:
            y = seen[x]
            if type(x) is type(y):
                return dumps(x)[:40]
            return f"{dumps(y)[:20]} and {dumps(x)[:20]} are equal to this reader"
        seen[x] = x
    return "?"
_BARE: Final = re.compile(r"[A-Za-z*+!\-_?<>=/.][A-Za-z0-9*+!\-_?<>=/.:#]*")


def dumps(v: Any) -> str:
    """EDN text of `v`. Sets and maps print in a sorted order (by their
    printed form), so equal values always print the same."""
    if v is None:
        return "nil"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, Keyword):
        return ":" + v.name
    if isinstance(v, Symbol):
        return v.name
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        body = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{body}"'
    if isinstance(v, dict):
        return "{" + ", ".join(f"{dumps(k)} {dumps(x)}" for k, x in v.items()) + "}"
    if isinstance(v, frozenset | set):
        items = sorted(v, key=lambda x: (not isinstance(x, int), x if isinstance(x, int) else 0, dumps(x)))
        return "#{" + " ".join(dumps(x) for x in items) + "}"
    if isinstance(v, tuple | list):
        return "[" + " ".join(dumps(x) for x in v) + "]"
    if isinstance(v, Tagged):
        return f"#{v.tag} {dumps(v.value)}"
    raise TypeError(f"cannot print {type(v).__name__} as EDN")
