"""Histories coordsim must refuse as bad input (a `HistoryError`, which the CLI
prints as one line with exit 2), not crash on or accept: EDN that is invalid
or holds numbers a history cannot store, empty files, and trace directories
whose files are damaged or inconsistent (issue 16)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.history.checker.generate import GenConfig, generate
from sim.history.edn import MAX_INT_DIGITS, loads_all
from sim.history.import_edn import history_from_edn, read_edn
from sim.history.model import MAX_TIME, HistoryError
from sim.history.traces import EVENTS_FILE, META_FILE, OPS_FILE, read_trace, write_trace

if TYPE_CHECKING:
    from pathlib import Path

_LIMIT = 2**63  # a history column is int64, with -2**63 meaning "absent"


def _add(value: object, t0: object = 0, t1: object = 1) -> str:
    return (
        f"{{:type :invoke, :process 0, :f :add, :value {value}, :time {t0}}}\n"
        f"{{:type :ok, :process 0, :f :add, :value {value}, :time {t1}}}\n"
    )


def _read(result: str, **extra: object) -> str:
    more = "".join(f", :{k.replace('_', '-')} {v}" for k, v in extra.items())
    return (
        "{:type :invoke, :process 0, :f :read, :value nil, :time 0}\n"
        f"{{:type :ok, :process 0, :f :read, :value [set {result}], :time 1{more}}}\n"
    )


def _load(text: str) -> object:
    return history_from_edn(loads_all(text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no events", id="empty"),
        pytest.param("; a comment\n#_ {:gone 1}\n", "no events", id="only-a-comment"),
        pytest.param(_read("#{1 1}"), "a set with a duplicate element: 1", id="set-duplicate"),
        pytest.param(_read("#{1 2 [3] [3]}"), "duplicate element: [3]", id="set-duplicate-vector"),
        pytest.param("#{1 true}", "1 and true are equal to this reader", id="set-int-and-bool"),
        pytest.param("{:a 1, :a 2}", "a map with a duplicate key: :a", id="map-duplicate-key"),
        pytest.param(_add(_LIMIT), "element: 9223372036854775808 is outside the 64-bit range", id="element-2**63"),
        pytest.param(_add(-_LIMIT), "outside the 64-bit range", id="element--2**63"),
        pytest.param(_add(f"[:t #{{1 {2**70}}}]"), "element", id="element-in-a-set"),
        pytest.param(_add(1, _LIMIT, _LIMIT), ":time: 9223372036854775808", id="time"),
        pytest.param(_read(f"#{{{-_LIMIT}}}"), "read element", id="read-element"),
        pytest.param(_read("#{1}", read_ts=2**64), ":read-ts", id="read-ts"),
        pytest.param(_add(1, 0, 2**62), "beyond the largest a history holds", id="time-the-checkers-read-as-never"),
        pytest.param(_read("#{1}", write_ts=-1), "write_ts -1 is outside", id="negative-timestamp"),
        pytest.param(_read("#{1}", count=-2), "count -2 is outside", id="negative-count"),
        pytest.param(_read("#{1}", count=2**64), ":count", id="count"),
        pytest.param(_add(1).replace(":process 0", f":process {2**64}"), ":process", id="process"),
        pytest.param(_add(1).replace(":time 0", ':index "x", :time 0'), ":index: expected an integer", id="index"),
        pytest.param(_add("9" * 5000), "an integer of 5000 digits", id="5000-digits"),
        pytest.param(_add("9" * (MAX_INT_DIGITS + 1) + "N"), "digits", id="bigint-literal"),
        pytest.param('{:f "\\uZZZZ"}', "bad unicode escape", id="unicode-escape"),
    ],
)
def test_bad_edn_is_a_history_error(text: str, message: str) -> None:
    with pytest.raises(HistoryError, match=re.escape(message)):
        _load(text)


def test_edn_at_the_edges_of_the_range_is_read() -> None:
    last = MAX_TIME  # times and timestamps: the checkers take 2**62 as "never"
    h, _ = history_from_edn(loads_all(_add(_LIMIT - 1, 0, last) + _read(f"#{{{-_LIMIT + 1} 5}}", read_ts=last)
                                      .replace(":process 0", ":process 1")))
    assert list(h.el) == [_LIMIT - 1]
    assert list(h.res) == [-_LIMIT + 1, 5]
    assert h.complete[0] == last


@given(st.one_of(st.integers(), st.integers(min_value=2**62, max_value=2**80), st.integers(max_value=-(2**62))))
def test_any_integer_element_is_read_or_refused(v: int) -> None:
    if -_LIMIT < v < _LIMIT:
        h, _ = history_from_edn(loads_all(_add(v)))
        assert list(h.el) == [v]
    else:
        with pytest.raises(HistoryError, match="outside the 64-bit range"):
            history_from_edn(loads_all(_add(v)))


def test_an_empty_edn_file_is_refused_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_text("")
    with pytest.raises(HistoryError, match=r"h\.edn: no events"):
        read_edn(p)


def test_a_non_utf8_edn_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_bytes(b"{:type \xff}")
    with pytest.raises(HistoryError, match="unreadable"):
        read_edn(p)


# --- trace directories ------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    write_trace(d, generate(GenConfig(ops=30, processes=3, seed=2)), run="r", config="c", seed=2)
    return d


def _rewrite_ops(d: Path, change: object) -> None:
    t = pq.read_table(d / OPS_FILE)
    pq.write_table(change(t), d / OPS_FILE)  # type: ignore[operator]


def _set(t: pa.Table, name: str, col: object) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, col)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda d: (d / META_FILE).write_text("[1]"), "not a JSON object", id="meta-not-an-object"),
        pytest.param(lambda d: (d / META_FILE).write_text("{"), "unreadable", id="meta-not-json"),
        pytest.param(lambda d: (d / META_FILE).write_bytes(b"\xff"), "unreadable", id="meta-not-utf8"),
        pytest.param(lambda d: (d / OPS_FILE).write_bytes((d / OPS_FILE).read_bytes()[:500]),
                     "unreadable trace", id="ops-truncated"),
        pytest.param(lambda d: (d / EVENTS_FILE).write_bytes(b"PAR1"), "unreadable trace", id="events-garbage"),
        pytest.param(lambda d: _rewrite_ops(d, lambda t: _set(t, "op_id", pa.nulls(t.num_rows, pa.int64()))),
                     "column op_id has", id="nulls-in-op-id"),
        pytest.param(lambda d: _rewrite_ops(d, lambda t: _set(t, "result", pa.array([["x"]] * t.num_rows))),
                     "column result is list<", id="strings-for-elements"),
        pytest.param(lambda d: _rewrite_ops(d, lambda t: t.drop_columns(["invoke_ns"])),
                     "lacks columns invoke_ns", id="missing-column"),
        pytest.param(lambda d: _rewrite_ops(d, lambda t: t.slice(0, 3)), "says 30 ops, the trace holds 3",
                     id="fewer-rows-than-meta-says"),
    ],
)
def test_a_damaged_trace_is_a_history_error(trace: Path, damage: object, message: str) -> None:
    damage(trace)  # type: ignore[operator]
    with pytest.raises(HistoryError) as info:
        read_trace(trace)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_narrower_integer_columns_are_widened_not_misread(trace: Path) -> None:
    before = read_trace(trace).history
    _rewrite_ops(trace, lambda t: _set(t, "invoke_ns", pc.cast(t["invoke_ns"], pa.int32())))
    after = read_trace(trace).history
    assert list(after.invoke) == list(before.invoke)


def test_meta_counts_are_checked_only_when_present(trace: Path) -> None:
    meta = json.loads((trace / META_FILE).read_text())
    del meta["ops"], meta["events"]
    (trace / META_FILE).write_text(json.dumps(meta))
    assert read_trace(trace).history.n == 30
