"""Modeled latency: named distributions, drawn from a seeded stream."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:

    import random
    pass

__all__ = [
    'Constant',
    'Distribution',
    'Empirical',
    'LatencyModel',
    'LatencySpecError',
    'LogNormal',
    'TimerRealized',
    'Uniform',
]

# --- Latency model ----------------------------------------------------------------------


class LatencySpecError(ValueError):
    """A latency distribution or profile is malformed."""


class Distribution(ABC):
    """A distribution of durations in seconds; sampling draws only from `rng`."""

    @abstractmethod
    def sample(self, rng: random.Random) -> float:
        """Returns a duration >= 0 in seconds."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The spec `Distribution.from_dict` reads back (durations in ms)."""

    @abstractmethod
    def mean(self) -> float:
        """The mean duration in seconds (for reports and sanity checks)."""

    @staticmethod
    def from_dict(spec: Mapping[str, Any]) -> Distribution:
        """Parses `{"kind": "constant"|"uniform"|"lognormal"|"empirical", ...}`.

        Durations are in milliseconds: `ms`; `low_ms`, `high_ms`;
        `median_ms`, `sigma`; `samples_ms`.
        """
        kind = spec.get("kind")
        keys = set(spec) - {"kind"}
        expected: dict[str, set[str]] = {
            "constant": {"ms"},
            "uniform": {"low_ms", "high_ms"},
            "lognormal": {"median_ms", "sigma"},
            "empirical": {"samples_ms"},
        }
        if not isinstance(kind, str) or kind not in expected:
            raise LatencySpecError(
                f"unknown distribution kind {kind!r}; expected one of {', '.join(expected)}"
            )
        if keys != expected[kind]:
            raise LatencySpecError(
                f"{kind} distribution takes {sorted(expected[kind])}, got {sorted(keys)}"
            )
        try:
            if kind == "constant":
                return Constant(float(spec["ms"]) / 1000)
            if kind == "uniform":
                return Uniform(float(spec["low_ms"]) / 1000, float(spec["high_ms"]) / 1000)
            if kind == "lognormal":
                return LogNormal(float(spec["median_ms"]) / 1000, float(spec["sigma"]))
            samples = spec["samples_ms"]
            if isinstance(samples, (str, bytes)):  # iterable, but not a list of samples
                raise LatencySpecError(f"empirical samples_ms must be a list, got {samples!r}")
            return Empirical([float(s) / 1000 for s in samples])
        except (TypeError, ValueError) as exc:
            if isinstance(exc, LatencySpecError):
                raise
            raise LatencySpecError(f"bad {kind} distribution {dict(spec)!r}: {exc}") from exc


def _check_duration(name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise LatencySpecError(f"{name} must be a finite duration >= 0, got {value}")


@final
@dataclass(frozen=True)
class Constant(Distribution):
    seconds: float

    def __post_init__(self) -> None:
        _check_duration("constant", self.seconds)

    def sample(self, rng: random.Random) -> float:
        return self.seconds

    def mean(self) -> float:
        return self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "constant", "ms": self.seconds * 1000}


@final
@dataclass(frozen=True)
class Uniform(Distribution):
    low: float
    high: float

    def __post_init__(self) -> None:
        _check_duration("uniform low", self.low)
        _check_duration("uniform high", self.high)
        if self.high < self.low:
            raise LatencySpecError(f"uniform high {self.high} < low {self.low}")

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def mean(self) -> float:
        return (self.low + self.high) / 2

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "uniform", "low_ms": self.low * 1000, "high_ms": self.high * 1000}


