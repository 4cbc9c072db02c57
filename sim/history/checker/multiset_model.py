"""The model of checker "table" (`sim.history.checker.multiset`): a table as
a multiset of rows, each operation as a spec `(code, lo, hi, ne, arg, count)`
(`spec_of`), and `apply_op`, the one step the search
(`sim.history.checker.multiset_search`) takes from a state. An operation the
model cannot express raises `Unsupported`, so its table is unknown, never
guessed at.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any, Final, Literal, final

from sim.history.model import (
    ADD,
    CREATE_TABLE,
    DELETE,
    DROP_TABLE,
    FAIL,
    INFO,
    NONE,
    READ,
    UNKNOWN_TABLE,
    UPDATE,
)

if TYPE_CHECKING:

    from sim.history.model import History

__all__ = [
    "HI_ANY",
    "LO_ANY",
    "OP_ADD",
    "OP_COUNT",
    "OP_CREATE",
    "OP_DELETE",
    "OP_DROP",
    "OP_GONE",
    "OP_READ",
    "OP_SET",
    "OP_SHIFT",
    "OP_THERE",
    "Spec",
    "State",
    "Unsupported",
    "apply_op",
    "parse_where",
    "spec_of",
]

#: Operation codes of the model (a spec is `(code, lo, hi, ne, arg, count)`).
OP_CREATE: Final = 0
OP_DROP: Final = 1
OP_GONE: Final = 2  # failed 42P01: the table did not exist
OP_THERE: Final = 3  # CREATE failed 42P07: the table existed
OP_ADD: Final = 4  # arg: the rows, sorted
OP_READ: Final = 5  # arg: the rows returned (matching lo..hi, not in ne), sorted
OP_COUNT: Final = 6  # count: the number of matching rows
OP_SET: Final = 7  # arg: the new value; count: matched rows, or -1 = any
OP_SHIFT: Final = 8  # arg: k in SET x = x + k
OP_DELETE: Final = 9
LO_ANY: Final = -(2**63)
HI_ANY: Final = 2**63
_NO: Final = False

#: A table's state: None = it does not exist, else its rows sorted.
State = tuple[int, ...] | None
#: (code, lo, hi, excluded values, argument, count): WHERE is `lo <= x <= hi`
#: and x not in `ne` (a conjunction of `= <> < <= > >=` on integers is that).
Spec = tuple[int, int, int, tuple[int, ...], Any, int]

_CMP: Final = {"=", "<>", "<", "<=", ">", ">="}


@final
class Unsupported(Exception):
    """An operation the model cannot represent; its text is the reason."""


def parse_where(args: dict[str, Any]) -> tuple[int, int, tuple[int, ...]]:
    """`args.where` (a conjunction `[[op, v], …]` over the row) as (lo, hi, ne)."""
    lo, hi, ne = LO_ANY, HI_ANY, set[int]()
    for term in args.get("where") or ():
        if not (isinstance(term, list) and len(term) == 2 and term[0] in _CMP):
            raise Unsupported(f"unsupported WHERE term {term!r}")
        op, v = term
        if isinstance(v, bool) or not isinstance(v, int):
            raise Unsupported(f"unsupported WHERE value {v!r} (rows are integers)")
        if op == "=":
            lo, hi = max(lo, v), min(hi, v)
        elif op == "<>":
            ne.add(v)
        elif op == "<":
            hi = min(hi, v - 1)
        elif op == "<=":
            hi = min(hi, v)
        elif op == ">":
            lo = max(lo, v + 1)
        else:
            lo = max(lo, v)
    return lo, hi, tuple(sorted(x for x in ne if lo <= x <= hi))


def spec_of(h: History, i: int) -> Spec | None:
    """Op `i` in the model; None for an op with no effect and nothing observed
    (failed with another code, or an indeterminate read).

    Raises:
        Unsupported: the op is beyond the model (its text says why).
    """
    k, st = h.kind[i], h.status[i]
    if st == FAIL:
        code = h.error_code[i]
        if code == UNKNOWN_TABLE and k in (ADD, READ, UPDATE, DELETE, DROP_TABLE):
            return (OP_GONE, 0, 0, (), None, -1)
        if code == "42P07" and k == CREATE_TABLE:
            return (OP_THERE, 0, 0, (), None, -1)
        return None  # definitely not applied: no effect, nothing seen
    if k == CREATE_TABLE:
        return (OP_CREATE, 0, 0, (), None, -1)
    if k == DROP_TABLE:
        return (OP_DROP, 0, 0, (), None, -1)
    if k == ADD:
        return (OP_ADD, 0, 0, (), tuple(sorted(h.elements(i))), -1)
    text = h.args[i]
    args = json.loads(text) if text else {}
    if not isinstance(args, dict):
        raise Unsupported(f"unsupported arguments {text}")
    lo, hi, ne = parse_where(args)
    n = h.count[i]
    if k == READ:
        if st == INFO:
            return None  # saw nothing anyone knows
        if args.get("columns") is not None:
            raise Unsupported("unsupported operation: SELECT of named columns")
        if args.get("count"):
            if n == NONE:
                raise Unsupported("unsupported operation: a COUNT without its count")
            return (OP_COUNT, lo, hi, ne, None, n)
        return (OP_READ, lo, hi, ne, tuple(sorted(h.result(i) or ())), -1)
    count = -1 if st == INFO or n == NONE else n
    if k == DELETE:
        return (OP_DELETE, lo, hi, ne, None, count)
    if k == UPDATE:
        for key, op_code in (("set", OP_SET), ("add", OP_SHIFT)):
            v = args.get(key)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise Unsupported(f"unsupported UPDATE: SET {v!r} (rows are integers)")
                return (op_code, lo, hi, ne, v, count)
        raise Unsupported("unsupported UPDATE: neither `set` nor `add`")
    raise Unsupported(f"unsupported operation kind {h.kind[i]}")


def _split(sp: Spec, s: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(rows matching sp's WHERE, the others), both sorted."""
    lo, hi, ne = sp[1], sp[2], sp[3]
    if lo == LO_ANY and hi == HI_ANY and not ne:
        return s, ()
    a = bisect_left(s, lo)
    b = bisect_right(s, hi, a)
    mid = s[a:b]
    if not ne:
        return mid, s[:a] + s[b:]
    return tuple(x for x in mid if x not in ne), s[:a] + tuple(x for x in mid if x in ne) + s[b:]


