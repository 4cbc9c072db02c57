"""`.hgrm` files: the mean and deviation computed in one pass are hdrh's own,
float for float, so the files are the same as with hdrh's slow walk."""

from __future__ import annotations

from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.compare.hgrm import hgrm_text, mean_and_stddev
from sim.load.loadgen import new_histogram

# Latencies in µs as the load generator records them: 1 µs to an hour.
_VALUES = st.lists(st.integers(min_value=1, max_value=3_600_000_000), max_size=300)


@settings(max_examples=60)
@given(_VALUES, st.booleans())
def test_mean_and_stddev_are_hdrhs(values: list[int], decoded: bool) -> None:
    h = new_histogram()
    for v in values:
        h.record_value(v)
    if decoded:  # what a worker process sends (sim.compare.runner)
        h = HdrHistogram.decode(h.encode())
    assert mean_and_stddev(h) == (h.get_mean_value(), h.get_stddev())


def test_the_footer_states_them() -> None:
    h = new_histogram()
    for v in (100, 200, 200, 5_000, 70_000):
        h.record_value(v)
    text = hgrm_text(h)
    mean, std = h.get_mean_value() / 1000, h.get_stddev() / 1000
    assert f"#[Mean    = {mean:12.3f}, StdDeviation   = {std:12.3f}]" in text
    assert "Total count    =            5]" in text


def test_an_empty_histogram_has_zeros() -> None:
    assert mean_and_stddev(new_histogram()) == (0.0, 0.0)
