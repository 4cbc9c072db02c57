"""Latency distributions and the latency model (`sim.runtime.latency`): specs
round-trip and are checked, samples stay in range, names fall back to their
dotted prefix, and a Runtime's delays are the samples it draws, seeded.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import TYPE_CHECKING

import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.latency import (
    Constant,
    Distribution,
    Empirical,
    LatencyModel,
    LatencySpecError,
    LogNormal,
    Uniform,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "constant", "ms": 1.1},
        {"kind": "uniform", "low_ms": 0.3, "high_ms": 2.7},
        {"kind": "lognormal", "median_ms": 12.345, "sigma": 0.6},
        {"kind": "empirical", "samples_ms": [0.1, 5.0, 2.5, 2.5]},
    ],
)
def test_distribution_round_trips(spec: Mapping[str, Any]) -> None:
    dist = Distribution.from_dict(spec)
    assert dist.to_dict() == spec
    assert Distribution.from_dict(dist.to_dict()) == dist


def test_distribution_values() -> None:
    assert Distribution.from_dict({"kind": "constant", "ms": 3}) == Constant(0.003)
    assert Distribution.from_dict({"kind": "uniform", "low_ms": 1, "high_ms": 2}) == Uniform(
        0.001, 0.002
    )
    assert Distribution.from_dict({"kind": "lognormal", "median_ms": 4, "sigma": 1}) == LogNormal(
        0.004, 1.0
    )
    assert Distribution.from_dict({"kind": "empirical", "samples_ms": [1, 2]}) == Empirical(
        (0.001, 0.002)
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "gaussian", "ms": 1}, "unknown distribution kind 'gaussian'"),
        ({"ms": 1}, "unknown distribution kind None"),
        ({"kind": ["constant"]}, "unknown distribution kind"),
        ({"kind": "constant"}, r"constant distribution takes \['ms'\], got \[\]"),
        ({"kind": "constant", "ms": 1, "sigma": 2}, r"got \['ms', 'sigma'\]"),
        ({"kind": "constant", "ms": -1}, "finite duration >= 0"),
        ({"kind": "constant", "ms": "soon"}, "bad constant distribution"),
        ({"kind": "constant", "ms": None}, "bad constant distribution"),
        ({"kind": "constant", "ms": math.inf}, "finite duration"),
        ({"kind": "uniform", "low_ms": 5, "high_ms": 1}, "uniform high 0.001 < low 0.005"),
        ({"kind": "uniform", "low_ms": math.nan, "high_ms": 1}, "finite duration"),
        ({"kind": "lognormal", "median_ms": 1, "sigma": -0.5}, "sigma must be >= 0"),
        ({"kind": "lognormal", "median_ms": -1, "sigma": 0.5}, "lognormal median"),
        ({"kind": "empirical", "samples_ms": []}, "at least one sample"),
        ({"kind": "empirical", "samples_ms": [1, -2]}, "empirical sample"),
        ({"kind": "empirical", "samples_ms": [1, "x"]}, "bad empirical distribution"),
        ({"kind": "empirical", "samples_ms": 5}, "bad empirical distribution"),
        ({"kind": "empirical", "samples_ms": "123"}, "must be a list"),
    ],
)
def test_bad_distribution_specs(spec: Mapping[str, Any], message: str) -> None:
    with pytest.raises(LatencySpecError, match=message):
        Distribution.from_dict(spec)


def test_bad_latency_profiles() -> None:
    with pytest.raises(LatencySpecError, match="table of distributions"):
        LatencyModel.from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(LatencySpecError, match="latency 'oracle': expected a table"):
        LatencyModel.from_dict({"oracle": 5})
    with pytest.raises(LatencySpecError, match="latency 'oracle': unknown distribution kind"):
        LatencyModel.from_dict({"oracle": {"kind": "fast"}})
    assert issubclass(LatencySpecError, ValueError)


def test_lognormal_median_matches_its_samples() -> None:
    dist = LogNormal(0.005, 0.8)
    rng = random.Random(1234)
    samples = [dist.sample(rng) for _ in range(20_001)]
    assert statistics.median(samples) == pytest.approx(0.005, rel=0.05)
    assert statistics.fmean(samples) == pytest.approx(dist.mean(), rel=0.05)
    assert min(samples) > 0
    assert LogNormal(0.0, 1.0).sample(rng) == 0.0


def test_samples_stay_in_range() -> None:
    rng = random.Random(5)
    uniform = Uniform(0.001, 0.002)
    assert all(0.001 <= uniform.sample(rng) <= 0.002 for _ in range(1000))
    empirical = Empirical([0.001, 0.004, 0.004])
    drawn = {empirical.sample(rng) for _ in range(1000)}
    assert drawn == {0.001, 0.004}
    assert empirical.mean() == pytest.approx(0.003)
    assert uniform.mean() == pytest.approx(0.0015)
    assert Constant(0.5).sample(rng) == 0.5 == Constant(0.5).mean()


def test_latency_model_falls_back_to_dotted_prefix_then_default() -> None:
    oracle, read_ts, default = Constant(0.001), Constant(0.002), Constant(0.003)
    model = LatencyModel({"oracle": oracle, "oracle.read_ts": read_ts}, default=default)
    assert model.distribution("oracle.read_ts") is read_ts
    assert model.distribution("oracle.read_ts.retry") is read_ts
    assert model.distribution("oracle.write_ts") is oracle
    assert model.distribution("oracle") is oracle
    assert model.distribution("oracles") is default
    assert model.distribution("replica.peek") is default
    assert model.distribution("") is default
    assert model.names() == ["oracle", "oracle.read_ts"]

    bare = LatencyModel({"oracle": oracle})
    with pytest.raises(LatencySpecError, match=r"no latency configured for 'replica\.peek'"):
        bare.distribution("replica.peek")

    faster = model.with_overrides({"oracle": Constant(0.0)})
    assert faster.distribution("oracle.write_ts") == Constant(0.0)
    assert faster.distribution("oracle.read_ts") is read_ts
    assert model.distribution("oracle.write_ts") is oracle  # unchanged


def test_latency_model_round_trips() -> None:
    spec = {
        "default": {"kind": "constant", "ms": 0.5},
        "oracle": {"kind": "lognormal", "median_ms": 2.0, "sigma": 0.4},
        "replica.peek": {"kind": "uniform", "low_ms": 1.0, "high_ms": 3.0},
    }
    model = LatencyModel.from_dict(spec)
    assert model.to_dict() == spec
    assert LatencyModel.from_dict(model.to_dict()).to_dict() == spec
    assert LatencyModel.from_dict({}).to_dict() == {}


def test_delay_sleeps_for_the_sample_it_returns() -> None:
    latency = LatencyModel({"net": Uniform(0.001, 0.01)})

    async def main(rt: Runtime) -> None:
        total = 0.0
        for _ in range(50):
            total += await rt.delay("net.rpc")
        assert rt.now() == pytest.approx(total, abs=1e-12)
        before = rt.now()
        assert 0.001 <= rt.sample("net") <= 0.01
        assert rt.now() == before  # sample() does not sleep

    run(main, seed=3, latency=latency)


def test_default_latency_is_zero() -> None:
    async def main(rt: Runtime) -> tuple[float, float]:
        return await rt.delay("anything.at.all"), rt.now()

    assert run(main) == (0.0, 0.0)


def test_same_seed_same_delays() -> None:
    latency = LatencyModel(default=LogNormal(0.002, 1.0))

    async def main(rt: Runtime) -> list[float]:
        return [await rt.delay("x") for _ in range(20)]

    assert run(main, seed=8, latency=latency) == run(main, seed=8, latency=latency)
    assert run(main, seed=8, latency=latency) != run(main, seed=9, latency=latency)
