"""Real mode's timers (`sim.compare.timer`, `TimerRealized`): the stock loop
wakes no earlier than its selector's granularity, and a profile's `[timer]`
makes virtual mode round the latencies real mode realizes as timers."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from sim.compare.timer import PROBE_S, probe_timer, selector_granularity_s
from sim.load.latency_profile import load_profile
from sim.model.unmeasured import REAL_MODE_TIMERS
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import Constant, TimerRealized

if TYPE_CHECKING:
    from pathlib import Path

    from sim.runtime.core import Runtime


@pytest.mark.parametrize(
    ("ms", "expected_ms"),
    [(0.1, 1.13), (0.5, 1.13), (1.0, 1.13), (1.2, 2.13), (2.0, 2.13), (0.0, 0.0)],
)
def test_timer_realized_rounds_up_to_the_granule_then_overshoots(ms: float, expected_ms: float) -> None:
    d = TimerRealized(Constant(ms / 1000), 0.001, 0.00013)
    assert d.sample(random.Random(0)) * 1000 == pytest.approx(expected_ms)
    assert d.to_dict() == Constant(ms / 1000).to_dict()


def test_without_granularity_only_the_overshoot_is_added() -> None:
    assert TimerRealized(Constant(0.0003), 0.0, 0.0001).sample(random.Random(0)) == pytest.approx(0.0004)


def test_the_probe_measures_the_stock_loop() -> None:
    async def probe(rt: Runtime) -> dict[str, object]:
        return await probe_timer(samples=20)

    got = run(probe, virtual=False)
    assert got["n"] == 20
    assert got["granularity_ms"] == selector_granularity_s() * 1000
    # An idle loop's sleep never ends before its timeout, rounded as the selector rounds it.
    floor = max(PROBE_S, selector_granularity_s()) * 1000
    assert isinstance(got["median_ms"], float)
    assert got["median_ms"] >= floor * 0.99
    assert isinstance(got["overshoot_ms"], float)
    assert got["overshoot_ms"] >= 0


def _profile(tmp_path: Path, timer: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(f'[latency."oracle.pg"]\nkind = "constant"\nms = 1.0\n\n{timer}')
    return p


def test_a_profiles_timer_rounds_exactly_the_timer_latencies(tmp_path: Path) -> None:
    model = load_profile(_profile(tmp_path, "[timer]\ngranularity_ms = 1.0\novershoot_ms = 0.1\n"))
    for name in REAL_MODE_TIMERS:
        d = model.distribution(name)
        assert isinstance(d, TimerRealized), name
        assert d.sample(random.Random(0)) >= 0.0011
    assert model.distribution("oracle.pg") == Constant(0.001)


@pytest.mark.parametrize(
    "timer",
    ["[timer]\ngranularity_ms = 1.0\n", "[timer]\ngranularity_ms = -1\novershoot_ms = 0.1\n",
     '[timer]\ngranularity_ms = "1"\novershoot_ms = 0.1\n', "[timer]\ngranularity_ms = 1\novershoot_ms = 0\nx = 1\n"],
)
def test_a_bad_timer_table_is_refused(tmp_path: Path, timer: str) -> None:
    with pytest.raises(InvalidUsage, match=r"\[timer\]"):
        load_profile(_profile(tmp_path, timer))


def test_only_latencies_slept_one_timer_each_are_rounded() -> None:
    """The replica's CPU (a peek, and its rows: summed, then held on its
    pool) is not a timer of its own; rounding a per-row draw up to a
    millisecond would charge a millisecond per row."""
    assert {"replica.command", "replica.response", "controller.catalog_feed", "frontend.pgwire"} == set(
        REAL_MODE_TIMERS
    )
