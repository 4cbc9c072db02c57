"""The streaming EDN reader (sim.history.edn.iter_forms, read_edn): what reading
text in chunks can get wrong — a token, a string or an escape split between
chunks, a line counted twice or not at all — and the syntax a Jepsen history
uses, each read the same whatever the chunking."""

from __future__ import annotations

import copy
import itertools
import pickle
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.history.edn import Keyword, Symbol, Tagged, dumps, iter_forms, kw, loads_all
from sim.history.export import _edn_order, history_to_edn
from sim.history.import_edn import history_from_edn, read_edn
from sim.history.model import HistoryError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Every kind of token, with strings holding what would end a token elsewhere.
SAMPLE = (
    '; a comment with "quotes", [brackets] and a :keyword\n'
    '{:index 0, :time 12, :type :invoke, :process 3, :f :add, :value ["t,1" 5]}\n'
    '{:s "say \\"hi\\", then ; go", :u "caf\\u00e9\\n", :raw "two\nlines", :e ""}\n'
    "[nil true false -7 +8 1.5 2N 3.25M :ns/kw sym #{} #{1 [2 #{3}]} {} ()]\n"
    "#_ {:gone [1 2]} {[1 2] {:nested {:deep #{:a :b}}}} ; trailing comment\n"
    '#inst "2020-01-01" #jepsen.history.Op{:index 9}\n'
    "(1 (2 (3)))"
)
EXPECTED = [
    {kw("index"): 0, kw("time"): 12, kw("type"): kw("invoke"), kw("process"): 3, kw("f"): kw("add"),
     kw("value"): ("t,1", 5)},
    {kw("s"): 'say "hi", then ; go', kw("u"): "café\n", kw("raw"): "two\nlines", kw("e"): ""},
    (None, True, False, -7, 8, 1.5, 2, 3.25, kw("ns/kw"), Symbol("sym"), frozenset(),
     frozenset({1, (2, frozenset({3}))}), {}, ()),
    {(1, 2): {kw("nested"): {kw("deep"): frozenset({kw("a"), kw("b")})}}},
    Tagged("inst", "2020-01-01"),
    Tagged("jepsen.history.Op", {kw("index"): 9}),
    (1, (2, (3,))),
]


def _chunked(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def test_the_sample_reads_as_expected() -> None:
    assert loads_all(SAMPLE) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 64, 4096])
def test_every_chunk_size_reads_the_same(size: int) -> None:
    chunks = [SAMPLE[i : i + size] for i in range(0, len(SAMPLE), size)]
    assert list(iter_forms(chunks)) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_cut_points_read_the_same(cuts: list[int]) -> None:
    assert list(iter_forms(_chunked(SAMPLE, cuts))) == EXPECTED


def test_a_cut_inside_an_escape_or_a_two_character_token() -> None:
    # Cut between a backslash and what it escapes, inside \u00e9, and in `#{`.
    text = '["a\\"b" "\\u00e9" #{1}]'
    for cut in range(1, len(text)):
        assert list(iter_forms([text[:cut], text[cut:]])) == [('a"b', "é", frozenset({1}))], cut


def test_a_long_line_without_newlines_is_read_in_pieces() -> None:
    # One event vector on a single line, strings holding `;` and `}`: the
    # reader may cut only after a bracket, never inside a string or comment.
    events = [{kw("index"): i, kw("value"): f"x;}}{i}"} for i in range(300)]
    text = dumps(tuple(events))
    assert "\n" not in text
    for size in (1, 13, 100, 10_000):
        chunks = [text[i : i + size] for i in range(0, len(text), size)]
        assert list(iter_forms(chunks)) == [tuple(events)]


def test_forms_are_yielded_before_the_input_ends() -> None:
    read = 0

    def chunks() -> Iterator[str]:
        nonlocal read
        for i in range(1000):
            read += 1
            yield f"{{:index {i}}}\n"

    forms = iter_forms(chunks())
    assert next(forms) == {kw("index"): 0}
    assert read < 10  # streaming: the first form came long before the last chunk
    assert sum(1 for _ in forms) == 999


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(max_size=8)
    | st.sampled_from([kw("a"), kw("read-ts"), kw("ns/x"), Symbol("s")]),
    lambda inner: st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.integers() | st.sampled_from([kw("k"), kw("v")]), inner, max_size=3)
    | st.frozensets(st.integers(), max_size=4),
    max_leaves=12,
)


