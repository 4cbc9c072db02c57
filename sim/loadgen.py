"""Load generators: a closed loop (N clients, each issuing its next operation
when the previous one returns) swept over concurrency levels, and an open loop
(Poisson arrivals at a target rate).

The open loop measures every operation from its *intended* start, the moment
its arrival was scheduled, not from when a free connection finally sent it: a
system that stalls therefore pays for every operation that should have run
during the stall (coordinated omission, as wrk2 and HdrHistogram describe it).
Latencies go into HdrHistograms in microseconds (3 significant digits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

import anyio
from hdrh.histogram import HdrHistogram

from persist.location import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime import Runtime

__all__ = [
    "DEFAULT_LEVELS",
    "LevelResult",
    "closed_loop",
    "new_histogram",
    "open_loop",
    "ops_for_level",
]

#: The default concurrency sweep: 1, 2, 4, ..., 256.
DEFAULT_LEVELS: Final = tuple(2**i for i in range(9))

_MAX_US: Final = 3_600_000_000  # one hour


def new_histogram() -> HdrHistogram:
    """A latency histogram in microseconds, 1 µs to 1 h, 3 significant digits."""
    return HdrHistogram(1, _MAX_US, 3)


def _record(h: HdrHistogram, seconds: float) -> None:
    h.record_value(min(_MAX_US, max(1, round(seconds * 1e6))))


def ops_for_level(base: int, concurrency: int) -> int:
    """Operations measured at `concurrency`: `base` scaled with √concurrency,
    at least one per client (so more clients get a longer, steadier sample
    without the sweep's cost growing linearly)."""
    if base < 1 or concurrency < 1:
        raise InvalidUsage(f"ops base and concurrency must be >= 1, got {base}, {concurrency}")
    return max(concurrency, round(base * math.sqrt(concurrency)))


@final
@dataclass
class LevelResult:
    """What one measured level produced. `elapsed_s` is in the run's clock
    (virtual or real seconds)."""

    concurrency: int
    ops: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    histogram: HdrHistogram = field(default_factory=new_histogram)
    start_s: float = 0.0
    rate: float | None = None  # open loop: the target arrival rate

    @property
    def throughput(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        """The latency at percentile `q` (0-100) in milliseconds; 0 with no ops."""
        if self.histogram.get_total_count() == 0:
            return 0.0
        return float(self.histogram.get_value_at_percentile(q)) / 1000.0


async def closed_loop(
    rt: Runtime,
    op: Callable[[int, int], Awaitable[bool]],
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
            ok = await op(c, k)
            _record(result.histogram, rt.now() - start)
            result.ops += 1
            result.errors += 0 if ok else 1

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
    op: Callable[[int, int], Awaitable[bool]],
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
    slots = list(range(max_in_flight - 1, -1, -1))  # free connection slots, a stack
    freed = anyio.Event()
    start = rt.now()
    result.start_s = start
    seqs = [0] * max_in_flight

    async def one(slot: int, intended: float) -> None:
        nonlocal freed
        try:
            k = seqs[slot]
            seqs[slot] += 1
            ok = await op(slot, k)
            _record(result.histogram, rt.now() - intended)
            result.ops += 1
            result.errors += 0 if ok else 1
        finally:
            slots.append(slot)
            freed.set()
            freed = anyio.Event()

    async with anyio.create_task_group() as tg:
        intended = start
        for _ in range(ops):
            intended += rt.rng.expovariate(rate)
            wait = intended - rt.now()
            if wait > 0:
                await rt.sleep(wait)
            while not slots:
                await freed.wait()
            tg.start_soon(one, slots.pop(), intended)
    result.elapsed_s = rt.now() - start
    return result