def apply_op(sp: Spec, s: State) -> State | Literal[False]:
    """The state after op `sp` in state `s`, or False if it cannot happen there."""
    code = sp[0]
    if code == OP_READ:
        if s is None:
            return _NO
        return s if (s if sp[1] == LO_ANY and sp[2] == HI_ANY and not sp[3] else _split(sp, s)[0]) == sp[4] else _NO
    if code == OP_SET:
        if s is None:
            return _NO
        m, rest = _split(sp, s)
        if sp[5] >= 0 and len(m) != sp[5]:
            return _NO
        if not m:
            return s
        v = sp[4]
        j = bisect_left(rest, v)
        return rest[:j] + (v,) * len(m) + rest[j:]
    if code == OP_ADD:
        if s is None:
            return _NO
        els: tuple[int, ...] = sp[4]
        if len(els) == 1:
            j = bisect_right(s, els[0])
            return s[:j] + els + s[j:]
        return tuple(sorted(s + els))
    if code == OP_COUNT:
        return s if s is not None and len(_split(sp, s)[0]) == sp[5] else _NO
    if code in (OP_DELETE, OP_SHIFT):
        if s is None:
            return _NO
        m, rest = _split(sp, s)
        if sp[5] >= 0 and len(m) != sp[5]:
            return _NO
        if code == OP_DELETE or not m:
            return rest
        return tuple(sorted(rest + tuple(x + sp[4] for x in m)))
    if code == OP_CREATE:
        return () if s is None else _NO
    if code == OP_DROP:
        return None if s is not None else _NO
    if code == OP_GONE:
        return s if s is None else _NO
    return s if s is not None else _NO  # OP_THERE
