"""The `ts_oracle_*` metrics of seed 000: per operation started/succeeded/failed
counts, retries and a latency histogram; for batching, requests and backing calls.

`OracleMetrics` is the mutable recorder an oracle owns; `statistics()` returns a
frozen `OracleStatistics` snapshot of it. Latencies are measured on the
`Runtime` clock, so virtual runs report virtual latencies. When the Runtime's
event log is on (`sim.runtime.events`), each call ends in an `oracle.call`
event (operation, timeline, implementation, latency, retries, outcome) and
each retry is an `oracle.retry` event (its tier and SQLSTATE: a 40001 is one);
a call that finds its process fenced (a newer epoch in the timestamp store) is also a
`fenced` event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar, final

from sim.runtime.errors import Determinate, Fenced

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sim.runtime.core import Runtime
    from sim.runtime.events import EventLog

__all__ = ["OpStatistics", "OracleMetrics", "OracleStatistics", "Started"]

T = TypeVar("T")

# Latencies are recorded in microseconds, clamped to [1 µs, 10 min].
_HIST_MAX_US: Final = 600_000_000
# Log-linear buckets: values below 2**_SUB_BITS+1 exactly, above that 2**_SUB_BITS
# buckets per power of two (at most 1/16 = 6.25% relative error).
_SUB_BITS: Final = 4
_EXACT: Final = 1 << (_SUB_BITS + 1)


def _bucket(us: int) -> int:
    bits = us.bit_length()
    if bits <= _SUB_BITS + 1:
        return us
    shift = bits - _SUB_BITS - 1
    return _EXACT + (shift - 1) * (1 << _SUB_BITS) + ((us >> shift) - (1 << _SUB_BITS))


def _bucket_value(index: int) -> int:
    """The midpoint of bucket `index` (its exact value below `_EXACT`)."""
    if index < _EXACT:
        return index
    shift, sub = divmod(index - _EXACT, 1 << _SUB_BITS)
    shift += 1
    low = ((1 << _SUB_BITS) + sub) << shift
    return low + (1 << shift) // 2


@final
class _Histogram:
    """A latency histogram cheap enough to record on every oracle call (about a
    tenth of `hdrh`'s pure-Python `record_value`, which showed up in the batched
    read_ts profile): log-linear buckets in a dict."""

    __slots__ = ("counts", "max", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0

    def record(self, us: int) -> None:
        b = _bucket(us)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.total += 1
        if us > self.max:
            self.max = us

    def percentile(self, p: float) -> int:
        """The value at percentile `p` (0-100), within a bucket's precision."""
        if not self.total:
            return 0
        rank = max(1, math.ceil(self.total * p / 100))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(_bucket_value(b), self.max)
        return self.max


@final
@dataclass(frozen=True, slots=True)
class OpStatistics:
    """One operation's counters (`ts_oracle_<name>{op=…}`) and latency percentiles."""

    start_count: int = 0
    succeeded_count: int = 0
    failed_count: int = 0
    retry_count: int = 0
    #: Of `retry_count`: retries after a failure that definitely did not apply
    #: (e.g. SQLSTATE 40001, no connection) and after one that may have applied
    #: (a connection lost mid-statement, 57P01) — DESIGN.md §9's two tiers.
    retry_determinate_count: int = 0
    retry_indeterminate_count: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0


@final
@dataclass(frozen=True)
class OracleStatistics:
    """A snapshot of an oracle's metrics.

    `ops` maps an operation name (`write_ts`, `read_ts`, `peek_write_ts`,
    `apply_write`, and implementation-specific ones such as `stash_write_upper`,
    `confirm_leadership` or, behind batching, `read_ts_backing`) to its numbers.
    `batched_op_count` / `batches_count` are the batching oracle's requests and
    backing `read_ts()` calls (0 elsewhere).
    """

    implementation: str
    timeline: str
    ops: Mapping[str, OpStatistics] = field(default_factory=dict)
    batched_op_count: int = 0
    batches_count: int = 0

    def op(self, name: str) -> OpStatistics:
        """The numbers of operation `name` (all zero if it never ran)."""
        return self.ops.get(name, OpStatistics())

    @property
    def avg_batch_size(self) -> float:
        return self.batched_op_count / self.batches_count if self.batches_count else 0.0

    def metrics(self) -> dict[str, float]:
        """Prometheus-style samples, e.g. `ts_oracle_start_count{timeline="realtime",op="read_ts"}`."""
        out: dict[str, float] = {}
        for name in sorted(self.ops):
            s = self.ops[name]
            labels = f'{{timeline="{self.timeline}",op="{name}"}}'
            out[f"ts_oracle_start_count{labels}"] = s.start_count
            out[f"ts_oracle_succeeded_count{labels}"] = s.succeeded_count
            out[f"ts_oracle_failed_count{labels}"] = s.failed_count
            out[f"ts_oracle_retry_count{labels}"] = s.retry_count
            for tier, n in (
                ("determinate", s.retry_determinate_count),
                ("indeterminate", s.retry_indeterminate_count),
            ):
                tier_labels = f'{{timeline="{self.timeline}",op="{name}",tier="{tier}"}}'
                out[f"ts_oracle_retry_count{tier_labels}"] = n
            for q, v in (("0.5", s.p50_ms), ("0.95", s.p95_ms), ("0.99", s.p99_ms)):
                out[f'ts_oracle_seconds{{timeline="{self.timeline}",op="{name}",quantile="{q}"}}'] = (
                    v / 1000
                )
        if self.batches_count or self.batched_op_count:
            labels = f'{{timeline="{self.timeline}"}}'
            out[f"ts_oracle_batched_op_count{labels}"] = self.batched_op_count
            out[f"ts_oracle_batches_count{labels}"] = self.batches_count
        return out


