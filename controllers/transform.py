"""Rows, their stable encoding, and the small transforms dataflows and peeks apply.

A table row is a tuple of JSON scalars stored as a persist *key* (value `b""`)
in canonical JSON, so equal rows are equal bytes in every backend and every
Python, and consolidation by key is consolidation by row. A `Transform` is the
subset of SQL that scenario scripts use (`SELECT * | cols | count(*) FROM src
[WHERE col op literal AND …]`): materialized views and peeks carry one; its
SQL text (`to_sql`/`parse_select`) is what the catalog stores as a view's
`definition`, so deriving commands from the catalog needs nothing else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias, final

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "OPS",
    "Comparison",
    "CompiledTransform",
    "CompiledTransforms",
    "Row",
    "Scalar",
    "Transform",
    "decode_row",
    "encode_row",
    "parse_select",
    "sql_literal",
]

#: A SQL scalar as coordsim stores it (NULL is None); JSON keeps bool and int apart.
Scalar: TypeAlias = int | str | bool | None
Row: TypeAlias = tuple[Scalar, ...]

#: The comparison operators of the SQL subset.
OPS: Final = ("=", "<>", "<", "<=", ">", ">=")


#: Rows' JSON, made once (`json.dumps` with options builds an encoder per call).
_ROW_JSON: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def encode_row(row: Sequence[Scalar]) -> bytes:
    """The canonical bytes of `row`: a JSON array, no spaces, ASCII only."""
    if all(type(v) is int for v in row):
        # The rows of the standard workloads; JSON writes an int as `str` does
        # (bools are not ints by `type`). A sixth of `json.dumps`'s cost, and
        # every write and peek of a table encodes its rows (issue 20).
        return ("[" + ",".join(map(str, row)) + "]").encode()
    for v in row:
        if not (v is None or isinstance(v, (int, str))):  # bool is an int
            raise InvalidUsage(f"row values are int, text, bool or NULL, got {v!r}")
    return _ROW_JSON.encode(list(row)).encode()


def decode_row(data: bytes) -> Row:
    value = json.loads(data)
    if not isinstance(value, list):
        raise InvalidUsage(f"a row is a JSON array, got {data!r}")
    return tuple(value)


def _always(row: Row) -> bool:
    return True


def _compare(left: Scalar, op: str, right: Scalar) -> bool:
    # SQL: NULL compares false; so does a comparison across types (the front end
    # type-checks, so this only guards against a caller's bug producing an answer).
    if left is None or right is None or isinstance(left, bool) != isinstance(right, bool):
        return False
    if isinstance(left, str) != isinstance(right, str):
        return False
    if op == "=":
        return left == right
    if op == "<>":
        return left != right
    if op == "<":
        return left < right  # type: ignore[operator]
    if op == "<=":
        return left <= right  # type: ignore[operator]
    if op == ">":
        return left > right  # type: ignore[operator]
    return left >= right  # type: ignore[operator]


@final
@dataclass(frozen=True, slots=True)
class Comparison:
    """`column op value`; NULL compares false, as in SQL."""

    column: str
    op: str
    value: Scalar

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidUsage(f"unknown comparison operator {self.op!r}; expected one of {OPS}")


@final
@dataclass(frozen=True, slots=True)
class CompiledTransform:
    """A `Transform` bound to its input's columns (positions resolved once)."""

    keep: Callable[[Row], bool]
    project: Callable[[Row], Row]
    count: bool
    columns: tuple[str, ...]
    #: `project` returns its input: an output row's encoding is its input's key.
    identity: bool = False


@final
@dataclass(frozen=True, slots=True)
class Transform:
    """Filter (a conjunction), then project, then optionally `count(*)`.

    The identity is `Transform()`. `count(*)` always yields exactly one row, also
    over an empty input (SQL's global aggregate), so a peek or view on it is never
    empty.
    """

    predicate: tuple[Comparison, ...] = ()
    project: tuple[str, ...] | None = None
    count: bool = False

    def __post_init__(self) -> None:
        if self.count and self.project is not None:
            raise InvalidUsage("a transform either counts or projects, not both")

    @property
    def is_identity(self) -> bool:
        return not self.predicate and self.project is None and not self.count

    def compile(self, columns: Sequence[str]) -> CompiledTransform:
        """Resolves column names against `columns`; an unknown one is `InvalidUsage`."""
        pos = {name: i for i, name in enumerate(columns)}

        def index(name: str) -> int:
            if name not in pos:
                raise InvalidUsage(f"unknown column {name!r}; columns are {list(columns)}")
            return pos[name]

        terms = [(index(c.column), c.op, c.value) for c in self.predicate]
        keep: Callable[[Row], bool]
        if not terms:
            keep = _always
        elif len(terms) == 1 and terms[0][1] == "=" and type(terms[0][2]) is int:
            # A point peek's filter, `a = 1`: `_compare`'s answer for an integer
            # (not a bool) compared for equality, without its checks per row.
            [(at, _, wanted)] = terms

            def keep(row: Row) -> bool:
                v = row[at]
                return type(v) is int and v == wanted

        elif len(terms) == 1:  # no generator per row
            [(at, op, value)] = terms

            def keep(row: Row) -> bool:
                return _compare(row[at], op, value)

        else:

            def keep(row: Row) -> bool:
                return all(_compare(row[i], op, v) for i, op, v in terms)

        if self.count:
            out: tuple[str, ...] = ("count",)
            project: Callable[[Row], Row] = _same
        elif self.project is None:
            out, project = tuple(columns), _same
        else:
            idx = [index(c) for c in self.project]
            out = tuple(self.project)

            def project(row: Row) -> Row:
                return tuple(row[i] for i in idx)

        return CompiledTransform(keep, project, self.count, out, identity=project is _same)

    def output_columns(self, columns: Sequence[str]) -> tuple[str, ...]:
        """`compile(columns).columns` without compiling (planning asks on
        every peek); the same `InvalidUsage` for an unknown column."""
        for name in (*(c.column for c in self.predicate), *(self.project or ())):
            if name not in columns:
                raise InvalidUsage(f"unknown column {name!r}; columns are {list(columns)}")
        if self.count:
            return ("count",)
        return tuple(columns) if self.project is None else tuple(self.project)

    def to_sql(self, source: str) -> str:
        """The `SELECT` text `parse_select` reads back into this transform."""
        what = "count(*)" if self.count else "*" if self.project is None else ", ".join(self.project)
        sql = f"SELECT {what} FROM {source}"
        if self.predicate:
            sql += " WHERE " + " AND ".join(
                f"{c.column} {c.op} {sql_literal(c.value)}" for c in self.predicate
            )
        return sql


