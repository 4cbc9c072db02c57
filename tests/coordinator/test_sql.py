"""The SQL front end: the subset parses to the right statements, renders back,
and anything else is one 42601 line naming the position."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.sql import parse, parse_script, render
from coordinator.statements import (
    Assignment,
    Column,
    ColumnType,
    Comparison,
    CreateCluster,
    CreateIndex,
    CreateMaterializedView,
    CreateTable,
    Delete,
    DropCluster,
    DropIndex,
    DropMaterializedView,
    DropTable,
    Insert,
    Predicate,
    Select,
    SelectConstant,
    SqlError,
    SqlState,
    Statement,
    Update,
)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "CREATE TABLE foo (a int, b TEXT, c boolean);",
            CreateTable(
                "foo",
                (
                    Column("a", ColumnType.INT),
                    Column("b", ColumnType.TEXT),
                    Column("c", ColumnType.BOOL),
                ),
            ),
        ),
        (
            "create table if not exists t (x bigint)",
            CreateTable("t", (Column("x", ColumnType.INT),), True),
        ),
        ("DROP TABLE IF EXISTS foo", DropTable("foo", True)),
        ("CREATE INDEX i IN CLUSTER c1 ON foo (a, b)", CreateIndex("i", "foo", ("a", "b"), "c1")),
        ("CREATE DEFAULT INDEX ON foo", CreateIndex("foo_primary_idx", "foo", (), None)),
        ("DROP INDEX i", DropIndex("i")),
        (
            "CREATE MATERIALIZED VIEW mv AS SELECT count(*) FROM foo",
            CreateMaterializedView("mv", Select("foo", None, True)),
        ),
        ("DROP MATERIALIZED VIEW mv", DropMaterializedView("mv")),
        ("CREATE CLUSTER c (SIZE = '1', REPLICATION FACTOR = 2)", CreateCluster("c", 2)),
        ("CREATE CLUSTER c", CreateCluster("c", 1)),
        ("DROP CLUSTER IF EXISTS c", DropCluster("c", True)),
        (
            "INSERT INTO foo VALUES (1, 'it''s', true), (-2, NULL, false)",
            Insert("foo", ((1, "it's", True), (-2, None, False))),
        ),
        ("INSERT INTO foo (b, a) VALUES ('x', 1)", Insert("foo", (("x", 1),), ("b", "a"))),
        (
            "UPDATE foo SET a = a + 1, b = 'z' WHERE a >= 3 AND b <> 'q'",
            Update(
                "foo",
                (Assignment("a", add=1), Assignment("b", "z")),
                Predicate((Comparison("a", ">=", 3), Comparison("b", "<>", "q"))),
            ),
        ),
        ("DELETE FROM foo WHERE a != 2", Delete("foo", Predicate((Comparison("a", "<>", 2),)))),
        ("SELECT * FROM foo", Select("foo")),
        (
            "select a, b from FOO where a = 1",
            Select("foo", ("a", "b"), False, Predicate((Comparison("a", "=", 1),))),
        ),
        ('SELECT count(*) FROM "Mixed Case"', Select("Mixed Case", None, True)),
        ("SELECT 1", SelectConstant((1,), ("?column?",))),
        ("select 1 + 2 * 3 AS x, 'a', -(2 - 5), null, true", SelectConstant((7, "a", 3, None, True), ("x",) + ("?column?",) * 4)),
        ("SELECT 1 + NULL", SelectConstant((None,), ("?column?",))),
    ],
)
def test_parses_the_subset(sql: str, expected: Statement) -> None:
    assert parse(sql) == expected
    assert parse(render(expected)) == expected


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("", "expected one statement, got 0"),
        (
            "SELEKT 1",
            "expected CREATE, DROP, INSERT, UPDATE, DELETE or SELECT, found 'SELEKT' at position 1",
        ),
        ("CREATE TABLE t (a float)", "a column type"),
        ("SELECT * FROM", "found end of input"),
        ("INSERT INTO t VALUES (1", "expected ')'"),
        ("SELECT * FROM t WHERE a ~ 1", "unexpected character '~' at position 25"),
        ("SELECT * FROM a; SELECT * FROM b", "expected one statement, got 2"),
    ],
)
def test_errors_are_one_line_42601(sql: str, fragment: str) -> None:
    with pytest.raises(SqlError) as info:
        parse(sql)
    assert info.value.code is SqlState.SYNTAX_ERROR
    assert fragment in info.value.message
    assert "\n" not in str(info.value)


def test_constant_arithmetic_needs_integers_and_no_from() -> None:
    with pytest.raises(SqlError) as info:
        parse("SELECT 'a' + 1")
    assert info.value.code is SqlState.DATATYPE_MISMATCH
    with pytest.raises(SqlError) as info:
        parse("SELECT 1 FROM t")
    assert info.value.code is SqlState.FEATURE_NOT_SUPPORTED


def test_unsupported_update_expression_is_0a000() -> None:
    with pytest.raises(SqlError) as info:
        parse("UPDATE t SET a = b + 1")
    assert info.value.code is SqlState.FEATURE_NOT_SUPPORTED


def test_scripts_split_on_semicolons() -> None:
    assert parse_script("CREATE TABLE t (a int); INSERT INTO t VALUES (1);; SELECT * FROM t") == [
        CreateTable("t", (Column("a", ColumnType.INT),)),
        Insert("t", ((1,),)),
        Select("t"),
    ]


_names = st.text(alphabet=st.sampled_from("abcXY_ 1\"'"), min_size=1, max_size=8)
_values = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.text(max_size=6))
_preds = st.builds(
    Predicate,
    st.lists(
        st.builds(Comparison, _names, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), _values),
        max_size=3,
    ).map(tuple),
)
_selects = st.builds(
    Select,
    _names,
    st.one_of(st.none(), st.lists(_names, min_size=1, max_size=3).map(tuple)),
    st.booleans(),
    _preds,
).map(lambda s: Select(s.source, None, True, s.where) if s.count else s)
_statements = st.one_of(
    st.builds(
        CreateTable,
        _names,
        st.lists(
            st.builds(Column, _names, st.sampled_from(ColumnType)), min_size=1, max_size=3
        ).map(tuple),
        st.booleans(),
    ),
    st.builds(DropTable, _names, st.booleans()),
    st.builds(
        CreateIndex,
        _names,
        _names,
        st.lists(_names, max_size=2).map(tuple),
        st.one_of(st.none(), _names),
    ),
    st.builds(CreateMaterializedView, _names, _selects, st.one_of(st.none(), _names)),
    st.builds(CreateCluster, _names, st.integers(0, 5)),
    st.builds(
        Insert,
        _names,
        st.lists(st.lists(_values, min_size=1, max_size=3).map(tuple), min_size=1, max_size=3).map(
            tuple
        ),
    ),
    st.builds(
        Update,
        _names,
        st.lists(
            st.one_of(
                st.builds(Assignment, _names, _values),
                st.builds(lambda c, n: Assignment(c, add=n), _names, st.integers(-99, 99)),
            ),
            min_size=1,
            max_size=2,
        ).map(tuple),
        _preds,
    ),
    st.builds(Delete, _names, _preds),
    _selects,
    st.lists(st.tuples(_values, st.one_of(st.just("?column?"), _names)), min_size=1, max_size=3).map(
        lambda pairs: SelectConstant(tuple(v for v, _ in pairs), tuple(n for _, n in pairs))
    ),
)


@given(_statements)
def test_render_then_parse_is_the_identity(stmt: Statement) -> None:
    assert parse(render(stmt)) == stmt
