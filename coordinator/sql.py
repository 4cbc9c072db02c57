"""A parser for the SQL subset scenario scripts use, producing typed statements.

Hand-written rather than sqlglot: the subset is a dozen statement shapes, each
maps onto one dataclass of `coordinator.statements`, and a small recursive
descent parser gives exact one-line errors (SQLSTATE 42601 with the position)
without a dependency whose AST would need mapping anyway. Syntax follows
Materialize where the two differ from PostgreSQL (`IN CLUSTER`, `CREATE
DEFAULT INDEX`, `REPLICATION FACTOR`, `SUBSCRIBE … AS OF … UP TO`).

One module past 500 lines on purpose: `render` is the parser's inverse
(`parse(render(s)) == s`, property-tested), so the grammar and its rendering
change together and read best side by side.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final, NamedTuple

from controllers.transform import sql_literal
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
    Subscribe,
    Update,
)

if TYPE_CHECKING:
    from coordinator.statements import Statement, Value

__all__ = ["parse", "parse_script", "render"]

_TYPES: Final = {
    "int": ColumnType.INT,
    "integer": ColumnType.INT,
    "bigint": ColumnType.INT,
    "smallint": ColumnType.INT,
    "int4": ColumnType.INT,
    "int8": ColumnType.INT,
    "text": ColumnType.TEXT,
    "varchar": ColumnType.TEXT,
    "string": ColumnType.TEXT,
    "bool": ColumnType.BOOL,
    "boolean": ColumnType.BOOL,
}
_COMPARISONS: Final = ("<=", ">=", "<>", "!=", "=", "<", ">")

_TOKEN: Final = re.compile(
    r"""
    (?P<ws>\s+|--[^\n]*)
  | (?P<num>\d+)
  | (?P<str>'(?:[^']|'')*')
  | (?P<qid>"(?:[^"]|"")+")
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|<>|!=|[=<>(),;*+\-.])
  | (?P<bad>.)
    """,
    re.VERBOSE,
)


class _Tok(NamedTuple):
    kind: str  # num str id qid op end
    text: str
    pos: int
    #: `text` lowered, for keyword checks ("" unless an `id`).
    word: str = ""


def _tokenize(sql: str) -> list[_Tok]:
    # One `finditer` pass: every character belongs to some alternative (`bad`
    # catches the rest), so the matches tile the text. A hand loop of `match`
    # calls cost a third of an INSERT's parse (issue 20: inserts are parsed
    # each time, their texts never repeat).
    out: list[_Tok] = []
    append = out.append
    new = tuple.__new__  # _Tok's own __new__ is a Python call more per token
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind == "ws":
            continue
        if kind == "id":
            text = m.group()
            append(new(_Tok, ("id", text, m.start(), text.lower())))
        elif kind == "bad":
            pos = m.start()
            raise SqlError(SqlState.SYNTAX_ERROR, f"unexpected character {sql[pos]!r} at position {pos + 1}")
        else:
            append(new(_Tok, (kind, m.group(), m.start(), "")))
    append(_Tok("end", "", len(sql)))
    return out


def parse(sql: str) -> Statement:
    """Parses one statement (a trailing `;` is allowed).

    Raises:
        SqlError: 42601 with the position, for anything outside the subset.
    """
    statements = parse_script(sql)
    if len(statements) != 1:
        raise SqlError(SqlState.SYNTAX_ERROR, f"expected one statement, got {len(statements)}")
    return statements[0]


def parse_script(sql: str) -> list[Statement]:
    """Parses `;`-separated statements."""
    p = _Parser(sql)
    out: list[Statement] = []
    while not p.at_end():
        if p.accept_op(";"):
            continue
        out.append(p.statement())
        if not p.at_end():
            p.expect_op(";")
    return out


class _Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.toks = _tokenize(sql)
        self.i = 0

    # --- token plumbing -------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def at_end(self) -> bool:
        return self.peek().kind == "end"

    def error(self, expected: str) -> SqlError:
        tok = self.peek()
        found = "end of input" if tok.kind == "end" else repr(tok.text)
        return SqlError(
            SqlState.SYNTAX_ERROR, f"expected {expected}, found {found} at position {tok.pos + 1}"
        )

    def is_kw(self, *words: str, ahead: int = 0) -> bool:
        toks = self.toks
        last = len(toks) - 1
        i = self.i + ahead
        for w in words:
            if toks[i if i < last else last].word != w:
                return False
            i += 1
        return True

    def accept_kw(self, *words: str) -> bool:
        if self.is_kw(*words):
            self.i += len(words)
            return True
        return False

    def expect_kw(self, *words: str) -> None:
        if not self.accept_kw(*words):
            raise self.error(" ".join(w.upper() for w in words))

    def accept_op(self, op: str) -> bool:
        tok = self.peek()
        if tok.kind == "op" and tok.text == op:
            self.i += 1
            return True
        return False

    def expect_op(self, op: str) -> None:
        if not self.accept_op(op):
            raise self.error(repr(op))

    def ident(self, what: str = "a name") -> str:
        tok = self.peek()
        if tok.kind == "id":
            self.i += 1
            return tok.text.lower()
        if tok.kind == "qid":
            self.i += 1
            return tok.text[1:-1].replace('""', '"')
        raise self.error(what)

    def ident_list(self) -> tuple[str, ...]:
        self.expect_op("(")
        names = [self.ident("a column name")]
        while self.accept_op(","):
            names.append(self.ident("a column name"))
        self.expect_op(")")
        return tuple(names)

    def integer(self) -> int:
        negative = self.accept_op("-")
        tok = self.peek()
        if tok.kind != "num":
            raise self.error("an integer")
        self.i += 1
        return -int(tok.text) if negative else int(tok.text)

    def literal(self) -> Value:
        tok = self.peek()
        if tok.kind == "str":
            self.i += 1
            return tok.text[1:-1].replace("''", "'")
        if tok.kind == "num" or (tok.kind == "op" and tok.text == "-"):
            return self.integer()
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.accept_kw(word):
                return value
        raise self.error("a literal (integer, 'string', true, false or null)")

    # --- statements -----------------------------------------------------------

    def statement(self) -> Statement:
        if self.accept_kw("create"):
            return self.create()
        if self.accept_kw("drop"):
            return self.drop()
        if self.accept_kw("insert", "into"):
            return self.insert()
        if self.accept_kw("update"):
            return self.update()
        if self.accept_kw("delete", "from"):
            table = self.ident("a table name")
            return Delete(table, self.where())
        if self.accept_kw("select"):
            return self.select_constant() if self.constant_ahead() else self.select()
        if self.accept_kw("subscribe"):
            return self.subscribe()
        raise self.error("CREATE, DROP, INSERT, UPDATE, DELETE or SELECT")

    def create(self) -> Statement:
        if self.accept_kw("table"):
            if_not_exists = self.accept_kw("if", "not", "exists")
            name = self.ident("a table name")
            self.expect_op("(")
            columns = [self.column()]
            while self.accept_op(","):
                columns.append(self.column())
            self.expect_op(")")
            return CreateTable(name, tuple(columns), if_not_exists)
        if self.accept_kw("default", "index"):
            cluster = self.in_cluster()
            self.expect_kw("on")
            on = self.ident("a table or view name")
            return CreateIndex(f"{on}_primary_idx", on, (), cluster)
        if self.accept_kw("index"):
            name = self.ident("an index name")
            cluster = self.in_cluster()
            self.expect_kw("on")
            on = self.ident("a table or view name")
            keys = self.ident_list() if self.peek().text == "(" else ()
            return CreateIndex(name, on, keys, cluster)
        if self.accept_kw("materialized", "view"):
            name = self.ident("a view name")
            cluster = self.in_cluster()
            self.expect_kw("as")
            self.expect_kw("select")
            return CreateMaterializedView(name, self.select(), cluster)
        if self.accept_kw("cluster"):
            name = self.ident("a cluster name")
            replicas = 1
            if self.accept_op("("):
                while True:
                    if self.accept_kw("replication", "factor"):
                        self.accept_op("=")
                        replicas = self.integer()
                        if replicas < 0:
                            raise SqlError(SqlState.SYNTAX_ERROR, "REPLICATION FACTOR must be >= 0")
                    elif self.accept_kw("size"):
                        self.accept_op("=")
                        self.literal()  # sizes are not modeled; accepted for compatibility
                    else:
                        raise self.error("REPLICATION FACTOR or SIZE")
                    if not self.accept_op(","):
                        break
                self.expect_op(")")
            return CreateCluster(name, replicas)
        raise self.error("TABLE, INDEX, DEFAULT INDEX, MATERIALIZED VIEW or CLUSTER")

    def column(self) -> Column:
        name = self.ident("a column name")
        tok = self.peek()
        type_ = _TYPES.get(tok.text.lower()) if tok.kind == "id" else None
        if type_ is None:
            raise self.error(f"a column type ({', '.join(sorted(set(_TYPES)))})")
        self.i += 1
        return Column(name, type_)

    def in_cluster(self) -> str | None:
        if self.accept_kw("in", "cluster"):
            return self.ident("a cluster name")
        return None

    def drop(self) -> Statement:
        kinds = (
            (("table",), DropTable),
            (("index",), DropIndex),
            (("materialized", "view"), DropMaterializedView),
            (("cluster",), DropCluster),
        )
        for words, make in kinds:
            if self.accept_kw(*words):
                if_exists = self.accept_kw("if", "exists")
                return make(self.ident(), if_exists)
        raise self.error("TABLE, INDEX, MATERIALIZED VIEW or CLUSTER")

    def insert(self) -> Insert:
        table = self.ident("a table name")
        columns = self.ident_list() if self.peek().text == "(" else None
        self.expect_kw("values")
        rows = [self.row()]
        while self.accept_op(","):
            rows.append(self.row())
        return Insert(table, tuple(rows), columns)

    def row(self) -> tuple[Value, ...]:
        self.expect_op("(")
        values = [self.literal()]
        while self.accept_op(","):
            values.append(self.literal())
        self.expect_op(")")
        return tuple(values)

    def update(self) -> Update:
        table = self.ident("a table name")
        self.expect_kw("set")
        assignments = [self.assignment()]
        while self.accept_op(","):
            assignments.append(self.assignment())
        return Update(table, tuple(assignments), self.where())

    def assignment(self) -> Assignment:
        column = self.ident("a column name")
        self.expect_op("=")
        if (
            self.peek().kind in ("id", "qid")
            and not self.is_kw("true")
            and not self.is_kw("false")
            and not self.is_kw("null")
        ):
            source = self.ident()
            if source != column:
                raise SqlError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    f"SET {column} = {source} …: only `{column} = {column} ± n` is supported",
                )
            if self.accept_op("+"):
                return Assignment(column, add=self.integer())
            if self.accept_op("-"):
                return Assignment(column, add=-self.integer())
            return Assignment(column, add=0)
        return Assignment(column, value=self.literal())

    def select(self) -> Select:
        columns: tuple[str, ...] | None = None
        count = False
        if self.accept_op("*"):
            pass
        elif self.is_kw("count") and self.peek(1).text == "(":
            self.i += 2
            self.expect_op("*")
            self.expect_op(")")
            count = True
        else:
            names = [self.ident("*, count(*) or a column name")]
            while self.accept_op(","):
                names.append(self.ident("a column name"))
            columns = tuple(names)
        self.expect_kw("from")
        source = self.ident("a table, index or view name")
        return Select(source, columns, count, self.where())

    def subscribe(self) -> Subscribe:
        """`SUBSCRIBE [TO] name [WITH (opt [= bool], …)] [AS OF n] [UP TO n]`,
        Materialize's order; the options are SNAPSHOT and PROGRESS."""
        self.accept_kw("to")
        table = self.ident("a table name")
        options = {"snapshot": True, "progress": False}
        if self.accept_kw("with"):
            self.expect_op("(")
            while True:
                name = self.peek().word
                if name not in options:
                    raise self.error("SNAPSHOT or PROGRESS")
                self.i += 1
                value: Value = True
                if self.accept_op("=") or self.peek().word in ("true", "false"):
                    value = self.literal()
                if not isinstance(value, bool):
                    raise SqlError(SqlState.SYNTAX_ERROR, f"{name.upper()} takes true or false, got {value!r}")
                options[name] = value
                if not self.accept_op(","):
                    break
            self.expect_op(")")
        as_of = self.timestamp() if self.accept_kw("as", "of") else None
        up_to = self.timestamp() if self.accept_kw("up", "to") else None
        return Subscribe(table, options["snapshot"], options["progress"], as_of, up_to)

    def timestamp(self) -> int:
        tok = self.peek()
        if tok.kind != "num":
            raise self.error("a timestamp (a non-negative integer)")
        self.i += 1
        return int(tok.text)

    # --- constant queries (no FROM) ------------------------------------------

    def constant_ahead(self) -> bool:
        tok = self.peek()
        return (
            tok.kind in ("num", "str")
            or (tok.kind == "op" and tok.text in ("-", "("))
            or self.is_kw("true")
            or self.is_kw("false")
            or self.is_kw("null")
        )

    def select_constant(self) -> SelectConstant:
        values: list[Value] = []
        names: list[str] = []
        while True:
            values.append(self.expression())
            names.append(self.ident("a column alias") if self.accept_kw("as") else "?column?")
            if not self.accept_op(","):
                break
        if self.is_kw("from"):
            raise SqlError(
                SqlState.FEATURE_NOT_SUPPORTED,
                f"constant expressions with FROM are not supported (position {self.peek().pos + 1})",
            )
        return SelectConstant(tuple(values), tuple(names))

    def expression(self) -> Value:
        """`term (('+' | '-') term)*`, folded; arithmetic on integers only."""
        value = self.term()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.peek()
            self.i += 1
            value = _arith(op, value, self.term())
        return value

    def term(self) -> Value:
        value = self.factor()
        while self.peek().kind == "op" and self.peek().text == "*":
            op = self.peek()
            self.i += 1
            value = _arith(op, value, self.factor())
        return value

    def factor(self) -> Value:
        tok = self.peek()
        if self.accept_op("("):
            value = self.expression()
            self.expect_op(")")
            return value
        if self.accept_op("-"):
            return _arith(tok, 0, self.factor())
        return self.literal()

    def where(self) -> Predicate:
        if not self.accept_kw("where"):
            return Predicate()
        terms = [self.comparison()]
        while self.accept_kw("and"):
            terms.append(self.comparison())
        return Predicate(tuple(terms))

    def comparison(self) -> Comparison:
        column = self.ident("a column name")
        for op in _COMPARISONS:
            if self.accept_op(op):
                return Comparison(column, "<>" if op == "!=" else op, self.literal())
        raise self.error("a comparison (=, <>, <, <=, >, >=)")