@given(_VALUES, st.lists(st.integers(min_value=0, max_value=500), max_size=8))
def test_printed_values_read_back_whatever_the_chunking(value: Any, cuts: list[int]) -> None:
    text = dumps(value) + "\n" + dumps(value)
    assert list(iter_forms(_chunked(text, cuts))) == [value, value]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{:a 1}\n\n{:b ]", "EDN line 3: ']' closes '{'", id="mismatched-close"),
        pytest.param("[1 2]\n)", "EDN line 2: unexpected ')'", id="unexpected-close"),
        pytest.param("1\n2\n{:a\n[1 2]", "EDN line 3: '{' is never closed", id="never-closed"),
        pytest.param('1\n"abc\ndef', "EDN line 2: a string is never closed", id="open-string"),
        pytest.param("\n{:a 1\n :b}", "EDN line 2: a map needs an even number of forms", id="odd-map"),
        pytest.param("\n\n[\\c]", "EDN line 3: character literals are not supported", id="char-literal"),
        pytest.param("[1]\n#inst", "EDN line 2: a tag or #_ at the end of input", id="dangling-tag"),
        pytest.param("[#_]", "unexpected ']' after a tag or #_", id="discard-nothing"),
        pytest.param("\n{:a 1, :a 2}", "EDN line 2: a map with a duplicate key: :a", id="duplicate-key"),
        pytest.param("\n\n#{[1] [1]}", "EDN line 3: a set with a duplicate element: [1]", id="duplicate-element"),
        pytest.param("{{:a 1} 2}", "unhashable map key", id="map-as-key"),
        pytest.param(":", "empty keyword", id="empty-keyword"),
        pytest.param('"\\u12"', "bad unicode escape", id="short-unicode-escape"),
        pytest.param("[" * 600 + "]" * 600, "nested too deeply", id="deep"),
    ],
)
@pytest.mark.parametrize("size", [1, 3, 1 << 20])
def test_errors_name_the_same_line_whatever_the_chunking(text: str, message: str, size: int) -> None:
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    with pytest.raises(HistoryError) as err:
        list(iter_forms(chunks))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_keywords_are_one_object_per_name() -> None:
    a, as_string, as_symbol = loads_all(':read-ts "read-ts" read-ts')
    assert a is kw("read-ts") is Keyword("read-ts")
    assert len({a, as_string, as_symbol}) == 3  # a keyword is not a string, nor a symbol
    assert pickle.loads(pickle.dumps(a)) is a
    assert copy.deepcopy(a) is a
    with pytest.raises(AttributeError):
        a.name = "other"
    assert str(a) == ":read-ts"
    assert repr(a) == "Keyword('read-ts')"


def _event(value: str) -> str:
    return (
        f"{{:type :invoke, :process 0, :f :add, :value {value}, :time 0}}\n"
        f"{{:type :ok, :process 0, :f :add, :value {value}, :time 1}}\n"
    )


def test_a_tagged_value_where_a_history_needs_one_is_a_clear_error() -> None:
    with pytest.raises(HistoryError, match=r":index 1: expected a table name, got #inst \"2020\""):
        history_from_edn(loads_all(_event('#inst "2020"')))
    with pytest.raises(HistoryError, match=r"form 0 is not a map: #foo \{:a 1\}"):
        history_from_edn(loads_all("#foo {:a 1}"))


def test_jepsens_op_records_read_as_events() -> None:
    plain = _event('["t" 5]')
    records = "".join("#jepsen.history.Op" + line + "\n" for line in plain.splitlines())
    h1, _ = history_from_edn(loads_all(plain))
    h2, _ = history_from_edn(loads_all(records))
    assert list(h1.ops()) == list(h2.ops())
    assert h2.n == 1


@pytest.mark.parametrize("chunk_chars", [1, 7, 1 << 20])
def test_read_edn_in_small_chunks_reads_the_same_history(tmp_path: Path, chunk_chars: int) -> None:
    from sim.history.checker.generate import GenConfig, generate

    text = "; generated\n" + history_to_edn(generate(GenConfig(ops=300, p_mutate=0.2, p_info=0.05, seed=3)))
    whole, _ = history_from_edn(loads_all(text))
    p = tmp_path / "h.edn"
    p.write_text(text, encoding="utf-8")
    again, _ = read_edn(p, chunk_chars=chunk_chars)
    assert list(again.ops()) == list(whole.ops())
    assert whole.n == 300


