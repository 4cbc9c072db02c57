"""The simulation boundary: time, randomness, modeled latency and modeled CPU.

Every component receives a `Runtime` explicitly and reads the clock, draws
random numbers, sleeps for modeled latencies and spends modeled CPU only through
it. Whether time is real or virtual is a property of the event loop the program
runs on: the stock asyncio loop (real mode) or `VirtualEventLoop` (virtual
mode), whose clock jumps to the next timer whenever nothing is ready, so a
seeded program produces the same sequence of events on every run.

This module imports nothing from the rest of coordsim (DESIGN.md §3).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import random
import selectors
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn, Self, TypeVar, final

from sim.interrupts import guard

if TYPE_CHECKING:
    from types import TracebackType

    from anyio.abc import TaskGroup

__all__ = [
    "VIRTUAL_EPOCH_MS",
    "AsyncExitStack",
    "Constant",
    "CorePool",
    "CorePoolStatistics",
    "Distribution",
    "Empirical",
    "LatencyModel",
    "LatencySpecError",
    "LogNormal",
    "Runtime",
    "TaskOwner",
    "Uniform",
    "VirtualDeadlock",
    "VirtualEventLoop",
    "VirtualIOError",
    "WallClock",
    "run",
]

T = TypeVar("T")

#: A wall clock in milliseconds since the Unix epoch (a one-method seam).
WallClock = Callable[[], int]

#: Where virtual time starts on the wall clock: 2026-01-01T00:00:00Z. A fixed
#: value, so virtual runs (and their traces) are identical whenever they run.
VIRTUAL_EPOCH_MS: Final = 1_767_225_600_000


# --- The virtual-time event loop --------------------------------------------------------


class VirtualIOError(RuntimeError):
    """Real I/O (a socket, a thread, a subprocess) was attempted on the virtual loop.

    Virtual time cannot wait for the outside world: a real query would look like
    an instant timeout. Use the in-memory backends in virtual mode.
    """


class VirtualDeadlock(RuntimeError):
    """Every task waits, and no timer is scheduled that could ever wake one."""


class _VirtualTask(asyncio.Task[Any]):
    """A Task whose hash is its creation number instead of its memory address.

    anyio keeps tasks in sets and cancels them by iterating those sets; with
    address-based hashes that order (and so the order of events) would change
    from run to run under address-space randomization.
    """

    def __init__(self, coro: Coroutine[Any, Any, Any], *, loop: VirtualEventLoop, **kw: Any):
        # Set before the base init, which already puts the task in a WeakSet.
        self._coordsim_seq = loop._next_seq()
        super().__init__(coro, loop=loop, **kw)

    def __hash__(self) -> int:
        return self._coordsim_seq


class _VirtualFuture(asyncio.Future[Any]):
    """A Future with a deterministic hash, for the same reason as `_VirtualTask`."""

    def __init__(self, *, loop: VirtualEventLoop):
        self._coordsim_seq = loop._next_seq()
        super().__init__(loop=loop)

    def __hash__(self) -> int:
        return self._coordsim_seq


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never waits: it advances the loop's clock to the next timer."""

    def __init__(self) -> None:
        self._loop: VirtualEventLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> NoReturn:
        raise VirtualIOError(
            f"real I/O on the virtual-time loop (tried to watch {fileobj!r}); "
            "virtual mode must use the in-memory backends"
        )

    def unregister(self, fileobj: Any) -> NoReturn:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        assert loop is not None
        # An infinite timer (`anyio.sleep_forever()` is `asyncio.sleep(math.inf)`) can
        # never fire: waiting on it is a deadlock, not an endless run of capped jumps.
        if timeout is None or (timeout > 0 and math.isinf(loop._scheduled[0]._when)):  # type: ignore[attr-defined]
            raise VirtualDeadlock(
                "virtual-time deadlock: every task is waiting and no timer is scheduled "
                f"that could wake one ({len(asyncio.all_tasks(loop))} tasks alive)"
            )
        if timeout > 0:
            # _run_once already removed cancelled timers from the head of the heap,
            # so the head is the next event. Jump exactly onto it (float-safe), even
            # past asyncio's select cap: capped steps never reach a far-off timer.
            when: float = loop._scheduled[0]._when  # type: ignore[attr-defined]
            loop._virtual_now = max(loop._virtual_now, when)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}

    def close(self) -> None:
        pass


def _forbidden(name: str) -> Callable[..., NoReturn]:
    def method(self: VirtualEventLoop, *args: object, **kwargs: object) -> NoReturn:
        raise VirtualIOError(
            f"loop.{name}() is real I/O and is not allowed on the virtual-time loop; "
            "virtual mode must use the in-memory backends"
        )

    method.__name__ = name
    return method


