"""A row's canonical bytes are `json.dumps`'s, whatever path `encode_row`
takes (it has a fast one for all-integer rows), and decode back to the row;
a compiled one-comparison filter (with a fast path for `a = <int>`) keeps
what SQL's comparison keeps."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.transform import Comparison, Transform, _compare, decode_row, encode_row
from sim.runtime.errors import InvalidUsage

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text())


def _reference(row: tuple[object, ...]) -> bytes:
    return json.dumps(list(row), separators=(",", ":"), ensure_ascii=True).encode()


@given(st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=6).map(tuple))
def test_integer_rows_encode_as_json_does(row: tuple[int, ...]) -> None:
    assert encode_row(row) == _reference(row)
    assert decode_row(encode_row(row)) == row


@given(st.lists(_SCALARS, max_size=6).map(tuple))
def test_mixed_rows_encode_as_json_does(row: tuple[object, ...]) -> None:
    assert encode_row(row) == _reference(row)  # type: ignore[arg-type]
    assert decode_row(encode_row(row)) == row  # type: ignore[arg-type]


def test_bools_are_not_taken_for_integers() -> None:
    assert encode_row((1, True, 0, False)) == b"[1,true,0,false]"


@pytest.mark.parametrize("bad", [1.5, b"x", [1], object()])
def test_other_values_are_refused(bad: object) -> None:
    with pytest.raises(InvalidUsage, match="row values are int, text, bool or NULL"):
        encode_row((1, bad))  # type: ignore[arg-type]


_VALUES = [None, True, False, 0, 1, 2, -1, 2**70, "", "1", "a"]


@pytest.mark.parametrize("wanted", [v for v in _VALUES if v is not None])
@pytest.mark.parametrize("op", ["=", "<>", "<", "<=", ">", ">="])
def test_a_compiled_filter_keeps_what_the_comparison_says(op: str, wanted: object) -> None:
    """Every filter of one comparison, the point peek's `a = <int>` (which
    has a path of its own) among them, keeps exactly the rows SQL's
    comparison keeps: NULL and values of another type compare false."""
    keep = Transform((Comparison("a", op, wanted),)).compile(("a", "b")).keep  # type: ignore[arg-type]
    for v in _VALUES:
        assert keep((v, 0)) == _compare(v, op, wanted), (v, op, wanted)  # type: ignore[arg-type]