def _same(row: Row) -> Row:
    return row


def sql_literal(v: Scalar) -> str:
    """`v` as a SQL literal (the inverse of the subset's literal syntax)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    return "'" + v.replace("'", "''") + "'"


_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+)|(?P<op><>|<=|>=|=|<|>)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(),*]))"
)


@final
@dataclass
class _Tokens:
    items: list[tuple[str, str]] = field(default_factory=list)
    pos: int = 0

    def peek(self) -> tuple[str, str] | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise InvalidUsage("unexpected end of SELECT")
        self.pos += 1
        return tok

    def word(self, expected: str | None = None) -> str:
        kind, text = self.take()
        if kind != "word" or (expected is not None and text.lower() != expected):
            raise InvalidUsage(f"expected {expected or 'a name'}, got {text!r}")
        return text

    def punct(self, expected: str) -> None:
        _, text = self.take()
        if text != expected:
            raise InvalidUsage(f"expected {expected!r}, got {text!r}")

    def at_word(self, word: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "word" and tok[1].lower() == word


def _tokenize(text: str) -> _Tokens:
    out: list[tuple[str, str]] = []
    i, text = 0, text.rstrip().removesuffix(";")
    while i < len(text):
        if text[i:].strip() == "":
            break
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:
            raise InvalidUsage(f"cannot parse {text[i:]!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        i = m.end()
    return _Tokens(out)


def _scalar(tokens: _Tokens) -> Scalar:
    kind, text = tokens.take()
    if kind == "str":
        return text[1:-1].replace("''", "'")
    if kind == "num":
        return int(text)
    if kind == "word" and text.lower() in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text.lower()]
    raise InvalidUsage(f"expected a literal, got {text!r}")


def parse_select(text: str) -> tuple[str, Transform]:
    """Parses `SELECT * | c1, c2 | count(*) FROM source [WHERE c op lit AND …]`.

    Returns `(source name, transform)`; anything else is `InvalidUsage`.
    """
    tokens = _tokenize(text)
    tokens.word("select")
    count, project = False, None
    tok = tokens.peek()
    if tok == ("punct", "*"):
        tokens.take()
    elif tok is not None and tok[0] == "word" and tok[1].lower() == "count":
        tokens.take()
        tokens.punct("(")
        tokens.punct("*")
        tokens.punct(")")
        count = True
    else:
        cols = [tokens.word()]
        while tokens.peek() == ("punct", ","):
            tokens.take()
            cols.append(tokens.word())
        project = tuple(cols)
    tokens.word("from")
    source = tokens.word()
    terms: list[Comparison] = []
    if tokens.at_word("where"):
        tokens.take()
        while True:
            column = tokens.word()
            kind, op = tokens.take()
            if kind != "op":
                raise InvalidUsage(f"expected a comparison operator, got {op!r}")
            terms.append(Comparison(column, op, _scalar(tokens)))
            if not tokens.at_word("and"):
                break
            tokens.take()
    if tokens.peek() is not None:
        raise InvalidUsage(f"unexpected {tokens.peek()[1]!r} in {text!r}")  # type: ignore[index]
    return source, Transform(tuple(terms), project, count)


@final
class CompiledTransforms:
    """`Transform.compile` memoized per (transform, columns): a component
    compiles the same few transforms over and over (every peek). Bounded by
    clearing when full (deterministic, and the working set refills at once).
    An `InvalidUsage` is not cached: it is raised again each time."""

    def __init__(self, limit: int = 1_000) -> None:
        self._limit = limit
        self._compiled: dict[tuple[Transform, tuple[str, ...]], CompiledTransform] = {}

    def __call__(self, transform: Transform, columns: tuple[str, ...]) -> CompiledTransform:
        compiled = self._compiled.get((transform, columns))
        if compiled is None:
            if len(self._compiled) >= self._limit:
                self._compiled.clear()
            compiled = self._compiled[transform, columns] = transform.compile(columns)
        return compiled
