"""The `Runtime`: time, randomness, modeled latency and modeled CPU, passed
down explicitly; `run` runs a program on the virtual or the stock loop."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import gc
import hashlib
import math
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar, final

import sniffio

from sim.runtime.cpu import CorePool, Hold
from sim.runtime.errors import InvalidUsage
from sim.runtime.events import OFF, EventLog, runtime_log
from sim.runtime.interrupts import guard
from sim.runtime.latency import Constant, LatencyModel
from sim.runtime.loop import VirtualEventLoop, wake
from sim.runtime.patches import get_running_loop
from sim.runtime.schedule import parse_schedule

__all__ = ["ProcessClock", "Runtime", "WallClock", "run", "running_virtual_time"]

T = TypeVar("T")

#: A wall clock in milliseconds since the Unix epoch (a one-method seam).
WallClock = Callable[[], int]


# --- one process's wall clock -------------------------------------------------------------


@final
class ProcessClock:
    """What one simulated process believes the wall time is: the true wall
    clock, unless a time fault (`sim.nemesis`, issue 38) stepped, slowed or
    stopped it.

    A reading is `seen + rate * (true - since)` floored to a millisecond, with
    `since` the true time of the last change and `seen` the reading then;
    untouched, it is the true clock itself. Each change is told the true time
    at which it happens (`Runtime.true_wall_ms()`), never reads a clock of its
    own, so a virtual run stays a function of its seed. Every Runtime derived
    from one shares its clock (one process, one clock); `Runtime.with_clock`
    gives a process a clock of its own.
    """

    def __init__(self) -> None:
        self._true = True  # the fast path: no fault ever touched it
        self._since = 0
        self._seen = 0.0
        self._rate = 1.0
        self.changes = 0

    def read(self, true_ms: int) -> int:
        """This process's reading when the true wall clock reads `true_ms`."""
        if self._true:
            return true_ms
        return math.floor(self._seen + self._rate * (true_ms - self._since))

    @property
    def moved(self) -> bool:
        """A fault stepped or slowed it since it was made or last reset."""
        return not self._true

    @property
    def rate(self) -> float:
        """Milliseconds this clock advances per true millisecond (0: stopped)."""
        return self._rate

    def offset_ms(self, true_ms: int) -> int:
        """How far ahead of the true clock this one reads (negative: behind)."""
        return self.read(true_ms) - true_ms

    def step(self, by_ms: int, *, now_ms: int) -> None:
        """Jumps the reading by `by_ms` (negative: backwards) at true time `now_ms`."""
        self._anchor(now_ms)
        self._seen += by_ms

    def set_rate(self, rate: float, *, now_ms: int) -> None:
        """From true time `now_ms` on, the clock advances `rate` ms per true ms
        (0: it stands still; below 1: it runs slow).

        Raises:
            InvalidUsage: a negative or non-finite rate (a clock never runs backwards).
        """
        if not (math.isfinite(rate) and rate >= 0):
            raise InvalidUsage(f"a clock's rate must be finite and >= 0, got {rate}")
        self._anchor(now_ms)
        self._rate = rate

    def reset(self) -> None:
        """Back to the true clock (what an NTP step does), from either side."""
        self._true, self._since, self._seen, self._rate = True, 0, 0.0, 1.0
        self.changes += 1

    def _anchor(self, now_ms: int) -> None:
        if self._true:
            self._seen = float(now_ms)
        else:
            self._seen += self._rate * (now_ms - self._since)
        self._since = now_ms
        self._true = False
        self.changes += 1



# --- Runtime ----------------------------------------------------------------------------


