"""The history model: recording, validation, Parquet traces, interchange."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from sim.history.checker.generate import GenConfig, generate
from sim.history.edn import Keyword, dumps, loads_all
from sim.history.export import history_to_edn, history_to_porcupine
from sim.history.import_edn import history_from_edn
from sim.history.model import (
    EventKind,
    History,
    HistoryError,
    Kind,
    Op,
    Status,
    validate,
)
from sim.history.recorder import HistoryRecorder
from sim.history.traces import (
    EVENTS_FILE,
    META_FILE,
    OPS_FILE,
    OPS_SCHEMA,
    SCHEMA_VERSION,
    read_trace,
    write_trace,
)

if TYPE_CHECKING:
    from pathlib import Path


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def _recorded() -> HistoryRecorder:
    rec = HistoryRecorder(_Clock())
    c = rec.invoke(0, Kind.CREATE_TABLE, "t")
    rec.ok(c, catalog_ts=1)
    a = rec.invoke(1, Kind.ADD, "t", elements=[5, 6], client="c1")
    rec.ok(a, write_ts=2, catalog_ts=1)
    r = rec.invoke(0, Kind.READ, "t")
    rec.ok(r, result=[6, 5], read_ts=2, catalog_ts=1)
    u = rec.invoke(0, Kind.UPDATE, "t", args={"add": 1, "where": [["=", 5]]})
    rec.ok(u, count=1, write_ts=3, catalog_ts=1)
    f = rec.invoke(2, Kind.READ, "nope")
    rec.fail(f, "42P01", "unknown table nope", catalog_ts=1)
    i = rec.invoke(3, Kind.ADD, "t", elements=[7])
    rec.info(i, "timeout")
    rec.invoke(4, Kind.ADD, "t", elements=[8])  # still pending when the run ends
    rec.event(EventKind.ORACLE_WRITE_TS, "oracle", timeline="user", ts=2, actor="coord-1")
    rec.event(EventKind.GROUP_COMMIT, "coordinator", batch_size=1, ops=[a], detail={"tables": ["t"]})
    rec.event(EventKind.FAULT, "nemesis", detail={"fault": "crash"})
    return rec


def test_recorder_builds_a_valid_history() -> None:
    rec = _recorded()
    h = rec.history()
    validate(h)
    ops = list(h.ops())
    assert [o.kind for o in ops] == [Kind.CREATE_TABLE, Kind.ADD, Kind.READ, Kind.UPDATE, Kind.READ, Kind.ADD, Kind.ADD]
    assert ops[2].result == (5, 6)  # results are stored sorted
    assert ops[3].args == {"add": 1, "where": [["=", 5]]}
    assert ops[4].status == Status.FAIL
    assert ops[4].error_code == "42P01"
    assert ops[5].status == Status.INFO
    assert ops[5].error == "timeout"
    assert ops[6].status == Status.INFO
    assert ops[6].complete_ns is None
    assert ops[1].client == "c1"
    assert [e.kind for e in rec.events()] == ["oracle.write_ts", "group-commit", "fault"]


def test_recorder_rejects_misuse_at_once() -> None:
    rec = HistoryRecorder(_Clock())
    a = rec.invoke(0, Kind.ADD, "t", elements=[1])
    with pytest.raises(HistoryError, match="still running"):
        rec.invoke(0, Kind.READ, "t")
    rec.info(a)
    with pytest.raises(HistoryError, match="after an `info`"):
        rec.invoke(0, Kind.READ, "t")
    with pytest.raises(HistoryError, match="not invoked or already completed"):
        rec.ok(a)
    r = rec.invoke(1, Kind.READ, "t")
    with pytest.raises(HistoryError, match="needs its result"):
        rec.ok(r)
    assert rec.fresh_process() == 2


def _op(op_id: int, process: int, kind: Kind, inv: int, end: int | None, status: Status = Status.OK, **kw: object) -> Op:
    return Op(op_id, process, kind, kw.pop("obj", "t"), inv, end, status, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([_op(0, 0, Kind.ADD, 5, 3, elements=(1,))], "before its invoke"),
        ([_op(0, 0, Kind.ADD, 0, 10, elements=(1,)), _op(1, 0, Kind.ADD, 5, 20, elements=(2,))], "still running"),
        ([_op(0, 0, Kind.ADD, 0, 10, Status.INFO, elements=(1,)), _op(1, 0, Kind.ADD, 20, 30, elements=(2,))], "after its op 0 ended `info`"),
        ([_op(0, 0, Kind.ADD, 0, 10)], "without elements"),
        ([_op(0, 0, Kind.READ, 0, 10, obj=None)], "names no object"),
        ([_op(0, 0, Kind.ADD, 0, None, elements=(1,))], "without a completion"),
    ],
)
def test_validation_names_the_offending_op(ops: list[Op], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        validate(History.from_ops(ops))


def test_a_value_may_be_added_twice_a_table_is_a_multiset() -> None:
    validate(History.from_ops([
        _op(0, 0, Kind.ADD, 0, 10, elements=(1,)),
        _op(1, 1, Kind.ADD, 20, 30, elements=(1, 1)),
        _op(2, 2, Kind.READ, 40, 50, result=(1, 1, 1)),
    ]))


def test_a_failed_add_may_be_retried_with_the_same_value() -> None:
    validate(History.from_ops([
        _op(0, 0, Kind.ADD, 0, 10, Status.FAIL, elements=(1,), error_code="40001"),
        _op(1, 0, Kind.ADD, 20, 30, elements=(1,)),
    ]))


def test_trace_round_trip(tmp_path: Path) -> None:
    rec = _recorded()
    h = rec.history()
    d = write_trace(tmp_path / "trace", h, rec.events(), run="r1", config="decoupled", seed=7)
    assert sorted(p.name for p in d.iterdir()) == [EVENTS_FILE, META_FILE, OPS_FILE]
    tr = read_trace(d)
    assert list(tr.history.ops()) == list(h.ops())
    assert tr.events == rec.events()
    assert tr.meta["schema_version"] == SCHEMA_VERSION
    assert tr.meta["config"] == "decoupled"
    assert tr.meta["ops"] == h.n
    table = pq.read_table(d / OPS_FILE)
    assert table.schema.equals(OPS_SCHEMA, check_metadata=False)
    assert table.column("seed").to_pylist() == [7] * h.n
    assert table.schema.metadata[b"coordsim.schema_version"] == str(SCHEMA_VERSION).encode()


def test_large_generated_history_round_trips(tmp_path: Path) -> None:
    h = generate(GenConfig(ops=3_000, p_info=0.05, p_mutate=0.1, seed=3))
    write_trace(tmp_path, h)
    assert list(read_trace(tmp_path).history.ops()) == list(h.ops())


@pytest.mark.parametrize("rows_per_group", [7, 1_000, 100_000])
def test_a_lean_read_gives_the_same_history(tmp_path: Path, rows_per_group: int) -> None:
    """`read_trace(lean=True)` (export's bounded memory) decodes column by
    column and batch by batch; whatever the row groups, and with strings,
    lists, nulls and every kind, it is the history the whole-table read gives."""
    rec = _recorded()
    h = generate(GenConfig(ops=2_500, p_info=0.05, p_mutate=0.1, seed=5))
    d = write_trace(tmp_path / "t", h)
    table = pq.read_table(d / OPS_FILE)
    pq.write_table(table, d / OPS_FILE, row_group_size=rows_per_group)
    assert list(read_trace(d, lean=True).history.ops()) == list(read_trace(d).history.ops()) == list(h.ops())
    small = write_trace(tmp_path / "s", rec.history(), rec.events())
    assert list(read_trace(small, lean=True).history.ops()) == list(rec.history().ops())


def test_a_lean_read_names_a_missing_column(tmp_path: Path) -> None:
    d = write_trace(tmp_path / "t", _recorded().history())
    pq.write_table(pq.read_table(d / OPS_FILE).drop_columns(["catalog_ts"]), d / OPS_FILE)
    with pytest.raises(HistoryError, match="lacks columns catalog_ts"):
        read_trace(d, lean=True)


def test_trace_without_meta_or_of_another_version_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=r"no meta\.json"):
        read_trace(tmp_path)
    write_trace(tmp_path, _recorded().history())
    meta = json.loads((tmp_path / META_FILE).read_text())
    meta["schema_version"] = 999
    (tmp_path / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(HistoryError, match="schema version 999"):
        read_trace(tmp_path)


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    write_trace(tmp_path, _recorded().history())
    write_trace(tmp_path, _recorded().history())  # overwrite in place
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_edn_dialect() -> None:
    h = _recorded().history()
    text = history_to_edn(h)
    lines = text.splitlines()
    first = loads_all(lines[0])[0]
    assert first[Keyword("type")] == Keyword("invoke")
    assert first[Keyword("f")] == Keyword("create-table")
    assert first[Keyword("value")] == "t"
    read_done = next(m for m in map(lambda x: loads_all(x)[0], lines)
                     if m[Keyword("f")] == Keyword("read") and m[Keyword("type")] == Keyword("ok"))
    assert read_done[Keyword("value")] == ("t", frozenset({5, 6}))
    assert read_done[Keyword("read-ts")] == 2
    fail = next(m for m in map(lambda x: loads_all(x)[0], lines) if m[Keyword("type")] == Keyword("fail"))
    assert fail[Keyword("error")] == (Keyword("unknown-table"), "unknown table nope")
    again, _ = history_from_edn(loads_all(text))
    assert list(again.ops()) == list(h.ops())


def test_edn_reader_handles_the_format() -> None:
    forms = loads_all('; comment\n{:a [1 -2 3.5 "x\\"y"], :b #{:k nil true}} #_ {:gone 1} (1 2) #inst "2020"')
    assert forms[0] == {Keyword("a"): (1, -2, 3.5, 'x"y'), Keyword("b"): frozenset({Keyword("k"), None, True})}
    assert forms[1] == (1, 2)
    assert loads_all(dumps(forms[0])) == [forms[0]]
    assert dumps(frozenset({3, 1, 2})) == "#{1 2 3}"
    with pytest.raises(HistoryError, match="line 2"):
        loads_all("{:a 1}\n{:b ]")


def test_porcupine_json() -> None:
    h = _recorded().history()
    ops = json.loads(history_to_porcupine(h))
    assert {o["input"]["f"] for o in ops} == {"create-table", "add", "read", "update"}
    read = next(o for o in ops if o["input"]["f"] == "read" and o["output"] and o["output"].get("ok"))
    assert read["output"]["value"] == [5, 6]
    pending = [o for o in ops if o["output"] is None]
    assert len(pending) == 2
    assert all(o["return"] == 2**63 - 1 for o in pending)
    unknown = next(o for o in ops if o["output"] and o["output"].get("ok") is False)
    assert unknown["output"]["error"] == "42P01"


def test_statements_map_onto_operation_kinds() -> None:
    from coordinator import statements as s
    from sim.history.capture import StatementOp, statement_op

    def op(stmt: s.Statement) -> StatementOp:
        got = statement_op(stmt)
        assert got is not None
        return got

    where = s.Predicate((s.Comparison("x", "<=", 5),))
    assert op(s.Insert("t", ((1,), (2,)))) == StatementOp(Kind.ADD, "t", (1, 2))
    assert op(s.Select("t")) == StatementOp(Kind.READ, "t")
    assert op(s.Select("t", where=where)).args == {"where": [["<=", 5]]}
    upd = op(s.Update("t", (s.Assignment("x", add=10),), where))
    assert upd == StatementOp(Kind.UPDATE, "t", (), {"add": 10, "where": [["<=", 5]]})
    assert op(s.Delete("t")) == StatementOp(Kind.DELETE, "t")
    assert op(s.CreateTable("t", ())).kind == Kind.CREATE_TABLE
    assert op(s.DropTable("t")).kind == Kind.DROP_TABLE
    assert op(s.CreateIndex("i", "t")).args == {"on": "t", "cluster": None}
    assert statement_op(s.SelectConstant((1,), ("?column?",))) is None  # reads no object
    with pytest.raises(HistoryError, match="not an integer"):
        statement_op(s.Insert("t", (("a",),)))