# --- rendering: the inverse of `parse`, for traces and property tests -------------


def render(stmt: Statement) -> str:
    """SQL text that `parse` maps back to `stmt` (names are quoted when needed)."""
    match stmt:
        case CreateTable(name, columns, if_not_exists):
            cols = ", ".join(f"{_name(c.name)} {c.type.value}" for c in columns)
            return f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{_name(name)} ({cols})"
        case CreateIndex(name, on, columns, cluster):
            cols = f" ({', '.join(map(_name, columns))})" if columns else ""
            return f"CREATE INDEX {_name(name)}{_cluster(cluster)} ON {_name(on)}{cols}"
        case CreateMaterializedView(name, query, cluster):
            return f"CREATE MATERIALIZED VIEW {_name(name)}{_cluster(cluster)} AS {render(query)}"
        case CreateCluster(name, replicas):
            return f"CREATE CLUSTER {_name(name)} (REPLICATION FACTOR = {replicas})"
        case DropTable(name, if_exists):
            return f"DROP TABLE {_if_exists(if_exists)}{_name(name)}"
        case DropIndex(name, if_exists):
            return f"DROP INDEX {_if_exists(if_exists)}{_name(name)}"
        case DropMaterializedView(name, if_exists):
            return f"DROP MATERIALIZED VIEW {_if_exists(if_exists)}{_name(name)}"
        case DropCluster(name, if_exists):
            return f"DROP CLUSTER {_if_exists(if_exists)}{_name(name)}"
        case Insert(table, rows, columns):
            cols = f" ({', '.join(map(_name, columns))})" if columns is not None else ""
            values = ", ".join("(" + ", ".join(map(sql_literal, row)) + ")" for row in rows)
            return f"INSERT INTO {_name(table)}{cols} VALUES {values}"
        case Update(table, assignments, where):
            sets = ", ".join(_assignment(a) for a in assignments)
            return f"UPDATE {_name(table)} SET {sets}{_where(where)}"
        case Delete(table, where):
            return f"DELETE FROM {_name(table)}{_where(where)}"
        case Select(source, columns, count, where):
            what = (
                "count(*)" if count else "*" if columns is None else ", ".join(map(_name, columns))
            )
            return f"SELECT {what} FROM {_name(source)}{_where(where)}"
        case Subscribe(table, snapshot, progress, as_of, up_to):
            opts = [o for o, on in (("SNAPSHOT = false", not snapshot), ("PROGRESS", progress)) if on]
            with_ = f" WITH ({', '.join(opts)})" if opts else ""
            bounds = ("" if as_of is None else f" AS OF {as_of}") + ("" if up_to is None else f" UP TO {up_to}")
            return f"SUBSCRIBE TO {_name(table)}{with_}{bounds}"
        case SelectConstant(values, names):
            return "SELECT " + ", ".join(
                sql_literal(v) + ("" if n == "?column?" else f" AS {_name(n)}") for v, n in zip(values, names, strict=True)
            )
    raise TypeError(f"not a statement: {stmt!r}")


