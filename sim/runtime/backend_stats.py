"""Round trips to the real backends (the Postgres oracle, the timestamp and
catalog stashes, persist Consensus) as a real-mode run saw them, by kind, and
the retries their failures caused, so each compare cell reports what its
backends cost and how often SERIALIZABLE made them retry (issue 35).

A run installs a `BackendStats` in `BACKEND_STATS` (a context variable: the
tasks a deployment starts inherit it, so no object has to be threaded through
the coordinator); each Postgres client picks it up when it connects and records
a loop-clock pair and an append per statement, nothing more, so recording does
not perturb what it measures. Nothing is recorded when none is installed.
"""

from __future__ import annotations

import math
from array import array
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "BACKEND_STATS",
    "BackendStats",
    "BackendWindow",
    "KindStats",
    "Mark",
    "current_backend_stats",
]

#: The SQLSTATE counted apart: a serialization failure (what SERIALIZABLE adds).
_SERIALIZATION: Final = "40001"

#: The run's recorder, if any (see the module docstring).
BACKEND_STATS: ContextVar[BackendStats | None] = ContextVar("coordsim_backend_stats", default=None)


def current_backend_stats() -> BackendStats | None:
    """The recorder installed in this context (None: record nothing)."""
    return BACKEND_STATS.get()


@final
@dataclass(frozen=True)
class Mark:
    """Where the recorder stood at some moment: samples and retries per kind."""

    lengths: Mapping[str, int]
    retries: Mapping[tuple[str, str], int]


@final
class BackendStats:
    """Samples (seconds) and retries per backend operation kind, e.g.
    `oracle.pg.read_ts`, `stash.confirm_leadership`, `catalog.stash.append`,
    `consensus.cas` (the names a latency profile uses where it has them)."""

    def __init__(self) -> None:
        self._samples: dict[str, array[float]] = {}
        self._retries: dict[tuple[str, str], int] = {}

    def record(self, kind: str, seconds: float) -> None:
        """One successful round trip of `kind` that took `seconds`."""
        samples = self._samples.get(kind)
        if samples is None:
            samples = self._samples[kind] = array("d")
        samples.append(seconds)

    def retried(self, kind: str, sqlstate: str | None) -> None:
        """One failed attempt of `kind` that will be retried; `sqlstate` is the
        server's code (None: the connection failed, or no code)."""
        key = (kind, sqlstate or "other")
        self._retries[key] = self._retries.get(key, 0) + 1

    def mark(self) -> Mark:
        return Mark({k: len(v) for k, v in self._samples.items()}, dict(self._retries))

    def since(self, mark: Mark) -> BackendWindow:
        """What was recorded after `mark`."""
        samples = {k: v[mark.lengths.get(k, 0) :] for k, v in self._samples.items()}
        retries = {k: n - mark.retries.get(k, 0) for k, n in self._retries.items()}
        return BackendWindow(
            {k: v for k, v in samples.items() if v}, {k: n for k, n in retries.items() if n}
        )


@final
@dataclass(frozen=True)
class KindStats:
    """One kind's round trips in a cell: how many succeeded, their p50 and p99
    (ms, nearest rank over every sample), the retried failures, and how many
    of those were serialization failures (40001)."""

    kind: str
    count: int
    p50_ms: float | None
    p99_ms: float | None
    retries: int = 0
    retries_40001: int = 0

    def as_dict(self) -> dict[str, float | int | None]:
        return {"count": self.count, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "retries": self.retries,
                "retries_40001": self.retries_40001}  # fmt: skip


def _percentile_ms(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    return round(xs[max(0, math.ceil(len(xs) * p / 100) - 1)] * 1000, 4)


@final
@dataclass(frozen=True)
class BackendWindow:
    """The samples (seconds) and retries (by kind and SQLSTATE) of a span of a run."""

    samples: Mapping[str, array[float]] = field(default_factory=dict)
    retries: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @staticmethod
    def merged(windows: Iterable[BackendWindow]) -> BackendWindow:
        samples: dict[str, array[float]] = {}
        retries: dict[tuple[str, str], int] = {}
        for w in windows:
            for k, v in w.samples.items():
                samples.setdefault(k, array("d")).extend(v)
            for key, n in w.retries.items():
                retries[key] = retries.get(key, 0) + n
        return BackendWindow(samples, retries)

    def kinds(self) -> tuple[KindStats, ...]:
        """Per kind (sorted by name), the numbers a cell reports."""
        names = sorted({*self.samples, *(k for k, _ in self.retries)})
        out = []
        for name in names:
            xs = sorted(self.samples.get(name, ()))
            retries = sum(n for (k, _), n in self.retries.items() if k == name)
            out.append(KindStats(name, len(xs), _percentile_ms(xs, 50), _percentile_ms(xs, 99), retries,
                                 self.retries.get((name, _SERIALIZATION), 0)))  # fmt: skip
        return tuple(out)

    def group(self, prefix: str) -> KindStats:
        """Every kind starting with `prefix` together (e.g. all oracle statements),
        named `<prefix>*`."""
        xs = sorted(x for k, v in self.samples.items() if k.startswith(prefix) for x in v)
        retries = sum(n for (k, _), n in self.retries.items() if k.startswith(prefix))
        ser = sum(n for (k, code), n in self.retries.items() if k.startswith(prefix) and code == _SERIALIZATION)
        return KindStats(f"{prefix}*", len(xs), _percentile_ms(xs, 50), _percentile_ms(xs, 99), retries, ser)