def test_an_error_after_many_lines_names_the_file_and_line(tmp_path: Path) -> None:
    lines = [f'{{:index {i}, :type :invoke, :process {i}, :f :add, :value ["t" {i}]}}' for i in range(5000)]
    lines[4321] = lines[4321].replace(":value", ":value ]")
    p = tmp_path / "h.edn"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(HistoryError, match=r"h\.edn: EDN line 4322: '\]' closes '\{'"):
        read_edn(p, chunk_chars=997)


def test_a_file_that_stops_being_utf8_midway_is_unreadable(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_bytes(_event('["t" 1]').encode() * 2000 + b"\xff\xfe")
    with pytest.raises(HistoryError, match=r"h\.edn: unreadable"):
        read_edn(p, chunk_chars=4096)


# --- the line fast path (sim.history.edn._Lines) against the general reader ---------------


def _both(text: str, size: int = 1 << 20) -> tuple[Any, Any]:
    """What the reader with and without the line fast path make of `text`:
    the forms, or the error message."""
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    out: list[Any] = []
    for fast in (True, False):
        try:
            out.append(list(iter_forms(chunks, fast_lines=fast)))
        except HistoryError as exc:
            out.append(str(exc))
    return out[0], out[1]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{:a 1}\n{:a "x"}\n{:a 2}\n', id="a-string-where-the-shape-had-an-integer"),
        pytest.param('{:a "x"}\n{:a 1}\n', id="an-integer-where-the-shape-had-a-string"),
        pytest.param("#{1 2}\n#{3 4}\n#{5 5}\n", id="a-duplicate-in-a-learned-set"),
        pytest.param("{:a 1, :b 2}\n{:a 1, :a 2}\n", id="a-duplicate-key"),
        pytest.param("[1]\n[" + "9" * 101 + "]\n", id="an-integer-too-long"),
        pytest.param("[007 -5 +6 1.5 1N x9 :k7 9x]\n[008 -5 +6 1.5 1N x9 :k7 9x]\n", id="numbers-that-are-not-slots"),
        pytest.param('["a;b" "#{" "c" 1]\n["\\"" "#_" "x" 2]\n', id="specials-inside-strings"),
        pytest.param('[1 "two\nlines" 3]\n[1 "one" 3]\n', id="a-string-across-lines"),
        pytest.param("\n  \n; comment\n{:a 1} ; trailing\n{:a 2}\n,\n", id="blank-and-comment-lines"),
        pytest.param("{:a 1} {:a 2}\n{:a 3}\n", id="two-forms-on-a-line"),
        pytest.param("{:a\n1}\n{:a 2}\n", id="a-form-across-lines"),
        pytest.param('#_ {:a 1}\n{:a 2}\n#inst "x"\n{:a 3}\n', id="discards-and-tags"),
        pytest.param('{1 :a}\n{2 :a}\n{2 :a, 2 :b}\n', id="integers-as-keys"),
        pytest.param("[1 2\n[3 4]\n", id="unclosed"),
        pytest.param('{:a ""}\n{:a "x"}\n', id="empty-string"),
    ],
)
@pytest.mark.parametrize("size", [1, 5, 1 << 20])
def test_the_fast_path_reads_what_the_general_reader_reads(text: str, size: int) -> None:
    fast, general = _both(text * 3, size)
    assert fast == general


_LINE_VALUES = st.one_of(
    st.integers(min_value=-5, max_value=10**6),
    st.sampled_from(["", "t0", "a;b", 'q"q', "#{", "x\\y", "new\nline", "café"]),
    st.sampled_from([None, True, kw("ok"), kw("t0"), Symbol("s"), 1.5]),
)
_LINES = st.lists(
    st.one_of(
        st.dictionaries(st.sampled_from([kw("index"), kw("time"), kw("value"), kw("f")]),
                        st.one_of(_LINE_VALUES, st.lists(_LINE_VALUES, max_size=3).map(tuple),
                                  st.frozensets(st.integers(min_value=0, max_value=5), max_size=3)),
                        max_size=4),
        st.lists(_LINE_VALUES, max_size=4).map(tuple),
    ).map(dumps)
    | st.sampled_from(["", "; note", "{:a 1, :a 2}", "#{1 1}", "[1", "]", "#_ 5", "#t [1]"]),
    max_size=30,
)