@final
@dataclass(frozen=True)
class LogNormal(Distribution):
    """Log-normal with the given median (seconds) and shape `sigma`: the usual
    shape of a network round trip, with a long right tail."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _check_duration("lognormal median", self.median)
        if not math.isfinite(self.sigma) or self.sigma < 0:
            raise LatencySpecError(f"lognormal sigma must be >= 0, got {self.sigma}")

    def sample(self, rng: random.Random) -> float:
        if self.median == 0:
            return 0.0
        return rng.lognormvariate(math.log(self.median), self.sigma)

    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "lognormal", "median_ms": self.median * 1000, "sigma": self.sigma}


@final
@dataclass(frozen=True)
class Empirical(Distribution):
    """Draws uniformly from measured samples (e.g. from `coordsim calibrate`)."""

    samples: Sequence[float]

    def __post_init__(self) -> None:
        if not self.samples:
            raise LatencySpecError("empirical distribution needs at least one sample")
        for s in self.samples:
            _check_duration("empirical sample", s)
        object.__setattr__(self, "samples", tuple(self.samples))

    def sample(self, rng: random.Random) -> float:
        return self.samples[rng.randrange(len(self.samples))]

    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "empirical", "samples_ms": [s * 1000 for s in self.samples]}


@final
@dataclass(frozen=True)
class TimerRealized(Distribution):
    """A modeled delay as real mode realizes it: a timer of the stock asyncio
    loop, which wakes no earlier than the selector's timeout granularity
    allows and then `overshoot_s` late. CPython's epoll and poll selectors
    round every timeout up to whole milliseconds (`selectors.EpollSelector
    .select`: `math.ceil(timeout * 1e3) * 1e-3`), so on Linux a 0.1 ms sleep
    on an idle loop takes about 1.1 ms. Virtual mode uses this only to
    predict a real run, from a profile built from one (`coordsim calibrate
    --from` records the run's `[timer]`); the published system has no such
    floor. (The loop's own CPU costs already sleep in whole quanta:
    `sim.runtime.cpu.CorePool.owe`.)"""

    base: Distribution
    granularity_s: float
    overshoot_s: float

    def sample(self, rng: random.Random) -> float:
        d = self.base.sample(rng)
        if not d > 0:
            return d
        g = self.granularity_s
        rounded = math.ceil(d / g - 1e-9) * g if g > 0 else d
        return rounded + self.overshoot_s

    def mean(self) -> float:
        # Each draw rounds up by half a granule on average (the base spans many).
        return self.base.mean() + self.granularity_s / 2 + self.overshoot_s

    def to_dict(self) -> dict[str, Any]:
        # The profile's `[timer]` table carries the rounding; the latency stays the base's.
        return self.base.to_dict()


@final
class LatencyModel:
    """Named latency distributions, e.g. `"oracle.read_ts"` or `"replica.peek"`.

    A name without its own distribution falls back to the longest configured
    dotted prefix (`"oracle"` covers `"oracle.read_ts"`), then to `default`.
    """

    def __init__(
        self, distributions: Mapping[str, Distribution] | None = None, *, default: Distribution | None = None
    ) -> None:
        self._dists = dict(distributions or {})
        self._default = default
        # name -> its longest configured prefix's distribution (None: none).
        # The model never changes after construction, and names are resolved
        # several times per simulated statement.
        self._resolved: dict[str, Distribution | None] = {}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> LatencyModel:
        """Parses `{"default": {...}, "name": {...}, ...}` (see `Distribution.from_dict`)."""
        if not isinstance(spec, Mapping):
            raise LatencySpecError(f"a latency profile is a table of distributions, got {spec!r}")
        dists: dict[str, Distribution] = {}
        default: Distribution | None = None
        for name, sub in spec.items():
            if not isinstance(sub, Mapping):
                raise LatencySpecError(f"latency {name!r}: expected a table, got {sub!r}")
            try:
                dist = Distribution.from_dict(sub)
            except LatencySpecError as exc:
                raise LatencySpecError(f"latency {name!r}: {exc}") from exc
            if name == "default":
                default = dist
            else:
                dists[name] = dist
        return cls(dists, default=default)

    def to_dict(self) -> dict[str, Any]:
        out = {name: d.to_dict() for name, d in sorted(self._dists.items())}
        if self._default is not None:
            out["default"] = self._default.to_dict()
        return out

    def names(self) -> list[str]:
        return sorted(self._dists)

    def _configured(self, name: str) -> Distribution | None:
        """The distribution of `name`'s longest configured dotted prefix."""
        try:
            return self._resolved[name]
        except KeyError:
            pass
        key: str | None = name
        while key is not None and key not in self._dists:
            key = key.rsplit(".", 1)[0] if "." in key else None
        found = self._resolved[name] = None if key is None else self._dists[key]
        return found

    def configures(self, name: str) -> bool:
        """True iff `name` or one of its dotted prefixes has its own distribution
        (the default does not count)."""
        return self._configured(name) is not None

    def distribution(self, name: str) -> Distribution:
        """The distribution used for `name`; `LatencySpecError` if none applies."""
        found = self._configured(name)
        if found is not None:
            return found
        if self._default is not None:
            return self._default
        raise LatencySpecError(f"no latency configured for {name!r} and no default")

    def with_overrides(self, overrides: Mapping[str, Distribution]) -> LatencyModel:
        return LatencyModel({**self._dists, **overrides}, default=self._default)


