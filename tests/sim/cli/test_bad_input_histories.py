"""Bad input, damaged histories (DESIGN.md §9, issue 16): `coordsim check` given
EDN histories and trace directories that are malformed, cut short, corrupt or
of another type, refused in one line, exit 2, nothing changed. The runner and
the promise each case is held to are tests/sim/cli/test_bad_input.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.sim.cli.test_bad_input import (
    Case,
    _c,
    _trace,
    params,
    run_case,
)

if TYPE_CHECKING:
    from pathlib import Path

    from tests.sim.cli.test_bad_input import Forker

_EVENT: Final = "{{:type :{t}, :process 0, :f :{f}, :value {v}, :time {time}}}\n"


def _edn(*events: tuple[str, str, str, str]) -> bytes:
    return "".join(_EVENT.format(t=t, f=f, v=v, time=time) for t, f, v, time in events).encode()


def _add(value: str, time0: str = "0", time1: str = "1") -> bytes:
    return _edn(("invoke", "add", value, time0), ("ok", "add", value, time1))


def _read(result: str) -> bytes:
    return _edn(("invoke", "read", "nil", "0"), ("ok", "read", f"[set {result}]", "1"))


def _flip_bytes(p: Path) -> None:
    b = bytearray(p.read_bytes())
    for i in range(200, min(len(b) - 100, 1200)):
        b[i] ^= 0x5A
    p.write_bytes(bytes(b))


def _retype_elements(d: Path) -> None:
    t = pq.read_table(d / "ops.parquet")
    i = t.schema.get_field_index("elements")
    strings = pa.array([["x"]] * t.num_rows, pa.list_(pa.string()))
    pq.write_table(t.set_column(i, "elements", strings), d / "ops.parquet")


def _drop_rows(d: Path) -> None:
    t = pq.read_table(d / "ops.parquet")
    pq.write_table(t.slice(0, 1), d / "ops.parquet")


CASES: Final = [
    # --- check: EDN histories -----------------------------------------------------------
    _c("check-edn-empty", "check", "h.edn", files={"h.edn": b""}, expect="no events"),
    _c("check-edn-only-a-comment", "check", "h.edn", files={"h.edn": b"; nothing\n"}, expect="no events"),
    _c("check-edn-set-with-a-duplicate", "check", "h.edn", files={"h.edn": _read("#{1 1}")},
       expect="a set with a duplicate element: 1"),
    _c("check-edn-map-with-a-duplicate-key", "check", "h.edn",
       files={"h.edn": b"{:type :invoke, :type :ok, :process 0, :f :add, :value 1}\n"}, expect="duplicate key"),
    _c("check-edn-element-beyond-64-bits", "check", "h.edn", files={"h.edn": _add(str(2**64))},
       expect="outside the 64-bit range"),
    _c("check-edn-time-beyond-64-bits", "check", "h.edn", files={"h.edn": _add("1", str(2**63), str(2**63))},
       expect=":time"),
    _c("check-edn-time-the-checkers-read-as-never", "check", "h.edn", files={"h.edn": _add("1", "0", str(2**62))},
       expect="beyond the largest a history holds"),
    _c("check-edn-read-element-beyond-64-bits", "check", "h.edn", files={"h.edn": _read(f"#{{{-(2**63)}}}")},
       expect="read element"),
    _c("check-edn-integer-of-5000-digits", "check", "h.edn", files={"h.edn": _add("9" * 5000)},
       expect="an integer of 5000 digits"),
    _c("check-edn-not-utf8", "check", "h.edn", files={"h.edn": b"\xff\xfe\xfd"}, expect="unreadable"),
    _c("check-edn-unclosed", "check", "h.edn", files={"h.edn": b"{:type :invoke"}, expect="never closed"),
    _c("check-edn-bad-unicode-escape", "check", "h.edn", files={"h.edn": b'{:f "\\uZZ"}'},
       expect="bad unicode escape"),
    _c("check-edn-not-a-map", "check", "h.edn", files={"h.edn": b"[1 2 3]\n"}, expect="is not a map"),
    _c("check-path-missing", "check", "nope", expect="no such trace directory or EDN file"),
    # --- check: trace directories -------------------------------------------------------
    _c("check-trace-without-meta", "check", "t", setup=_trace("t", lambda d: (d / "meta.json").unlink()),
       expect="no meta.json"),
    _c("check-trace-meta-not-json", "check", "t",
       setup=_trace("t", lambda d: (d / "meta.json").write_text("{not json")), expect="unreadable"),
    _c("check-trace-meta-not-an-object", "check", "t",
       setup=_trace("t", lambda d: (d / "meta.json").write_text("[1, 2]")), expect="not a JSON object"),
    _c("check-trace-meta-not-utf8", "check", "t",
       setup=_trace("t", lambda d: (d / "meta.json").write_bytes(b"\xff\xfe")), expect="unreadable"),
    _c("check-trace-ops-truncated", "check", "t",
       setup=_trace("t", lambda d: (d / "ops.parquet").write_bytes((d / "ops.parquet").read_bytes()[:3000])),
       expect="unreadable trace"),
    _c("check-trace-ops-corrupt", "check", "t", setup=_trace("t", lambda d: _flip_bytes(d / "ops.parquet")),
       expect="unreadable trace"),
    _c("check-trace-ops-missing", "check", "t", setup=_trace("t", lambda d: (d / "ops.parquet").unlink()),
       expect="unreadable trace"),
    _c("check-trace-ops-empty-file", "check", "t", setup=_trace("t", lambda d: (d / "ops.parquet").write_bytes(b"")),
       expect="unreadable trace"),
    _c("check-trace-events-corrupt", "check", "t", setup=_trace("t", lambda d: _flip_bytes(d / "events.parquet")),
       expect="unreadable trace"),
    _c("check-trace-wrong-column-type", "check", "t", setup=_trace("t", _retype_elements),
       expect="column elements is list<"),
    _c("check-trace-ops-count-mismatch", "check", "t", setup=_trace("t", _drop_rows), expect="meta.json says"),
    _c("check-unknown-checker", "check", "t", "--checker", "bogus", setup=_trace("t", lambda d: None),
       expect="unknown checker"),
    _c("check-linear-limit-nan", "check", "t", "--linear-limit", "nan", setup=_trace("t", lambda d: None),
       expect="must be a finite number"),
    _c("check-linear-max-ops-negative", "check", "t", "--linear-max-ops", "-5", setup=_trace("t", lambda d: None),
       expect="must be >= 0"),
    _c("check-html-unwritable", "check", "t", "--html", "/proc/x.html", setup=_trace("t", lambda d: None),
       expect="cannot write /proc/x.html"),
    _c("check-html-is-a-users-file", "check", "t", "--html", "important.txt", setup=_trace("t", lambda d: None),
       expect="was not written by coordsim"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_a_damaged_history_is_refused_in_one_line(
    case: Case, forker: Forker, valid_trace: Path, tmp_path: Path
) -> None:
    run_case(case, forker, valid_trace, tmp_path)