@final
class _Op:
    __slots__ = ("failed", "hist", "name", "retries", "retries_det", "started", "succeeded")

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = 0
        self.succeeded = 0
        self.failed = 0
        self.retries = 0
        self.retries_det = 0
        self.hist = _Histogram()

    def snapshot(self) -> OpStatistics:
        def pct(p: float) -> float:
            return self.hist.percentile(p) / 1000.0

        return OpStatistics(
            start_count=self.started,
            succeeded_count=self.succeeded,
            failed_count=self.failed,
            retry_count=self.retries,
            retry_determinate_count=self.retries_det,
            retry_indeterminate_count=self.retries - self.retries_det,
            p50_ms=pct(50),
            p95_ms=pct(95),
            p99_ms=pct(99),
            max_ms=self.hist.max / 1000.0,
        )


#: A call `OracleMetrics.begin` counted: its operation's counters and its start.
Started: TypeAlias = "tuple[_Op, float]"


@final
class OracleMetrics:
    """Counters and latency histograms per operation, recorded on `rt`'s clock.

    Args:
        timeline, implementation: how the oracle's events name it.
        emit: report each call as an `oracle.call` event when `rt`'s event
            log is on (off for a wrapper whose calls its inner oracle reports).
    """

    def __init__(self, rt: Runtime, *, timeline: str = "", implementation: str = "", emit: bool = True) -> None:
        self._rt = rt
        self._ops: dict[str, _Op] = {}
        self.batched_op_count = 0
        self.batches_count = 0
        self._events: EventLog | None = (
            rt.events.bind(timeline=timeline, implementation=implementation) if emit and rt.events.on else None
        )

    def _op(self, name: str) -> _Op:
        op = self._ops.get(name)
        if op is None:
            op = self._ops[name] = _Op(name)
        return op

    async def observe(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Runs `fn()` counting a start and then a success (with its latency) or a
        failure (any exception, cancellation included) under `name`."""
        started = self.begin(name)
        try:
            result = await fn()
        except BaseException as exc:
            self.failed(started, error=exc)
            raise
        self.succeeded(started)
        return result

    def begin(self, name: str) -> Started:
        """Counts a start of `name` now; the call ends with `succeeded` or
        `failed` of the result. `observe` as three calls, for a path that
        must not add a coroutine layer of its own (issue 20)."""
        op = self._op(name)
        op.started += 1
        return op, self._rt.now()

    def succeeded(self, started: Started, *, retries: int = 0) -> None:
        """Counts the success of a call `begin` started, with its latency;
        `retries`: its attempts that failed and were repeated (event only)."""
        op, start = started
        op.succeeded += 1
        micros = round((self._rt.now() - start) * 1e6)
        op.hist.record(min(max(micros, 1), _HIST_MAX_US))
        if self._events is not None:
            self._events.emit("oracle.call", op=op.name, latency_ms=micros / 1000, retries=retries, ok=True)

    def failed(self, started: Started, *, retries: int = 0, error: BaseException | None = None) -> None:
        """Counts the failure of a call `begin` started (with `error`, if known)."""
        op, start = started
        op.failed += 1
        if self._events is not None:
            latency_ms = round((self._rt.now() - start) * 1e6) / 1000
            what = type(error).__name__ if error is not None else None
            self._events.emit("oracle.call", op=op.name, latency_ms=latency_ms, retries=retries, ok=False, error=what)
            if isinstance(error, Fenced):
                self._events.emit("fenced", component="oracle", step=op.name, reason=str(error))

    def retried(self, name: str, exc: BaseException) -> None:
        """Counts one retry of `name` (an attempt failed with `exc` and will be
        repeated), by tier: `Determinate` or not."""
        op = self._op(name)
        op.retries += 1
        determinate = isinstance(exc, Determinate)
        if determinate:
            op.retries_det += 1
        if self._events is not None:
            sqlstate = getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)
            self._events.emit(
                "oracle.retry", op=name, tier="determinate" if determinate else "indeterminate",
                sqlstate=sqlstate, error=str(exc),
            )

    def snapshot(self) -> dict[str, OpStatistics]:
        return {name: op.snapshot() for name, op in sorted(self._ops.items())}