@final
class Runtime:
    """Clock, seeded randomness, latency and CPU models, passed down explicitly.

    Works on either loop: on `VirtualEventLoop` the clock is virtual and the wall
    clock starts at the loop's epoch; on any other loop both are real. A wall
    clock may be injected (tests of the oracle's wall-clock tracking). `wall_ms`
    reads it through `clock`, this process's own (see `ProcessClock`).

    Args:
        seed: seeds `rng`; `derive` gives sub-components their own streams.
        latency: the latency model `delay` samples from (default: all zero).
        wall_clock: overrides the true wall clock (`true_wall_ms`).
        clock: this process's clock (default: a fresh one, reading true time).
        events: where the components' structured events go, bound to `seed`
            (`sim.runtime.events`; default: nowhere, at the cost of one
            attribute test per decision point).
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: LatencyModel | None = None,
        wall_clock: WallClock | None = None,
        clock: ProcessClock | None = None,
        events: EventLog = OFF,
        _name: str = "",
    ) -> None:
        self.seed = seed
        self.name = _name
        self.rng = random.Random(_stream_seed(seed, _name))
        self.latency = latency if latency is not None else LatencyModel(default=Constant(0.0))
        self._wall_clock = wall_clock
        self.clock = clock if clock is not None else ProcessClock()
        self.events = events.bind(seed=seed) if events.on else events

    def derive(self, name: str) -> Runtime:
        """A Runtime sharing clocks and models, with an independent RNG stream named
        `name`, so one component's draws never shift another's."""
        full = f"{self.name}/{name}" if self.name else name
        return Runtime(seed=self.seed, latency=self.latency, wall_clock=self._wall_clock, clock=self.clock,
                       events=self.events, _name=full)

    def with_clock(self, clock: ProcessClock) -> Runtime:
        """This Runtime read through `clock`: a simulated process of its own,
        whose wall clock a time fault moves without moving any other's. Its
        random stream is this one's very object, so the draws of a run that
        moves no clock interleave exactly as before."""
        view = copy.copy(self)
        view.clock = clock
        return view

    def with_events(self, events: EventLog) -> Runtime:
        """This Runtime emitting through `events` (e.g. with the configuration
        bound), sharing everything else, its random stream's very object too."""
        view = copy.copy(self)
        view.events = events
        return view

    # Clock.

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        # Not asyncio.get_running_loop(): CPython 3.11's makes a getpid()
        # system call, and the clock is read tens of times per statement.
        return get_running_loop()

    @property
    def virtual(self) -> bool:
        """True on the virtual-time loop. Needs a running loop."""
        return isinstance(self._loop(), VirtualEventLoop)

    def now(self) -> float:
        """Monotonic seconds (the loop's clock)."""
        return get_running_loop().time()

    def now_ms(self) -> float:
        return self._loop().time() * 1000

    def now_ns(self) -> int:
        return round(self._loop().time() * 1e9)

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch as this process's clock reads them:
        the clock the timestamp oracle tracks and persist's leases run on."""
        return self.clock.read(self.true_wall_ms())

    def true_wall_ms(self) -> int:
        """Milliseconds since the Unix epoch, whatever any process's clock reads
        (what a time fault measures its changes against)."""
        if self._wall_clock is not None:
            return self._wall_clock()
        loop = self._loop()
        if isinstance(loop, VirtualEventLoop):
            return loop.epoch_ms + math.floor(loop.time() * 1000)
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        """Sleeps `seconds` of (real or virtual) time; 0 (or less) just yields.

        `asyncio.sleep`'s steps, inline: the same future and timer, so the same
        order of events, without its generic path (a simulated statement
        sleeps about ten times; issue 20)."""
        if not seconds > 0:  # also NaN, as asyncio.sleep(max(0.0, nan)) did
            await asyncio.sleep(0)
            return
        loop = get_running_loop()
        future = loop.create_future()
        timer = loop.call_at(loop.time() + seconds, wake, future)
        try:
            await future
        finally:
            timer.cancel()

    def call_after(self, seconds: float, fn: Callable[..., object], *args: object) -> asyncio.TimerHandle:
        """Calls `fn(*args)` once `seconds` of (real or virtual) time have passed
        (on the next loop turn for 0, less, or NaN, as `sleep`). A modeled hop
        whose far end is a plain function is one timer this way, where a task
        sleeping through it costs a future and a task step more (issue 20)."""
        loop = get_running_loop()
        return loop.call_at(loop.time() + (seconds if seconds > 0 else 0.0), fn, *args)

    async def delay(self, name: str) -> float:
        """Sleeps for one sample of the latency named `name`; returns it (seconds)."""
        seconds = self.latency.distribution(name).sample(self.rng)
        await self.sleep(seconds)
        return seconds

    def sample(self, name: str) -> float:
        """One sample of the latency named `name`, without sleeping."""
        return self.latency.distribution(name).sample(self.rng)

    def unique_hex(self, bits: int = 128) -> str:
        """A random id that no other process draws: from `rng` on the virtual
        loop (so traces stay identical), from the OS otherwise — two real-mode
        processes started with the same seed must never pick the same writer
        id or blob key on shared stores."""
        if bits < 1:
            raise ValueError(f"bits must be >= 1, got {bits}")
        try:
            on_virtual = isinstance(self._loop(), VirtualEventLoop)
        except RuntimeError:  # no running loop: real time
            on_virtual = False
        value = self.rng.getrandbits(bits) if on_virtual else _SYSTEM_RANDOM.getrandbits(bits)
        return f"{value:0{(bits + 3) // 4}x}"

    # CPU.

    def core_pool(self, cores: int, name: str) -> CorePool:
        return CorePool(self, cores, name)

    def cpu(self, seconds: float, pool: CorePool) -> Coroutine[Any, Any, None]:
        """Spends `seconds` of modeled CPU on one core of `pool` (waiting for a free
        core first); await it.

        In real time the stock loop's timers are about a millisecond coarse (a
        50 µs sleep takes over 1 ms here), so small costs are owed to the pool
        and slept off together once `REAL_CPU_QUANTUM_S` is owed (`CorePool.owe`): the total
        stays right, each cost is not inflated twentyfold. In virtual time it
        is `pool.hold(seconds)` itself, not a coroutine around it: every layer
        of coroutines is passed again on each suspension and resumption of the
        statement that awaits it (issue 20).
        """
        if self.virtual:
            return pool.hold(seconds)
        return self._real_cpu(seconds, pool)

    async def _real_cpu(self, seconds: float, pool: CorePool) -> None:
        async with pool.core():
            owed = pool.owe(seconds)
            if owed > 0:
                await self.sleep(owed)
            else:
                await asyncio.sleep(0)

    def cpu_then(self, seconds: float, pool: CorePool, then: Callable[[], None]) -> Hold:
        """`cpu(seconds, pool)` by loop callbacks, then `then()`, for a component
        that is a chain of callbacks rather than a task; `cancel()` on the result
        stops it. In real time small costs are owed to the pool as in `cpu`."""
        return pool.hold_then(seconds, then, owed=not self.virtual)

