"""Load generators: a closed loop (N clients, each issuing its next operation
when the previous one returns) swept over concurrency levels, and an open loop
(Poisson arrivals at a target rate).

Steady state (DESIGN.md §10), the way pgbench `-T`, wrk2 and Materialize's
scalability framework measure: every client runs continuously; a warm-up is
discarded, then each window of `duration_s` gives one throughput sample
(completions in the window / its length) and feeds the latency histogram.
`Window.repeat` consecutive windows are supported, but `coordsim compare`
measures one window per level per pass and repeats whole passes on fresh
deployments (`sim.compare.runner`): consecutive windows share one deployment's state,
so their spread understates the noise between runs. The alternative, a fixed
number of operations, remains for tests and tiny runs.

The open loop measures every operation from its *intended* start, the moment
its arrival was scheduled, not from when a free connection finally sent it: a
system that stalls therefore pays for every operation that should have run
during the stall (coordinated omission, as wrk2 and HdrHistogram describe it).
Latencies go into HdrHistograms in microseconds (3 significant digits).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

import anyio
from hdrh.histogram import HdrHistogram

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from sim.runtime.core import Runtime

__all__ = [
    "DEFAULT_LEVELS",
    "LevelResult",
    "Window",
    "closed_loop",
    "measure_closed",
    "measure_open",
    "new_histogram",
    "open_loop",
    "ops_for_level",
    "values_at_percentiles",
]

#: The default concurrency sweep: 1, 2, 4, ..., 256.
DEFAULT_LEVELS: Final = tuple(2**i for i in range(9))

_MAX_US: Final = 3_600_000_000  # one hour


def new_histogram() -> HdrHistogram:
    """A latency histogram in microseconds, 1 µs to 1 h, 3 significant digits."""
    return HdrHistogram(1, _MAX_US, 3)


def values_at_percentiles(h: HdrHistogram, percentiles: Sequence[float]) -> list[int]:
    """`[h.get_value_at_percentile(q) for q in percentiles]`, the same values,
    from one running sum over the counts.

    hdrh walks the counts index by index with two method calls per index,
    once per percentile: about 1.5 ms per call on these histograms (22,528
    counts), which a compare run makes hundreds of times (issue 20). Here
    the running sum is formed in C and each percentile is a binary search in
    it: the first index whose sum reaches hdrh's target count, read out as
    hdrh does. Counts past a decoded histogram's payload read as zero, as in
    hdrh's `get_count_at_index` (held to hdrh by a property test)."""
    n = min(h.counts_len, h.encoder.payload.counts_len)
    running = list(itertools.accumulate(h.counts[:n]))
    out = []
    for q in percentiles:
        index = bisect.bisect_left(running, h.get_target_count_at_percentile(q))
        if index == n:
            out.append(0)  # the target is never reached: no counts
            continue
        value = h.get_value_from_index(index)
        out.append(h.get_highest_equivalent_value(value) if q else h.get_lowest_equivalent_value(value))
    return out


def _record(h: HdrHistogram, seconds: float) -> None:
    h.record_value(min(_MAX_US, max(1, round(seconds * 1e6))))


def ops_for_level(base: int, concurrency: int) -> int:
    """Operations measured at `concurrency`: `base` scaled with √concurrency,
    at least one per client (so more clients get a longer, steadier sample
    without the sweep's cost growing linearly)."""
    if base < 1 or concurrency < 1:
        raise InvalidUsage(f"ops base and concurrency must be >= 1, got {base}, {concurrency}")
    return max(concurrency, round(base * math.sqrt(concurrency)))


def _code(outcome: str | bool | None) -> str | None:
    """An operation's outcome: None when it succeeded, else the error's
    SQLSTATE-like code (a plain False, from a generator that knows no code,
    is "unknown")."""
    if outcome is None or outcome is True:
        return None
    return "unknown" if outcome is False else outcome