class _InsertionOrderedSet(dict[Any, None]):
    """The set operations anyio's cancel scope uses on its child scopes, iterating in
    insertion order."""

    def add(self, item: Any) -> None:
        self[item] = None

    def remove(self, item: Any) -> None:
        del self[item]

    def discard(self, item: Any) -> None:
        self.pop(item, None)


_anyio_patched = False


def _patch_anyio() -> None:
    """Makes anyio's asyncio backend deterministic on the virtual loop (only there).

    1. anyio delivers a cancellation by iterating a `set` of child `CancelScope`s,
       which hash by memory address, so the order in which cancelled tasks wake
       would change from run to run. Child scopes are kept in entry order instead;
       `_InsertionOrderedSet` has the operations anyio uses.
    2. `anyio.to_thread.run_sync` runs a real thread whose result lands at whatever
       virtual time the loop has reached by then; it raises `VirtualIOError` instead,
       like `loop.run_in_executor`.

    If anyio's internals change, this does nothing, and tests/sim/test_runtime.py and
    test_runtime_determinism.py fail.
    """
    global _anyio_patched
    if _anyio_patched:
        return
    _anyio_patched = True
    try:
        from anyio._backends import _asyncio as anyio_asyncio
    except ImportError:
        return

    def on_virtual_loop() -> bool:
        return isinstance(asyncio.events._get_running_loop(), VirtualEventLoop)

    scope_cls: Any = getattr(anyio_asyncio, "CancelScope", None)
    if scope_cls is not None and hasattr(scope_cls, "_child_scopes"):
        original_init = scope_cls.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            if on_virtual_loop():
                self._child_scopes = _InsertionOrderedSet()

        scope_cls.__init__ = __init__

    backend_cls: Any = getattr(anyio_asyncio, "AsyncIOBackend", None)
    original_run_sync = getattr(backend_cls, "run_sync_in_worker_thread", None)
    if original_run_sync is not None:

        async def run_sync_in_worker_thread(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if on_virtual_loop():
                raise VirtualIOError(
                    "anyio.to_thread.run_sync() runs a real thread, which is not allowed on "
                    "the virtual-time loop; virtual mode must use the in-memory backends"
                )
            return await original_run_sync(*args, **kwargs)

        backend_cls.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """A deterministic asyncio loop whose `time()` is virtual.

    When no callback is ready, time jumps to the next scheduled timer instead of
    waiting, so simulated seconds cost microseconds. Timers, task groups, anyio
    cancel scopes, `asyncio.timeout` all work unchanged. Real I/O raises
    `VirtualIOError`; waiting forever raises `VirtualDeadlock`.

    Determinism: callbacks run in asyncio's FIFO order and timers in heap order,
    both of which depend only on the program; tasks and futures hash by creation
    number so set iteration cannot depend on memory addresses.
    """

    def __init__(self, *, epoch_ms: int = VIRTUAL_EPOCH_MS) -> None:
        _patch_anyio()
        self._virtual_now = 0.0
        self._seq = 0
        self.epoch_ms = epoch_ms
        selector = _VirtualSelector()
        super().__init__(selector)
        selector._loop = self

    # asyncio runs the timers due before time() + _clock_resolution. A fixed 1e-9 s
    # vanishes in float rounding once virtual time passes 2**24 s (~194 days): a due
    # timer would never run and the loop would spin. One ulp always counts.
    @property
    def _clock_resolution(self) -> float:
        return max(1e-9, math.ulp(self._virtual_now))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # BaseEventLoop.__init__ stores the real clock's resolution; not ours.

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def time(self) -> float:
        return self._virtual_now

    def create_task(  # type: ignore[override]
        self, coro: Coroutine[Any, Any, T], *, name: str | None = None, **kwargs: Any
    ) -> asyncio.Task[T]:
        self._check_closed()  # type: ignore[attr-defined]
        task = _VirtualTask(coro, loop=self, name=name, **kwargs)
        return task

    def create_future(self) -> asyncio.Future[Any]:
        return _VirtualFuture(loop=self)

    # No self-pipe: nothing outside the loop's own thread may wake it.
    def _make_self_pipe(self) -> None:
        pass

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    run_in_executor = _forbidden("run_in_executor")  # type: ignore[assignment]
    getaddrinfo = _forbidden("getaddrinfo")
    getnameinfo = _forbidden("getnameinfo")
    create_connection = _forbidden("create_connection")
    create_server = _forbidden("create_server")
    create_unix_connection = _forbidden("create_unix_connection")
    create_unix_server = _forbidden("create_unix_server")
    create_datagram_endpoint = _forbidden("create_datagram_endpoint")
    connect_accepted_socket = _forbidden("connect_accepted_socket")
    connect_read_pipe = _forbidden("connect_read_pipe")
    connect_write_pipe = _forbidden("connect_write_pipe")
    subprocess_exec = _forbidden("subprocess_exec")
    subprocess_shell = _forbidden("subprocess_shell")
    add_reader = _forbidden("add_reader")  # type: ignore[assignment]
    add_writer = _forbidden("add_writer")  # type: ignore[assignment]
    sock_recv = _forbidden("sock_recv")
    sock_recv_into = _forbidden("sock_recv_into")
    sock_recvfrom = _forbidden("sock_recvfrom")
    sock_recvfrom_into = _forbidden("sock_recvfrom_into")
    sock_sendall = _forbidden("sock_sendall")
    sock_sendto = _forbidden("sock_sendto")
    sock_connect = _forbidden("sock_connect")
    sock_accept = _forbidden("sock_accept")
    sock_sendfile = _forbidden("sock_sendfile")
    add_signal_handler = _forbidden("add_signal_handler")  # type: ignore[assignment]


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

    def configures(self, name: str) -> bool:
        """True iff `name` or one of its dotted prefixes has its own distribution
        (the default does not count)."""
        key = name
        while key not in self._dists:
            if "." not in key:
                return False
            key = key.rsplit(".", 1)[0]
        return True

    def distribution(self, name: str) -> Distribution:
        """The distribution used for `name`; `LatencySpecError` if none applies."""
        key = name
        while True:
            if key in self._dists:
                return self._dists[key]
            if "." not in key:
                break
            key = key.rsplit(".", 1)[0]
        if self._default is not None:
            return self._default
        raise LatencySpecError(f"no latency configured for {name!r} and no default")

    def with_overrides(self, overrides: Mapping[str, Distribution]) -> LatencyModel:
        return LatencyModel({**self._dists, **overrides}, default=self._default)


# --- Modeled CPU ------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class CorePoolStatistics:
    name: str
    cores: int
    busy_s: float
    acquisitions: int
    wait_s: float


@final
class CorePool:
    """N modeled cores: CPU work holds one core for its duration.

    The event loop's coordinator is a pool of 1, so its handlers serialize; the
    decoupled adapter shares a pool of N. Waiters are served in arrival order.
    """

    def __init__(self, runtime: Runtime, cores: int, name: str) -> None:
        if cores < 1:
            raise ValueError(f"a core pool needs >= 1 core, got {cores}")
        self._rt = runtime
        self.cores = cores
        self.name = name
        self._sem = asyncio.Semaphore(cores)
        self._busy_s = 0.0
        self._wait_s = 0.0
        self._acquisitions = 0
        #: Real time only: modeled CPU not yet slept off (see `Runtime.cpu`).
        self.owed_s = 0.0

    @contextlib.asynccontextmanager
    async def core(self) -> AsyncIterator[None]:
        """Holds one core for the duration of the block."""
        start = self._rt.now()
        async with self._sem:
            got = self._rt.now()
            self._wait_s += got - start
            self._acquisitions += 1
            try:
                yield
            finally:
                self._busy_s += self._rt.now() - got

    def statistics(self) -> CorePoolStatistics:
        return CorePoolStatistics(self.name, self.cores, self._busy_s, self._acquisitions, self._wait_s)


# --- Owning background tasks -----------------------------------------------------------


class AsyncExitStack(contextlib.AsyncExitStack):
    """`contextlib.AsyncExitStack`, except that an exit callback that re-raises
    the very exception it was handed counts as "did not suppress it".

    Why: anyio's `TaskGroup.__aexit__` re-raises the exception it is given.
    When an earlier callback of the same stack has raised a new exception N
    (whose `__context__` is the frame's exception), contextlib's
    `_fix_exception_context(N, N)` walks to N's context, finds the frame's
    exception and sets `N.__context__ = N`. The next walk of that chain never
    ends: a Ctrl-C during a real-mode run spun at 100 % CPU (issue 16). Every
    stack in the product is this one.
    """

    def _push_exit_callback(self, callback: Callable[..., Any], is_sync: bool = True) -> None:
        if is_sync:

            def sync_exit(et: Any, exc: BaseException | None, tb: Any) -> Any:
                try:
                    return callback(et, exc, tb)
                except BaseException as raised:
                    if exc is not None and raised is exc:
                        return False
                    raise

            super()._push_exit_callback(sync_exit, True)  # type: ignore[misc]
            return

        async def async_exit(et: Any, exc: BaseException | None, tb: Any) -> Any:
            try:
                return await callback(et, exc, tb)
            except BaseException as raised:
                if exc is not None and raised is exc:
                    return False
                raise

        super()._push_exit_callback(async_exit, False)  # type: ignore[misc]


class TaskOwner:
    """A component that owns background tasks for the span of its `async with`
    (structured concurrency: leaving the block cancels them and waits for them).

    Subclasses start their long-running tasks in `_start_background` and may
    spawn more into `self._tg` while running.
    """

    _tg: TaskGroup | None = None

    def _start_background(self, tg: TaskGroup) -> None:
        """Starts the component's own tasks (none by default)."""

    async def __aenter__(self) -> Self:
        import anyio

        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._start_background(tg)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None, "__aexit__ without __aenter__"
        tg.cancel_scope.cancel()
        return await tg.__aexit__(et, e, tb)


# --- Runtime ----------------------------------------------------------------------------


@final
class Runtime:
    """Clock, seeded randomness, latency and CPU models, passed down explicitly.

    Works on either loop: on `VirtualEventLoop` the clock is virtual and the wall
    clock starts at the loop's epoch; on any other loop both are real. A wall
    clock may be injected (tests of the oracle's wall-clock tracking).

    Args:
        seed: seeds `rng`; `derive` gives sub-components their own streams.
        latency: the latency model `delay` samples from (default: all zero).
        wall_clock: overrides `wall_ms`.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: LatencyModel | None = None,
        wall_clock: WallClock | None = None,
        _name: str = "",
    ) -> None:
        self.seed = seed
        self.name = _name
        self.rng = random.Random(_stream_seed(seed, _name))
        self.latency = latency if latency is not None else LatencyModel(default=Constant(0.0))
        self._wall_clock = wall_clock

    def derive(self, name: str) -> Runtime:
        """A Runtime sharing clock and models, with an independent RNG stream named
        `name`, so one component's draws never shift another's."""
        full = f"{self.name}/{name}" if self.name else name
        return Runtime(seed=self.seed, latency=self.latency, wall_clock=self._wall_clock, _name=full)

    # Clock.

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    @property
    def virtual(self) -> bool:
        """True on the virtual-time loop. Needs a running loop."""
        return isinstance(self._loop(), VirtualEventLoop)

    def now(self) -> float:
        """Monotonic seconds (the loop's clock)."""
        return self._loop().time()

    def now_ms(self) -> float:
        return self._loop().time() * 1000

    def now_ns(self) -> int:
        return round(self._loop().time() * 1e9)

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch, the clock the timestamp oracle tracks."""
        if self._wall_clock is not None:
            return self._wall_clock()
        loop = self._loop()
        if isinstance(loop, VirtualEventLoop):
            return loop.epoch_ms + math.floor(loop.time() * 1000)
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        """Sleeps `seconds` of (real or virtual) time; 0 just yields."""
        await asyncio.sleep(max(0.0, seconds))

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
        on_virtual = isinstance(asyncio.events._get_running_loop(), VirtualEventLoop)
        value = self.rng.getrandbits(bits) if on_virtual else _SYSTEM_RANDOM.getrandbits(bits)
        return f"{value:0{(bits + 3) // 4}x}"

    # CPU.

    def core_pool(self, cores: int, name: str) -> CorePool:
        return CorePool(self, cores, name)

    async def cpu(self, seconds: float, pool: CorePool) -> None:
        """Spends `seconds` of modeled CPU on one core of `pool` (waiting for a free
        core first).

        In real time the stock loop's timers are about a millisecond coarse (a
        50 µs sleep takes over 1 ms here), so small costs are owed to the pool
        and slept off together once `REAL_CPU_QUANTUM_S` is owed: the total
        stays right, each cost is not inflated twentyfold.
        """
        async with pool.core():
            if self.virtual:
                await self.sleep(seconds)
                return
            pool.owed_s += seconds
            if pool.owed_s >= REAL_CPU_QUANTUM_S:
                owed, pool.owed_s = pool.owed_s, 0.0
                await self.sleep(owed)
            else:
                await asyncio.sleep(0)


#: Real time: the least modeled CPU slept at once (see `Runtime.cpu`).
REAL_CPU_QUANTUM_S: Final = 0.001

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
) -> T:
    """Runs `main(runtime)` to completion on a fresh virtual or stock loop."""
    rt = Runtime(seed=seed, latency=latency, wall_clock=wall_clock)
    factory: Callable[[], asyncio.AbstractEventLoop] = (
        VirtualEventLoop if virtual else asyncio.new_event_loop
    )
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(guard(main(rt)))

