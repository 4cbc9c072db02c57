"""A streaming EDN reader and a printer: enough of the format for Jepsen/Elle
histories (nil, booleans, numbers, strings, keywords, symbols, vectors, lists,
maps, sets, comments, `#_` discards and tagged literals).

Vectors and lists read as tuples and sets as frozensets, so any value can be a
map key; keywords are `Keyword` values, distinct from strings, because Jepsen
uses both (`:unknown-table` vs `"foo"`).

The reader takes its text in chunks (`iter_forms`) and yields each top-level
form as soon as it is complete, so a history of millions of events is never
held whole, neither as text nor as forms. It tokenizes with one compiled
regex at C speed and keeps no positions; an error's line is worked out only
when there is an error. The lines of a history repeat a few shapes, and a
line of a shape seen before is built without tokenizing (`_Lines`).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from operator import length_hint
from typing import TYPE_CHECKING, Any, Final, final

from sim.history.model import HistoryError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["CHUNK_CHARS", "Keyword", "Symbol", "Tagged", "dumps", "iter_forms", "kw", "loads_all"]


@final
class Keyword:
    """An EDN keyword (`:name`). There is one object per name (`Keyword(n)`
    returns the existing one while any is alive), so equality and hashing are
    identity's, done in C: a history looks keywords up tens of millions of
    times, and a dataclass's Python-level `__hash__` was most of that time."""

    __slots__ = ("__weakref__", "name")
    name: str

    def __new__(cls, name: str) -> Keyword:
        k = _INTERNED.get(name)
        if k is None:
            k = object.__new__(cls)
            object.__setattr__(k, "name", name)
            k = _INTERNED.setdefault(name, k)
        return k

    def __setattr__(self, attr: str, value: object) -> None:
        raise AttributeError(f"Keyword is immutable (cannot set {attr})")

    def __reduce__(self) -> tuple[type[Keyword], tuple[str]]:
        return (Keyword, (self.name,))  # unpickled through __new__: still one object

    def __repr__(self) -> str:
        return f"Keyword({self.name!r})"

    def __str__(self) -> str:
        return ":" + self.name


#: Every live keyword by name; weak, so names read once do not stay forever.
_INTERNED: Final[weakref.WeakValueDictionary[str, Keyword]] = weakref.WeakValueDictionary()


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


#: The reader's cache of keywords by their text (`:name`), which saves the
#: weak dictionary's Python-level lookup; bounded, so a file of distinct
#: keywords cannot grow it without limit (the rest go through `Keyword`).
_KEYWORDS: Final[dict[str, Keyword]] = {}
_MAX_INTERNED: Final = 65536


def _keyword(tok: str) -> Keyword:
    k = _KEYWORDS.get(tok)
    if k is None:
        if len(tok) == 1:
            raise _Bad("empty keyword")
        k = Keyword(tok[1:])
        if len(_KEYWORDS) < _MAX_INTERNED:
            _KEYWORDS[tok] = k
    return k


#: One token per match, found by `findall` (no match objects): a string, a
#: string still open where the text read so far ends, a comment, `#{` or `#_`,
#: a bracket, or an atom (keyword, number, symbol, `nil`, `#tag`...).
#: Whitespace and commas match nothing, so `findall` skips them in C.
_TOKENS: Final = re.compile(
    r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"'
    r'|"[\s\S]*'
    r"|;[^\n]*"
    r"|\#[{_]"
    r"|[\[\](){}]"
    r'|[^\s,\[\](){}"]+'
)
_STRING: Final = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*"')
#: Characters a piece of text may be cut after when it has no newline: a
#: closing bracket ends any token outside a string (an open string is carried
#: over whole) and outside a comment (pieces with `;` are not cut this way).
_CUTS: Final = "}])"
#: How much text `iter_forms` callers read at a time (characters).
CHUNK_CHARS: Final = 1 << 20
_INT: Final = re.compile(r"[+-]?\d+N?")
_FLOAT: Final = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?")
_ESC: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CLOSE: Final = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_CONSTANTS: Final[dict[str, Any]] = {"nil": None, "true": True, "false": False}
_HEX4: Final = re.compile(r"[0-9A-Fa-f]{4}")
#: Integers longer than this are refused: no history value needs more than a
#: 64-bit integer's 19 digits, and Python's int-from-text limit is 4,300.
MAX_INT_DIGITS: Final = 100
#: Containers nested deeper than this are refused: hashing or printing such a
#: value recurses in C, and no history nests more than a few levels.
MAX_DEPTH: Final = 500


