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

from sim.load import steady
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from sim.runtime.core import Runtime

__all__ = [
    "DEFAULT_DRAIN_S",
    "DEFAULT_LEVELS",
    "HostFigures",
    "LevelResult",
    "Moments",
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

#: Seconds after a window's end that its operations are waited for before
#: the rest count as censored: longer than any latency a healthy level shows
#: (real-mode updates at 256 clients reach a p99 of ~30 s), short enough that
#: a stuck level still ends.
DEFAULT_DRAIN_S: Final = 120.0


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
    None, `repeat` runs of `ops` operations each.

    Steady state only: `max_duration_s` lets a closed loop's window grow,
    up to that length, until the level passes the steady-state checks
    (`sim.load.steady`; None: never grow), and `drain_s` bounds how long
    after the window the operations it started are waited for before the
    rest are counted as censored."""

    warmup_s: float = 0.0
    duration_s: float | None = None
    ops: int | None = None
    repeat: int = 1
    max_duration_s: float | None = None
    drain_s: float = DEFAULT_DRAIN_S

    def __post_init__(self) -> None:
        if (self.duration_s is None) == (self.ops is None):
            raise InvalidUsage("a measurement window has either a duration or a number of operations")
        if self.ops is not None and self.warmup_s:
            raise InvalidUsage("a warm-up in seconds goes with a duration (fixed-ops runs warm up by operations)")
        if self.repeat < 1 or self.warmup_s < 0 or (self.duration_s is not None and self.duration_s <= 0):
            raise InvalidUsage(f"bad measurement window {self}")
        if self.drain_s <= 0 or (self.max_duration_s is not None and self.max_duration_s <= 0):
            raise InvalidUsage(f"bad measurement window {self}")


@final
@dataclass
class LevelResult:
    """What one measurement window produced. `elapsed_s` is in the run's clock
    (virtual or real seconds): the window's length; `errors` counts failed
    operations by code.

    Throughput counts operations that *complete* in the window (`ops`);
    latency counts every operation that *starts* in it (a closed loop's
    start, an open loop's intended start), each measured to its completion
    or, past the drain limit, counted in `censored` at its lower bound. So
    the histogram is not censored by the window's end (issue 33), and the
    two sets are the same operations in steady state."""

    concurrency: int
    ops: int = 0
    elapsed_s: float = 0.0
    histogram: HdrHistogram = field(default_factory=new_histogram)
    start_s: float = 0.0
    rate: float | None = None  # open loop: the target arrival rate
    errors_by_code: dict[str, int] = field(default_factory=dict)
    censored: int = 0
    #: Completions in each of `steady.SLICES` equal slices of the window.
    slices: list[int] = field(default_factory=lambda: [0] * steady.SLICES)
    #: Latency moments over the measured operations (seconds; Welford's
    #: running mean and sum of squared deviations, exact where the
    #: histogram is bucketed), and their least and greatest.
    latency: Moments = field(default_factory=lambda: Moments())
    #: Open loop: mean latency of the operations intended in each half.
    half_latency: tuple[Moments, Moments] = field(default_factory=lambda: (Moments(), Moments()))
    #: Real mode: how the host fared during the window (set by the runner).
    host: HostFigures | None = None

    @property
    def errors(self) -> int:
        return sum(self.errors_by_code.values())

    @property
    def measured(self) -> int:
        """Operations whose latency was recorded (censored ones included)."""
        return self.latency.n

    def add(self, seconds: float, code: str | None) -> None:
        """Counts one operation of `seconds` latency that also completed in
        the window (the fixed-operations runs, where the two sets coincide)."""
        self.measure(seconds, code)
        self.ops += 1

    def measure(self, seconds: float, code: str | None, *, censored: bool = False) -> None:
        """Records the latency of one operation started in the window;
        `censored`: it had not completed by the drain limit, and `seconds`
        is its lower bound."""
        _record(self.histogram, seconds)
        self.latency.add(seconds)
        if censored:
            self.censored += 1
        elif code is not None:
            self.errors_by_code[code] = self.errors_by_code.get(code, 0) + 1

    def complete(self, t: float) -> None:
        """Counts one operation that completed at `t`, inside the window."""
        self.ops += 1
        n = len(self.slices)
        self.slices[max(0, min(n - 1, int((t - self.start_s) / self.elapsed_s * n)))] += 1

    @property
    def throughput(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def littles_law_ratio(self) -> float | None:
        """Mean latency x throughput / clients: 1 for a closed loop in steady
        state (Little's law); None with nothing measured."""
        if not self.latency.n or self.concurrency < 1:
            return None
        return self.latency.mean * self.throughput / self.concurrency

    def percentile_ms(self, q: float) -> float:
        """The latency at percentile `q` (0-100) in milliseconds; 0 with no ops."""
        return self.percentiles_ms((q,))[0]

    def percentiles_ms(self, percentiles: Sequence[float]) -> list[float]:
        """`percentile_ms` of each of `percentiles`, from one pass over the counts."""
        if self.histogram.get_total_count() == 0:
            return [0.0 for _ in percentiles]
        return [float(v) / 1000.0 for v in values_at_percentiles(self.histogram, percentiles)]


@final
@dataclass
class Moments:
    """Count, mean, sum of squared deviations, least and greatest of a
    sample, updated one value at a time (Welford) and merged exactly (Chan
    et al.), so a level's mean and deviation over all passes are the same
    numbers as over the pooled operations."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    least: float = math.inf
    greatest: float = -math.inf

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)
        self.least = min(self.least, x)
        self.greatest = max(self.greatest, x)

    def merged(self, other: Moments) -> Moments:
        if not other.n:
            return Moments(self.n, self.mean, self.m2, self.least, self.greatest)
        if not self.n:
            return Moments(other.n, other.mean, other.m2, other.least, other.greatest)
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * other.n / n
        m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
        return Moments(n, mean, m2, min(self.least, other.least), max(self.greatest, other.greatest))

    @property
    def stdev(self) -> float:
        """The sample standard deviation (0 with fewer than two values)."""
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0


@final
@dataclass(frozen=True)
class HostFigures:
    """Real mode, one window: what limited the host. `own_cpu` is coordsim's
    process CPU over the window's wall time (one core is all one asyncio
    loop can use); `lag_mean_ms` / `lag_p99_ms` how late a 1 ms timer
    fired; `postgres_cores` the cores the embedded Postgres's processes
    used (None: not measurable, e.g. an external server); `host_cores` all
    cores busy on the machine, `usable_cores` the ones we may run on."""

    wall_s: float
    own_cpu: float
    lag_mean_ms: float
    lag_p99_ms: float
    postgres_cores: float | None
    host_cores: float | None
    usable_cores: int


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
                    ops=ops)
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
    pending: dict[int, float] | None = None,
) -> None:
    """Poisson arrivals at `rate` (gaps from `rt.rng`): `ops` of them, or those
    intended before `end` (no gap is drawn past the last, so the RNG stream
    the rest of the run shares is left as the arrivals found it),
    each on a free connection slot of `max_in_flight` (waiting for one when
    all are busy, which is the stall an open loop charges); `done(intended,
    code)` when each finishes. Returns when the last one has finished.
    `pending`, if given, holds every arrival not yet finished (a sequence
    number -> its intended start), so a drain limit can censor them."""
    slots = list(range(max_in_flight - 1, -1, -1))  # free connection slots, a stack
    freed = anyio.Event()
    seqs = [0] * max_in_flight

    async def one(slot: int, seq: int, intended: float) -> None:
        nonlocal freed
        try:
            k = seqs[slot]
            seqs[slot] += 1
            code = _code(await op(slot, k))
            if pending is None or pending.pop(seq, None) is not None:
                done(intended, code)
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
            if pending is not None:
                pending[issued] = intended
            wait = intended - rt.now()
            if wait > 0:
                await rt.sleep(wait)
            while not slots:
                await freed.wait()
            tg.start_soon(one, slots.pop(), issued, intended)


async def measure_closed(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    *,
    concurrency: int,
    window: Window,
) -> list[LevelResult]:
    """`window.repeat` samples of a closed loop of `concurrency` clients.

    Steady state: the clients run without pause through the warm-up and every
    window. An operation counts toward the throughput of the window it
    completes in, and its latency toward the window it starts in. When the
    last window ends the clients start nothing new, and every operation
    started in a window is waited for (the drain is exactly the completion
    of measured work; nothing is cancelled mid-statement, so the history
    stays clean), up to `window.drain_s`, after which the rest count as
    censored at their lower bound.

    With `window.max_duration_s`, a level that fails the steady-state checks
    of one pass (Little's law, window against latency, the two halves'
    throughput: `sim.load.steady`) is
    measured again, after a fresh warm-up, in a longer window
    (`steady.grown_length`: a trend, or one batch more in one half, weighs
    less in a longer window), until it passes or the window reaches the cap;
    the last attempt is returned, its windows' `elapsed_s` the length used.
    A level whose mean latency is so long that even the cap would be under
    `steady.WINDOW_OVER_LATENCY` of them is not grown: it cannot become
    steady, and is reported as it is."""
    if window.duration_s is None:
        assert window.ops is not None
        return [await closed_loop(rt, op, concurrency=concurrency, ops=window.ops) for _ in range(window.repeat)]
    if concurrency < 1:
        raise InvalidUsage(f"concurrency must be >= 1, got {concurrency}")
    length, warmup = window.duration_s, window.warmup_s
    while True:
        results = await _closed_windows(rt, op, concurrency, warmup, length, window.repeat, window.drain_s)
        cap = window.max_duration_s
        if cap is None or length >= cap:
            return results
        moments = Moments()
        for r in results:
            moments = moments.merged(r.latency)
        mean = moments.mean if moments.n else None
        ops = sum(r.ops for r in results)
        ratio = mean * ops / (length * window.repeat) / concurrency if mean is not None else None
        halves = [steady.Slices(tuple(r.slices), r.elapsed_s) for r in results]
        if not (steady.littles_note(ratio) or steady.window_note(length, mean)
                or steady.halves_note(halves, None)):
            return results
        if steady.window_note(cap, mean):
            return results  # not even the longest window would be long enough: growing costs, and cannot help
        length = steady.grown_length(length, mean, cap)
        # The clients drained: the queue refills at once (every client sends
        # again), and its first round trip through it takes one mean latency.
        warmup = max(window.warmup_s, mean or 0.0)


async def _closed_windows(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[str | bool | None]],
    concurrency: int,
    warmup: float,
    length: float,
    repeat: int,
    drain_s: float,
) -> list[LevelResult]:
    """One attempt of `measure_closed`: a warm-up, `repeat` windows of
    `length`, and the drain."""
    first = rt.now() + warmup
    end = first + length * repeat
    results = [LevelResult(concurrency, start_s=first + i * length, elapsed_s=length) for i in range(repeat)]
    running: dict[int, float] = {}  # client -> start of its measured operation in flight
    censored: set[int] = set()

    def at(t: float) -> LevelResult:
        return results[min(repeat - 1, int((t - first) / length))]

    async def client(c: int) -> None:
        k = 0
        while rt.now() < end:
            t0 = rt.now()
            measured = t0 >= first
            if measured:
                running[c] = t0
            code = _code(await op(c, k))
            t1 = rt.now()
            k += 1
            if first <= t1 < end:
                at(t1).complete(t1)
            if measured:
                del running[c]
                if c in censored:
                    censored.discard(c)  # counted at its lower bound already
                else:
                    at(t0).measure(t1 - t0, code)

    async def drain_limit() -> None:
        await rt.sleep(end + drain_s - rt.now())
        now = rt.now()
        for c, t0 in running.items():
            censored.add(c)
            at(t0).measure(now - t0, None, censored=True)

    async with anyio.create_task_group() as outer:
        outer.start_soon(drain_limit)
        async with anyio.create_task_group() as tg:
            for c in range(concurrency):
                tg.start_soon(client, c)
        outer.cancel_scope.cancel()
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

    An operation's latency belongs to the window of its intended start and
    runs from there (see `open_loop`); a window's throughput is the
    operations that complete in it over its length. Arrivals stop at the end
    of the last window and the ones intended before it are waited for, up to
    `window.drain_s`, after which the rest count as censored (at their lower
    bound). Never grown: an open loop's window does not change the offered
    load, and a queue that grows is reported as saturation instead."""
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
               for i in range(window.repeat)]
    pending: dict[int, float] = {}

    def at(t: float) -> LevelResult:
        return results[min(window.repeat - 1, int((t - first) / length))]

    def one(r: LevelResult, intended: float, seconds: float, code: str | None, *, censored: bool = False) -> None:
        r.measure(seconds, code, censored=censored)
        r.half_latency[intended >= r.start_s + length / 2].add(seconds)

    def done(intended: float, code: str | None) -> None:
        now = rt.now()
        if first <= now < end:
            at(now).complete(now)
        if intended >= first:
            one(at(intended), intended, now - intended, code)

    async def drain_limit() -> None:
        await rt.sleep(end + drain_s - rt.now())
        now = rt.now()
        for intended in pending.values():
            if intended >= first:
                one(at(intended), intended, now - intended, None, censored=True)
        pending.clear()  # what finishes later is not counted again

    drain_s = window.drain_s
    async with anyio.create_task_group() as outer:
        outer.start_soon(drain_limit)
        await _arrivals(rt, op, rate, max_in_flight, done, end=end, pending=pending)
        outer.cancel_scope.cancel()
    return results
