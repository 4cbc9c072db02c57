"""Round trips to the real backends (the Postgres oracle, the timestamp and
catalog stashes, persist Consensus) as a real-mode run saw them, by kind, and
the retries their failures caused, so each compare cell reports what its
backends cost and how often SERIALIZABLE made them retry (issue 35).

A run installs a `BackendStats` in `BACKEND_STATS` (a context variable: the
tasks a deployment starts inherit it, so no object has to be threaded through
the coordinator); each Postgres client picks it up when it connects and records
a loop-clock pair and an append per statement, nothing more, so recording does
not perturb what it measures. Nothing is recorded when none is installed.

The same recorder takes the Python CPU each coordinator handler spent
(`BackendStats.timed`): the thread's CPU clock read around each step of the
handler's coroutine only, so the CPU of other tasks that run while it awaits
is not charged to it — this host's Python coordinator, which `coordsim
calibrate --from` turns into a profile's `[costs]`.
"""

from __future__ import annotations

import math
import time
from array import array
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

if TYPE_CHECKING:
    from collections.abc import Awaitable, Coroutine, Generator, Iterable, Mapping

__all__ = [
    "BACKEND_STATS",
    "BackendStats",
    "BackendWindow",
    "HandlerStats",
    "KindStats",
    "Mark",
    "current_backend_stats",
]

T = TypeVar("T")

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
    cpu: Mapping[str, tuple[int, float]] = field(default_factory=dict)


@final
class BackendStats:
    """Samples (seconds) and retries per backend operation kind, e.g.
    `oracle.pg.read_ts`, `stash.confirm_leadership`, `catalog.stash.append`,
    `consensus.cas` (the names a latency profile uses where it has them)."""

    def __init__(self) -> None:
        self._samples: dict[str, array[float]] = {}
        self._retries: dict[tuple[str, str], int] = {}
        #: handler kind -> [calls, CPU seconds]
        self._cpu: dict[str, list[float]] = {}

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

    def handler_cpu(self, kind: str, seconds: float) -> None:
        """One call of coordinator handler `kind` that spent `seconds` of this thread's CPU."""
        acc = self._cpu.get(kind)
        if acc is None:
            acc = self._cpu[kind] = [0, 0.0]
        acc[0] += 1
        acc[1] += seconds

    def timed(self, kind: str, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """`coro`, its own CPU recorded as one call of handler `kind` when it
        ends, however it ends (see the module docstring); await it once."""
        return _Steps(coro, self, kind)

    def absorb(self, window: BackendWindow) -> None:
        """Adds what another process recorded (an adapter process's share of
        a run: `coordinator.process_adapters`)."""
        for kind, samples in window.samples.items():
            self._samples.setdefault(kind, array("d")).extend(samples)
        for key, n in window.retries.items():
            self._retries[key] = self._retries.get(key, 0) + n
        for kind, (n, t) in window.cpu.items():
            acc = self._cpu.setdefault(kind, [0, 0.0])
            acc[0] += n
            acc[1] += t

    def mark(self) -> Mark:
        return Mark({k: len(v) for k, v in self._samples.items()}, dict(self._retries),
                    {k: (int(n), t) for k, (n, t) in self._cpu.items()})

    def since(self, mark: Mark) -> BackendWindow:
        """What was recorded after `mark`."""
        samples = {k: v[mark.lengths.get(k, 0) :] for k, v in self._samples.items()}
        retries = {k: n - mark.retries.get(k, 0) for k, n in self._retries.items()}
        cpu = {k: (int(n) - mark.cpu.get(k, (0, 0.0))[0], t - mark.cpu.get(k, (0, 0.0))[1])
               for k, (n, t) in self._cpu.items()}
        return BackendWindow(
            {k: v for k, v in samples.items() if v}, {k: n for k, n in retries.items() if n},
            {k: c for k, c in cpu.items() if c[0]},
        )


@final
class _Steps(Generic[T]):
    """Drives a coroutine step by step as `await` would (`yield from`'s
    protocol: values sent and exceptions thrown go through), reading the
    thread's CPU clock around each step: what runs between the steps is
    other tasks' (about 2 µs per handler call here, bench/virtual_vs_real.py
    --overhead)."""

    __slots__ = ("_coro", "_kind", "_stats")

    def __init__(self, coro: Coroutine[Any, Any, T], stats: BackendStats, kind: str) -> None:
        self._coro, self._stats, self._kind = coro, stats, kind

    def __await__(self) -> Generator[Any, Any, T]:
        coro, clock = self._coro, time.thread_time
        send: Any = None
        thrown: BaseException | None = None
        cpu = 0.0
        try:
            while True:
                t0 = clock()
                try:
                    yielded = coro.send(send) if thrown is None else coro.throw(thrown)
                except StopIteration as stop:
                    cpu += clock() - t0
                    value: T = stop.value
                    return value
                except BaseException:
                    cpu += clock() - t0
                    raise
                cpu += clock() - t0
                try:
                    send, thrown = (yield yielded), None
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # a cancellation: passed on to the handler
                    send, thrown = None, exc
        finally:
            self._stats.handler_cpu(self._kind, cpu)


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
    #: The mean (ms): with the p50, what `coordsim calibrate --from` fits a
    #: log-normal to (a closed loop's throughput follows the mean).
    mean_ms: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return {"count": self.count, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "retries": self.retries,
                "retries_40001": self.retries_40001, "mean_ms": self.mean_ms}


@final
@dataclass(frozen=True)
class HandlerStats:
    """One coordinator handler kind in a cell (real mode): how many calls, and
    the Python CPU they spent in all (ms) and each on average (µs)."""

    kind: str
    count: int
    total_ms: float

    @property
    def mean_us(self) -> float:
        return round(self.total_ms * 1000 / self.count, 3) if self.count else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"count": self.count, "total_ms": self.total_ms, "mean_us": self.mean_us}