#: The OS's randomness, for ids that must be unique across processes (real mode).
_SYSTEM_RANDOM: Final = random.SystemRandom()


def _stream_seed(seed: int, name: str) -> int:
    # hashlib, not hash(): str hashes change with PYTHONHASHSEED.
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def run(
    main: Callable[[Runtime], Coroutine[Any, Any, T]],
    *,
    seed: int = 0,
    virtual: bool = True,
    latency: LatencyModel | None = None,
    wall_clock: WallClock | None = None,
    schedule: str = "fifo",
    events: EventLog | None = None,
) -> T:
    """Runs `main(runtime)` to completion on a fresh virtual or stock loop.

    Args:
        events: the Runtime's event log; default: over the sink the command
            installed (`sim.runtime.events.installed`), or nowhere.
        schedule: the virtual loop's scheduling policy (`sim.runtime.schedule`;
            its randomness is the seed's `schedule` stream). The stock loop
            runs asyncio's own order: any other policy is an error there.

    Raises:
        InvalidUsage: an unknown policy, or one other than fifo for the stock loop.
    """
    rt = Runtime(seed=seed, latency=latency, wall_clock=wall_clock,
                 events=events if events is not None else runtime_log())
    policy = parse_schedule(schedule)
    if not virtual and policy != "fifo":
        raise InvalidUsage(f"schedule {policy!r} needs the virtual loop; real mode runs asyncio's own order")
    factory: Callable[[], asyncio.AbstractEventLoop] = (
        functools.partial(_watched, schedule=policy, seed=seed)
        if virtual
        else asyncio.new_event_loop
    )
    collections = _fewer_collections() if virtual else contextlib.nullcontext()
    depth = len(_RUNNING)
    try:
        with collections, asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_declared_asyncio(guard(main(rt))))
    finally:
        del _RUNNING[depth:]


#: The virtual loops `run` is running (one, unless runs nest on threads):
#: what a progress line reads, from its own thread, never the schedule.
_RUNNING: Final[list[VirtualEventLoop]] = []


def _watched(*, schedule: str, seed: int) -> VirtualEventLoop:
    loop = VirtualEventLoop(schedule=schedule, seed=seed)
    _RUNNING.append(loop)
    return loop


def running_virtual_time() -> float | None:
    """The virtual time, in seconds, of the simulation `run` runs now in
    this process (the latest started), or None if none runs. Safe to call
    from another thread (a progress line): it reads one float."""
    running = list(_RUNNING)
    return running[-1].time() if running else None


#: The youngest generation's threshold during a virtual run (CPython's default
#: is 700 allocations of tracked objects).
_VIRTUAL_GC_THRESHOLD: Final = 50_000


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Runs the block with the cyclic collector's first threshold raised.

    A virtual run allocates dozens of tracked objects per simulated statement
    (coroutines, futures, handles, history rows) and keeps many of them (the
    history, persist state), so at the default threshold the collector runs
    every few statements and rescans what accumulated. Raising it gave
    1.01-1.06x on the six pairs of `bench/simspeed.py` and 1.05x on its
    sweep (issue 20; n = 3 rounds, both trees in one run). Cycles are still collected,
    only in larger batches; the collector never affects the schedule. The
    previous thresholds are restored afterwards: `run` is library code and
    the process is the caller's."""
    before = gc.get_threshold()
    gc.set_threshold(_VIRTUAL_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def _declared_asyncio(main: Coroutine[Any, Any, T]) -> T:
    """Awaits `main` with sniffio's context variable naming asyncio, which
    every task it starts inherits.

    anyio looks up its backend on nearly every call (a cancel scope, an
    event, a checkpoint); without the declaration each lookup asks asyncio
    for the running loop, and CPython 3.11 answers that with a getpid()
    system call: up to a tenth of a virtual run's time (issue 20)."""
    sniffio.current_async_library_cvar.set("asyncio")
    return await main