@final
@dataclass(frozen=True)
class Window:
    """How one concurrency level is measured: `warmup_s` discarded, then
    `repeat` windows of `duration_s` (steady state), or, with `duration_s`
    None, `repeat` runs of `ops` operations each."""

    warmup_s: float = 0.0
    duration_s: float | None = None
    ops: int | None = None
    repeat: int = 1

    def __post_init__(self) -> None:
        if (self.duration_s is None) == (self.ops is None):
            raise InvalidUsage("a measurement window has either a duration or a number of operations")
        if self.ops is not None and self.warmup_s:
            raise InvalidUsage("a warm-up in seconds goes with a duration (fixed-ops runs warm up by operations)")
        if self.repeat < 1 or self.warmup_s < 0 or (self.duration_s is not None and self.duration_s <= 0):
            raise InvalidUsage(f"bad measurement window {self}")


@final
@dataclass
class LevelResult:
    """What one measurement window produced. `elapsed_s` is in the run's clock
    (virtual or real seconds); `errors` counts failed operations by code."""

    concurrency: int
    ops: int = 0
    elapsed_s: float = 0.0
    histogram: HdrHistogram = field(default_factory=new_histogram)
    start_s: float = 0.0
    rate: float | None = None  # open loop: the target arrival rate
    errors_by_code: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(self.errors_by_code.values())

    def add(self, seconds: float, code: str | None) -> None:
        """Counts one completed operation of `seconds` latency."""
        _record(self.histogram, seconds)
        self.ops += 1
        if code is not None:
            self.errors_by_code[code] = self.errors_by_code.get(code, 0) + 1

    @property
    def throughput(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        """The latency at percentile `q` (0-100) in milliseconds; 0 with no ops."""
        return self.percentiles_ms((q,))[0]

    def percentiles_ms(self, percentiles: Sequence[float]) -> list[float]:
        """`percentile_ms` of each of `percentiles`, from one pass over the counts."""
        if self.histogram.get_total_count() == 0:
            return [0.0 for _ in percentiles]
        return [float(v) / 1000.0 for v in values_at_percentiles(self.histogram, percentiles)]


async def closed_loop(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    *,
    concurrency: int,
    ops: int,
) -> LevelResult:
    """Runs `ops` operations over `concurrency` clients, each starting its next
    operation as soon as its previous one returned. Clients get equal shares
    (the first `ops % concurrency` one more). Throughput = ops / elapsed."""
    if concurrency < 1 or ops < 1:
        raise InvalidUsage(f"concurrency and ops must be >= 1, got {concurrency}, {ops}")
    result = LevelResult(concurrency)

    async def client(c: int, share: int) -> None:
        for k in range(share):
            start = rt.now()
            code = _code(await op(c, k))
            result.add(rt.now() - start, code)

    result.start_s = rt.now()
    async with anyio.create_task_group() as tg:
        for c in range(concurrency):
            share = ops // concurrency + (1 if c < ops % concurrency else 0)
            if share:
                tg.start_soon(client, c, share)
    result.elapsed_s = rt.now() - result.start_s
    return result


async def open_loop(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    *,
    rate: float,
    ops: int,
    max_in_flight: int = 256,
) -> LevelResult:
    """Issues `ops` operations with Poisson arrivals at `rate` per second (gaps
    drawn from `rt.rng`), at most `max_in_flight` at once (the connection pool).

    Each latency runs from the operation's intended arrival time to its
    completion, so time spent waiting for a connection during a stall counts.
    The client number passed to `op` is its connection slot. Elapsed runs from
    the first intended arrival to the last completion.
    """
    if rate <= 0 or ops < 1 or max_in_flight < 1:
        raise InvalidUsage(f"rate, ops and max_in_flight must be positive, got {rate}, {ops}, {max_in_flight}")
    result = LevelResult(max_in_flight, rate=rate)
    result.start_s = rt.now()
    await _arrivals(rt, op, rate, max_in_flight, lambda intended, code: result.add(rt.now() - intended, code),
                    ops=ops)  # fmt: skip
    result.elapsed_s = rt.now() - result.start_s
    return result


async def _arrivals(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    rate: float,
    max_in_flight: int,
    done: Callable[[float, str | None], None],
    *,
    ops: int | None = None,
    end: float | None = None,
) -> None:
    """Poisson arrivals at `rate` (gaps from `rt.rng`): `ops` of them, or those
    intended before `end` (no gap is drawn past the last, so the RNG stream
    the rest of the run shares is left as the arrivals found it),
    each on a free connection slot of `max_in_flight` (waiting for one when
    all are busy, which is the stall an open loop charges); `done(intended,
    code)` when each finishes. Returns when the last one has finished."""
    slots = list(range(max_in_flight - 1, -1, -1))  # free connection slots, a stack
    freed = anyio.Event()
    seqs = [0] * max_in_flight

    async def one(slot: int, intended: float) -> None:
        nonlocal freed
        try:
            k = seqs[slot]
            seqs[slot] += 1
            done(intended, _code(await op(slot, k)))
        finally:
            slots.append(slot)
            freed.set()
            freed = anyio.Event()

    async with anyio.create_task_group() as tg:
        intended = rt.now()
        issued = 0
        while ops is None or issued < ops:
            intended += rt.rng.expovariate(rate)
            if end is not None and intended >= end:
                break
            issued += 1
            wait = intended - rt.now()
            if wait > 0:
                await rt.sleep(wait)
            while not slots:
                await freed.wait()
            tg.start_soon(one, slots.pop(), intended)


async def measure_closed(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    *,
    concurrency: int,
    window: Window,
) -> list[LevelResult]:
    """`window.repeat` samples of a closed loop of `concurrency` clients.

    Steady state: the clients run without pause through the warm-up and every
    window; an operation belongs to the window it completes in. When the last
    window ends the clients stop after their current operation (nothing is
    cancelled mid-statement, so the history stays clean)."""
    if window.duration_s is None:
        assert window.ops is not None
        return [await closed_loop(rt, op, concurrency=concurrency, ops=window.ops) for _ in range(window.repeat)]
    if concurrency < 1:
        raise InvalidUsage(f"concurrency must be >= 1, got {concurrency}")
    length = window.duration_s
    first = rt.now() + window.warmup_s
    end = first + length * window.repeat
    results = [LevelResult(concurrency, start_s=first + i * length, elapsed_s=length) for i in range(window.repeat)]

    async def client(c: int) -> None:
        k = 0
        while rt.now() < end:
            t0 = rt.now()
            code = _code(await op(c, k))
            t1 = rt.now()
            k += 1
            if first <= t1 < end:
                results[min(window.repeat - 1, int((t1 - first) / length))].add(t1 - t0, code)

    async with anyio.create_task_group() as tg:
        for c in range(concurrency):
            tg.start_soon(client, c)
    return results


async def measure_open(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    *,
    rate: float,
    max_in_flight: int,
    window: Window,
) -> list[LevelResult]:
    """`window.repeat` samples of an open loop at `rate` arrivals per second.

    An operation belongs to the window of its intended start and its latency
    runs from there (see `open_loop`); a window's throughput is its operations
    over its length. Arrivals stop at the end of the last window and the ones
    in flight finish."""
    if window.duration_s is None:
        assert window.ops is not None
        return [
            await open_loop(rt, op, rate=rate, ops=window.ops, max_in_flight=max_in_flight)
            for _ in range(window.repeat)
        ]
    if rate <= 0 or max_in_flight < 1:
        raise InvalidUsage(f"rate and max_in_flight must be positive, got {rate}, {max_in_flight}")
    length = window.duration_s
    first = rt.now() + window.warmup_s
    end = first + length * window.repeat
    results = [LevelResult(max_in_flight, rate=rate, start_s=first + i * length, elapsed_s=length)
               for i in range(window.repeat)]  # fmt: skip

    def done(intended: float, code: str | None) -> None:
        if intended >= first:
            results[min(window.repeat - 1, int((intended - first) / length))].add(rt.now() - intended, code)

    await _arrivals(rt, op, rate, max_in_flight, done, end=end)
    return results
