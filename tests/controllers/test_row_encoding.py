"""A row's canonical bytes are `json.dumps`'s, whatever path `encode_row`
takes (it has a fast one for all-integer rows), and decode back to the row."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.transform import decode_row, encode_row
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