class _Bad(Exception):
    """A syntax error without its line; the reader adds the line of the token
    it was reading (or of `at`, a container's opening token)."""

    def __init__(self, msg: str, at: tuple[_Piece, int] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.at = at


@final
@dataclass(frozen=True, slots=True)
class _Piece:
    """A run of text tokenized at once, with the line it starts on: enough to
    find any of its tokens' line again after the fact."""

    text: str
    line: int
    tokens: int

    def line_of(self, k: int) -> int:
        """The line of token `k` (0-based) of this piece."""
        for i, m in enumerate(_TOKENS.finditer(self.text)):
            if i == k:
                return self.line + self.text.count("\n", 0, m.start())
        return self.line + self.text.count("\n")


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u":
                digits = s[i + 2 : i + 6]
                if not _HEX4.fullmatch(digits):
                    raise _Bad(f"bad unicode escape \\u{digits}")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESC.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _atom(tok: str) -> Any:
    """Any atom but a string; the reader's fast paths take the common ones."""
    if tok in _CONSTANTS:
        return _CONSTANTS[tok]
    if tok.startswith(":"):
        return _keyword(tok)
    if _INT.fullmatch(tok):
        digits = tok.rstrip("N").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            # Python refuses to convert such strings anyway (its int-str limit).
            raise _Bad(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
        return int(tok.rstrip("N"))
    if _FLOAT.fullmatch(tok):
        return float(tok.rstrip("M"))
    if tok.startswith("\\"):
        raise _Bad(f"character literals are not supported ({tok})")
    return Symbol(tok)


def loads_all(text: str) -> list[Any]:
    """Every top-level form of `text`; `HistoryError` with the line on bad input."""
    return list(iter_forms((text,)))


def _open_string(tokens: list[str]) -> bool:
    """True if the last token is a string still open where the text ends."""
    return bool(tokens) and tokens[-1][0] == '"' and _STRING.fullmatch(tokens[-1]) is None


def _pieces(
    chunks: Iterable[str], at_top: list[bool], *, fast_lines: bool
) -> Iterator[tuple[list[Any], _Piece, list[str]]]:
    """The text of `chunks` cut where no token can span the cut (after a
    newline, or a closing bracket when no comment is open): for each piece,
    the forms of the lines the fast path read (`_Lines`, tried while the
    reader is at the top level, `at_top[0]`), then the rest and its tokens.
    A string open at a cut is carried over to the next piece."""
    findall = _TOKENS.findall
    lines = _Lines()
    line = 1
    pending: list[str] = []  # text read and not yet tokenized
    semicolon = False  # whether `pending` has a `;` (a comment that may go on)
    for chunk in chunks:
        cut = chunk.rfind("\n") + 1
        if cut == 0:
            semicolon = semicolon or ";" in chunk
            if not semicolon:
                cut = max(map(chunk.rfind, _CUTS)) + 1
            if cut == 0:
                pending.append(chunk)  # a long line: joined once, when it ends
                continue
        pending.append(chunk[:cut])
        text = "".join(pending)
        rest = chunk[cut:]
        forms: list[Any] = []
        if fast_lines and at_top[0] and not (pending[0] and pending[0][0] == '"'):  # not in a carried string
            start = lines.read(text, forms)
            if start:
                line += text.count("\n", 0, start)
                text = text[start:]
        tokens = findall(text)
        if _open_string(tokens):
            last = tokens.pop()  # the open string runs to the end of `text`
            text = text[: len(text) - len(last)]
            rest = last + rest
        pending = [rest] if rest else []
        semicolon = ";" in rest
        yield forms, _Piece(text, line, len(tokens)), tokens
        line += text.count("\n")
    text = "".join(pending)
    tokens = findall(text)
    piece = _Piece(text, line, len(tokens))
    if _open_string(tokens):
        raise HistoryError(f"EDN line {piece.line_of(len(tokens) - 1)}: a string is never closed")
    yield [], piece, tokens


#: The parts of a line `_Lines` fills in: a simple string (no escape) and a
#: decimal integer standing alone as a token. `split` gives [text, string,
#: integer, text, string, integer, ..., text].
_SLOTS: Final = re.compile(r'"([^"\\\n]*)"|(?<![^\s,\[\](){}"])([0-9]{1,100})(?![^\s,\[\](){}"])')
#: At most this many line shapes are learned per reading.
MAX_SHAPES: Final = 4096


class _Miss(Exception):
    """A line does not fit its shape's builder after all (a string where the
    shape had an integer...): the general reader takes over."""


def _frozenset(items: tuple[Any, ...], n: int) -> frozenset[Any]:
    s = frozenset(items)
    if len(s) != n:
        raise _Miss  # a duplicate element: the general reader words the error
    return s


@final
class _Lines:
    """The fast path for a history's lines. Millions of lines share a few
    hundred shapes (the line with its strings and integers taken out): the
    first line of a shape is read by the general reader with placeholders
    for those values, which gives a builder, compiled once, that makes the
    form of any line of that shape from the values a C regex split gives.
    A line of one form, no escapes, comments, tags or discards only: any
    other line, or a line that misses, hands the rest of the piece to the
    general reader, which gives the same forms (and the errors, with lines).
    """

    def __init__(self) -> None:
        self.builders: dict[str, Any] = {}  # shape -> builder, or None: not for this path

    def read(self, text: str, out: list[Any]) -> int:
        """Appends the forms of `text`'s leading whole lines that fit to `out`;
        returns how many characters those lines take."""
        split = _SLOTS.split
        builders = self.builders
        pos = 0
        for ln in text.split("\n")[:-1]:
            parts = split(ln)
            shape = "\x00".join(parts[0::3])
            build = builders.get(shape, _NOTHING)
            if build is _NOTHING:
                build = self._learn(shape, ln, parts)
            if build is None:
                if ln.lstrip(" \t\r,").startswith(";") or not ln.strip(" \t\r,"):
                    pos += len(ln) + 1  # a comment or blank line: no form
                    continue
                break
            try:
                out.append(build(parts))
            except (_Miss, TypeError):
                break
            pos += len(ln) + 1
        return pos

    def _learn(self, shape: str, ln: str, parts: list[Any]) -> Any:
        if len(self.builders) >= MAX_SHAPES:
            return None
        build = None
        if "\\" not in ln and ";" not in ln and ln.count("#") == ln.count("#{"):
            build = _compile(parts)
        self.builders[shape] = build
        return build


def _compile(parts: list[Any]) -> Any:
    """The builder of a line shape (see `_Lines`), or None if the shape is
    not one form this path can build. The source it compiles holds only
    indices and names of constants, never text of the input."""
    texts = parts[0::3]
    n = len(texts) - 1
    strings = {k for k in range(n) if parts[3 * k + 1] is not None}
    masked = "".join(t + (f" \x00{k} " if k < n else "") for k, t in enumerate(texts))
    try:
        forms = loads_all(masked)
    except HistoryError:
        return None
    if len(forms) != 1:
        return None
    consts: dict[str, Any] = {}
    used: list[int] = []

    def const(v: Any) -> str:
        name = f"c{len(consts)}"
        consts[name] = v
        return name

    def expr(v: Any) -> tuple[str, bool]:
        """(source, whether it holds a value of the line)."""
        if type(v) is Symbol and v.name.startswith("\x00"):
            k = int(v.name[1:])
            used.append(k)
            return (f"p[{3 * k + 1}]" if k in strings else f"int(p[{3 * k + 2}])"), True
        if v is None or type(v) is bool:
            return repr(v), False
        if type(v) is dict:  # always a new dict: a form's maps are its own
            items = [(expr(key), expr(x)) for key, x in v.items()]
            if any(key[1] for key, _ in items):
                raise _Miss  # a value of the line as a key: it may be a duplicate
            body = ", ".join(f"{key[0]}: {x[0]}" for key, x in items)
            return "{" + body + "}", any(x[1] for _, x in items)
        if type(v) is tuple or type(v) is frozenset:
            elems = [expr(x) for x in v]
            if not any(e[1] for e in elems):
                return const(v), False
            body = "".join(e[0] + ", " for e in elems)
            return (f"({body})" if type(v) is tuple else f"_frozenset(({body}), {len(v)})"), True
        return const(v), False

    try:
        body, _ = expr(forms[0])
    except _Miss:
        return None
    if sorted(used) != list(range(n)):
        return None
    checks = "".join(f"    if p[{3 * k + 1}] is None:\n        raise _Miss\n" for k in sorted(strings))
    source = f"def build(p):\n{checks}    return {body}\n"
    namespace: dict[str, Any] = {"_Miss": _Miss, "_frozenset": _frozenset, "int": int, **consts}
    exec(compile(source, "<edn line shape>", "exec"), namespace)
    return namespace["build"]


#: A pending `#_` among a level's prefixes (the others are tag names).
_DISCARD: Final = object()
_NOTHING: Final = object()
_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def iter_forms(chunks: Iterable[str], *, fast_lines: bool = True) -> Iterator[Any]:
    """Every top-level form of the text that `chunks` make up when joined,
    each yielded once it is complete; a token may be split between chunks.
    `fast_lines=False` reads with the general reader alone: the reference
    the line fast path (`_Lines`) is tested against.

    Raises:
        HistoryError: the text is not EDN this reader takes, naming the line.
    """
    # Hand-written for speed: one loop over tokens, an explicit stack (no
    # recursion limit), the most frequent tokens (keywords, then numbers)
    # tested first.
    # Prefixes (`#_`, tags) wait in `pre` for the next value of their level.
    stack: list[tuple[list[Any], list[tuple[Any, _Piece, int]] | None, str, _Piece, int]] = []
    top: list[Any] = []
    cur = top  # the items of the innermost open container (at the top: forms to yield)
    pre: list[tuple[Any, _Piece, int]] | None = None
    kws = _KEYWORDS
    constants = _CONSTANTS
    close_of = _CLOSE
    digits = "0123456789"
    max_digits = MAX_INT_DIGITS
    append = cur.append
    piece = _Piece("", 1, 0)
    v: Any
    at_top = [True]
    for fast, piece, tokens in _pieces(chunks, at_top, fast_lines=fast_lines):
        top.extend(fast)
        it = iter(tokens)
        try:
            for tok in it:
                c = tok[0]
                if c == ":":
                    v = kws.get(tok)
                    if v is None:
                        v = _keyword(tok)
                elif c in digits:
                    v = int(tok) if len(tok) <= max_digits and tok.isdecimal() else _atom(tok)
                elif c in "}])":
                    if not stack:
                        raise _Bad(f"unexpected {tok!r}")
                    if pre is not None:
                        raise _Bad(f"unexpected {tok!r} after a tag or #_")
                    items = cur
                    cur, pre, opener, at_piece, at_left = stack.pop()
                    append = cur.append
                    if close_of[opener] != tok:
                        raise _Bad(f"{tok!r} closes {opener!r}")
                    if opener == "{":
                        n = len(items)
                        if n % 2:
                            raise _Bad("a map needs an even number of forms", (at_piece, at_left))
                        pairs = iter(items)
                        try:
                            v = dict(zip(pairs, pairs))  # noqa: B905 - even, checked above; strict= costs
                        except TypeError as exc:
                            raise _Bad("unhashable map key", (at_piece, at_left)) from exc
                        if len(v) * 2 != n:
                            # Invalid EDN (the spec: "no duplicate keys"); a reader that
                            # kept the last would silently drop part of an event.
                            dup = _first_duplicate(items[::2])
                            raise _Bad(f"a map with a duplicate key: {dup}", (at_piece, at_left))
                    elif opener == "#{":
                        try:
                            v = frozenset(items)
                        except TypeError as exc:
                            raise _Bad("unhashable set element", (at_piece, at_left)) from exc
                        if len(v) != len(items):
                            dup = _first_duplicate(items)
                            raise _Bad(f"a set with a duplicate element: {dup}", (at_piece, at_left))
                    else:
                        v = tuple(items)
                elif c in "{[(" or tok == "#{":
                    if len(stack) >= MAX_DEPTH:
                        raise _Bad(f"nested too deeply (more than {MAX_DEPTH} levels)")
                    stack.append((cur, pre, tok, piece, length_hint(it)))
                    cur = []
                    append = cur.append
                    pre = None
                    continue
                elif c == '"':
                    v = tok[1:-1]
                    if "\\" in v:
                        v = _unescape(v)
                elif c == "#":
                    if tok == "#_":
                        mark: Any = _DISCARD
                    elif len(tok) > 1 and tok[1] in _LETTERS:
                        mark = tok[1:]
                    else:
                        mark = _NOTHING
                    if mark is not _NOTHING:
                        if pre is None:
                            pre = []
                        pre.append((mark, piece, length_hint(it)))
                        continue
                    v = _atom(tok)
                elif c == ";":
                    continue
                else:
                    v = constants.get(tok, _NOTHING)
                    if v is _NOTHING:
                        v = _atom(tok)
                if pre is None:
                    append(v)
                    continue
                while pre:
                    mark = pre.pop()[0]
                    if mark is _DISCARD:
                        break
                    v = Tagged(mark, v)
                else:
                    append(v)
                if not pre:
                    pre = None
        except _Bad as exc:
            at_piece, at_left = exc.at or (piece, length_hint(it))
            line = at_piece.line_of(at_piece.tokens - at_left - 1)
            raise HistoryError(f"EDN line {line}: {exc.msg}") from exc
        yield from top
        top.clear()
        at_top[0] = not stack and pre is None
    if stack:
        _, _, opener, at_piece, at_left = stack[-1]
        line = at_piece.line_of(at_piece.tokens - at_left - 1)
        raise HistoryError(f"EDN line {line}: {opener!r} is never closed")
    if pre:
        _, at_piece, at_left = pre[-1]
        line = at_piece.line_of(at_piece.tokens - at_left - 1)
        raise HistoryError(f"EDN line {line}: a tag or #_ at the end of input")



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