@given(_LINES, st.integers(min_value=1, max_value=200))
def test_any_lines_read_the_same_with_and_without_the_fast_path(lines: list[str], size: int) -> None:
    # Repeated, so every shape is seen again after it is learned.
    fast, general = _both("\n".join(lines * 3) + "\n", size)
    assert fast == general


def test_the_fast_path_reads_a_generated_history_as_the_general_reader() -> None:
    from sim.history.checker.generate import GenConfig, generate

    text = history_to_edn(generate(GenConfig(ops=2000, p_mutate=0.2, p_info=0.05, seed=5)))
    fast, general = _both(text, 4096)
    assert isinstance(fast, list)
    assert len(fast) == 4000
    assert fast == general


@pytest.mark.parametrize("key", ["read-ts", "write-ts", "catalog-ts", "count", "time"])
def test_the_absent_marker_itself_is_refused_as_a_value(key: str) -> None:
    # -2**63 is what a history column stores for "absent": read from a file,
    # it must be refused, not taken for an absent annotation.
    text = (
        "{:type :invoke, :process 0, :f :read, :value nil, :time 0}\n"
        f"{{:type :ok, :process 0, :f :read, :value [set #{{}}], :{key} {-(2**63)}}}\n"
    )
    if key != "time":
        text = text.replace("#{}]", "#{}], :time 1")
    with pytest.raises(HistoryError, match=f":{key}: -9223372036854775808 is outside"):
        history_from_edn(loads_all(text))


def test_a_process_whose_operations_meet_at_one_instant_exports_in_order() -> None:
    from sim.history.model import ADD, CREATE_TABLE, OK, HistoryBuilder

    b = HistoryBuilder()
    # Op ids out of invoke order, and three operations of process 0 that meet
    # at t=5: each must complete before the process's next invoke is written.
    b.add_row(0, 0, ADD, "t", 5, 5, OK, (1,))
    b.add_row(1, 0, CREATE_TABLE, "t", 3, 5, OK)
    b.add_row(2, 0, ADD, "t", 5, 7, OK, (2,))
    b.add_row(3, 1, ADD, "t", 5, 6, OK, (3,))
    h = b.build()
    again, _ = history_from_edn(loads_all(history_to_edn(h)))

    def key(o: Any) -> tuple[Any, ...]:
        return (o.process, o.kind, o.invoke_ns, o.complete_ns, o.elements)

    assert sorted(map(key, again.ops())) == sorted(map(key, h.ops()))


def test_times_too_far_apart_to_pack_export_in_the_same_order() -> None:
    """The export packs (time, line code) into one int64 key when the times'
    span allows; a history spanning most of int64 takes the two-column sort,
    and its lines come out in the order the packed sort gives a shifted copy."""
    from sim.history.model import ADD, CREATE_TABLE, OK, HistoryBuilder

    def build(t0: int, step: int) -> Any:
        b = HistoryBuilder()
        b.add_row(0, 0, CREATE_TABLE, "t", t0, t0 + step, OK)
        for k in range(1, 40):  # process 1's next invoke meets its completion
            p, j = k % 3, k // 3 + 1
            b.add_row(k, p, ADD, "t", t0 + step * 2 * j, t0 + step * (2 * j + 1 + (p == 1)), OK, (k,))
        return b.build()

    wide, narrow = build(0, 2**55), build(0, 1)
    assert not _edn_order(wide, ())[0].packed
    assert _edn_order(narrow, ())[0].packed
    lines = [line.split(", ", 2)[2] for line in history_to_edn(wide).splitlines()]
    expect = [line.split(", ", 2)[2] for line in history_to_edn(narrow).splitlines()]
    assert lines == expect
    again, _ = history_from_edn(loads_all(history_to_edn(wide)))
    assert sorted(o.invoke_ns for o in again.ops()) == sorted(o.invoke_ns for o in wide.ops())
