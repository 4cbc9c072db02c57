"""Latency percentiles from one running sum over the counts are hdrh's own
values, for recorded histograms and for decoded ones (what a worker sends)."""

from __future__ import annotations

from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.load.loadgen import LevelResult, new_histogram, values_at_percentiles

# Latencies in µs as the load generator records them: 1 µs to an hour.
_VALUES = st.lists(st.integers(min_value=1, max_value=3_600_000_000), max_size=300)
_PERCENTILES = st.lists(
    st.one_of(st.sampled_from([0.0, 50.0, 99.0, 99.9, 100.0]), st.floats(min_value=0.0, max_value=100.0)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80)
@given(_VALUES, _PERCENTILES, st.booleans())
def test_values_at_percentiles_are_hdrhs(values: list[int], percentiles: list[float], decoded: bool) -> None:
    h = new_histogram()
    for v in values:
        h.record_value(v)
    if decoded:
        h = HdrHistogram.decode(h.encode())
    assert values_at_percentiles(h, percentiles) == [h.get_value_at_percentile(q) for q in percentiles]


def test_a_level_result_reads_several_at_once() -> None:
    r = LevelResult(concurrency=1)
    for seconds in (0.001, 0.002, 0.002, 0.010):
        r.add(seconds, None)
    hdrh = [r.histogram.get_value_at_percentile(q) / 1000.0 for q in (50, 99)]
    assert r.percentiles_ms((50, 99)) == [r.percentile_ms(50), r.percentile_ms(99)] == hdrh
    assert hdrh[0] < hdrh[1]
    assert LevelResult(concurrency=1).percentiles_ms((50, 99)) == [0.0, 0.0]