def _arith(op: _Tok, a: Value, b: Value) -> Value:
    """Folds `a op b`; NULL propagates, as in SQL; anything but integers is 42804."""
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int) or not isinstance(b, int):
        raise SqlError(
            SqlState.DATATYPE_MISMATCH,
            f"operator {op.text} needs integers, got {a!r} and {b!r} at position {op.pos + 1}",
        )
    return a + b if op.text == "+" else a - b if op.text == "-" else a * b


_PLAIN_NAME: Final = re.compile(r"[a-z_][a-z0-9_]*")


def _name(name: str) -> str:
    if _PLAIN_NAME.fullmatch(name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


#: Words the parser reads as keywords where a name could also stand.
_RESERVED: Final = frozenset(
    {"true", "false", "null", "in", "on", "as", "from", "where", "and", "set", "values", "if", "to"}
)


def _cluster(cluster: str | None) -> str:
    return f" IN CLUSTER {_name(cluster)}" if cluster is not None else ""


def _if_exists(flag: bool) -> str:
    return "IF EXISTS " if flag else ""


def _assignment(a: Assignment) -> str:
    if a.add is None:
        return f"{_name(a.column)} = {sql_literal(a.value)}"
    sign = "+" if a.add >= 0 else "-"
    return f"{_name(a.column)} = {_name(a.column)} {sign} {abs(a.add)}"


def _where(p: Predicate) -> str:
    if not p.terms:
        return ""
    return " WHERE " + " AND ".join(
        f"{_name(t.column)} {t.op} {sql_literal(t.value)}" for t in p.terms
    )