def _mean_ms(xs: list[float]) -> float | None:
    return round(math.fsum(xs) / len(xs) * 1000, 4) if xs else None


def _percentile_ms(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    return round(xs[max(0, math.ceil(len(xs) * p / 100) - 1)] * 1000, 4)


@final
@dataclass(frozen=True)
class BackendWindow:
    """The samples (seconds) and retries (by kind and SQLSTATE) of a span of a
    run, and the coordinator handlers' (calls, CPU seconds) by kind."""

    samples: Mapping[str, array[float]] = field(default_factory=dict)
    retries: Mapping[tuple[str, str], int] = field(default_factory=dict)
    cpu: Mapping[str, tuple[int, float]] = field(default_factory=dict)

    @staticmethod
    def merged(windows: Iterable[BackendWindow]) -> BackendWindow:
        samples: dict[str, array[float]] = {}
        retries: dict[tuple[str, str], int] = {}
        cpu: dict[str, tuple[int, float]] = {}
        for w in windows:
            for k, v in w.samples.items():
                samples.setdefault(k, array("d")).extend(v)
            for key, n in w.retries.items():
                retries[key] = retries.get(key, 0) + n
            for k, (n, t) in w.cpu.items():
                n0, t0 = cpu.get(k, (0, 0.0))
                cpu[k] = (n0 + n, t0 + t)
        return BackendWindow(samples, retries, cpu)

    def handlers(self) -> tuple[HandlerStats, ...]:
        """Per coordinator handler kind (sorted by name): calls and the Python CPU they spent."""
        return tuple(HandlerStats(k, n, round(t * 1000, 4)) for k, (n, t) in sorted(self.cpu.items()))

    def kinds(self) -> tuple[KindStats, ...]:
        """Per kind (sorted by name), the numbers a cell reports."""
        names = sorted({*self.samples, *(k for k, _ in self.retries)})
        out = []
        for name in names:
            xs = sorted(self.samples.get(name, ()))
            retries = sum(n for (k, _), n in self.retries.items() if k == name)
            out.append(KindStats(name, len(xs), _percentile_ms(xs, 50), _percentile_ms(xs, 99), retries,
                                 self.retries.get((name, _SERIALIZATION), 0), _mean_ms(xs)))
        return tuple(out)

    def group(self, prefix: str) -> KindStats:
        """Every kind starting with `prefix` together (e.g. all oracle statements),
        named `<prefix>*`."""
        xs = sorted(x for k, v in self.samples.items() if k.startswith(prefix) for x in v)
        retries = sum(n for (k, _), n in self.retries.items() if k.startswith(prefix))
        ser = sum(n for (k, code), n in self.retries.items() if k.startswith(prefix) and code == _SERIALIZATION)
        return KindStats(f"{prefix}*", len(xs), _percentile_ms(xs, 50), _percentile_ms(xs, 99), retries, ser,
                         _mean_ms(xs))
