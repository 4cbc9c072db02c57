"""The oracle conformance suite and linearizability checker, pytest-free.

`await check_oracle(make)` runs every documented scenario of `TimestampOracle`
against fresh timelines (`make(timeline)` opens an oracle; it is used as
`async with`). `RecordingOracle` records every call as an `OpRecord` (invoke and
complete on the Runtime clock), and `check_history` judges such records by the
guarantees of `oracle.api.TimestampOracle` — the table in `oracle.spec`, which
the trace checker uses too — from one task, many tasks, or several processes
sharing a clock.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, final

import anyio

from oracle.api import MAX_TIMESTAMP, TimestampOracle, WriteTimestamp
from oracle.batching import BatchingOracle
from oracle.open import open_oracles
from oracle.spec import Operation, Violation, check
from sim.runtime.conformance import ConformanceFailure, expect
from sim.runtime.errors import ExternalError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence

    from oracle.metrics import OracleStatistics
    from oracle.open import OracleSpec
    from sim.runtime.core import Runtime

__all__ = [
    "ConformanceFailure",
    "MakeOracle",
    "ManualWallClock",
    "OpRecord",
    "RecordingOracle",
    "Violation",
    "assert_linearizable",
    "check_history",
    "check_oracle",
    "fresh_timeline",
    "open_timeline",
    "run_random_workload",
]

#: Opens an oracle on the given timeline (used as `async with await make(t)`).
MakeOracle: TypeAlias = "Callable[[str], Awaitable[TimestampOracle]]"

WRITE_TS: Final = str(Operation.WRITE_TS)
READ_TS: Final = str(Operation.READ_TS)
PEEK: Final = str(Operation.PEEK_WRITE_TS)
APPLY: Final = str(Operation.APPLY_WRITE)




def fresh_timeline(tag: str = "t") -> str:
    """A timeline name no other run uses (checks never interfere on a shared server)."""
    return f"conformance-{tag}-{uuid.uuid4().hex[:12]}"


async def open_timeline(
    spec: OracleSpec | str, timeline: str, rt: Runtime, *, batching: bool = False
) -> TimestampOracle:
    """The oracle of `timeline` as a process of its own, opened by
    `oracle.open.open_oracles` as every oracle is (closing it closes its
    backend), with a `BatchingOracle` in front if `batching` (its worker runs
    while it is entered: use it as `async with`). A `MakeOracle` for
    `check_oracle` is this with the spec bound."""
    oracle = await (await open_oracles(spec, rt)).timeline(timeline, owns_backend=True)
    return BatchingOracle(oracle, rt) if batching else oracle


@final
class ManualWallClock:
    """An injectable wall clock (`Runtime(wall_clock=clock)`) that tests move."""

    def __init__(self, start_ms: int = 1_900_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def set(self, ms: int) -> None:
        self.ms = ms

    def advance(self, ms: int) -> None:
        self.ms += ms


# --- History ----------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class OpRecord:
    """One oracle call: `ts` is the result (write_ts, read_ts, peek_write_ts) or the
    argument (apply_write). `ok=False`: it raised, and may or may not have taken
    effect. Times are nanoseconds on a clock all recorders share."""

    client: str
    op: str
    invoke_ns: int
    complete_ns: int
    ts: int | None
    ok: bool

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> OpRecord:
        d = json.loads(line)
        return cls(d["client"], d["op"], d["invoke_ns"], d["complete_ns"], d["ts"], d["ok"])


@final
class RecordingOracle(TimestampOracle):
    """Wraps an oracle, appending an `OpRecord` to `history` for every call.

    Times come from `rt.now_ns()`: in real mode that is the monotonic clock,
    which Linux shares between processes, so histories of several processes can
    be merged and checked together.
    """

    def __init__(self, inner: TimestampOracle, rt: Runtime, *, client: str = "") -> None:
        self._inner = inner
        self._rt = rt
        self.client = client
        self.history: list[OpRecord] = []

    @property
    def timeline(self) -> str:
        return self._inner.timeline

    def _record(self, op: str, invoke: int, ts: int | None, ok: bool) -> None:
        self.history.append(OpRecord(self.client, op, invoke, self._rt.now_ns(), ts, ok))

    async def write_ts(self) -> WriteTimestamp:
        invoke = self._rt.now_ns()
        try:
            w = await self._inner.write_ts()
        except BaseException:
            self._record(WRITE_TS, invoke, None, False)
            raise
        self._record(WRITE_TS, invoke, w.ts, True)
        return w

    async def read_ts(self) -> int:
        return await self._call(READ_TS, self._inner.read_ts)

    async def peek_write_ts(self) -> int:
        return await self._call(PEEK, self._inner.peek_write_ts)

    async def _call(self, op: str, fn: Callable[[], Awaitable[int]]) -> int:
        invoke = self._rt.now_ns()
        try:
            ts = await fn()
        except BaseException:
            self._record(op, invoke, None, False)
            raise
        self._record(op, invoke, ts, True)
        return ts

    async def apply_write(self, ts: int) -> None:
        invoke = self._rt.now_ns()
        try:
            await self._inner.apply_write(ts)
        except BaseException:
            self._record(APPLY, invoke, ts, False)
            raise
        self._record(APPLY, invoke, ts, True)

    def statistics(self) -> OracleStatistics:
        return self._inner.statistics()

    async def close(self) -> None:
        await self._inner.close()


# --- The linearizability checker --------------------------------------------------------


def check_history(
    records: Iterable[OpRecord], *, read_floor: int = 0
) -> list[Violation[OpRecord]]:
    """Every violation of the oracle's guarantees (`oracle.spec.BOUNDS`) in `records`.

    `read_floor` is the timeline's `read_ts` when recording began (e.g. a
    restarted memory oracle's persisted upper): no `read_ts` may exceed it
    unless a write above it was applied. Failed operations (`ok=False`) bound
    nothing from below, but may have applied; ties in time count as concurrent.

    Raises:
        InvalidUsage: a record names no oracle operation.
    """
    return check(list(records), read_floor=read_floor)


def assert_linearizable(records: Sequence[OpRecord], *, read_floor: int = 0, show: int = 5) -> None:
    """Raises `ConformanceFailure` listing the first violations, if any."""
    violations = check_history(records, read_floor=read_floor)
    if violations:
        shown = "\n".join(str(v) for v in violations[:show])
        raise ConformanceFailure(
            f"{len(violations)} violation(s) of the oracle's guarantees in "
            f"{len(records)} operations:\n{shown}"
        )


async def run_random_workload(
    oracle: TimestampOracle,
    rt: Runtime,
    *,
    tasks: int = 64,
    ops_per_task: int = 50,
    think_s: float = 0.0,
    tolerate_errors: bool = False,
) -> int:
    """`tasks` concurrent clients issue random operations on `oracle` (wrap it in a
    `RecordingOracle` to check the history). Choices come from `rt.rng`.

    Mix: read_ts 45%, a write (write_ts, then apply_write of it) 30%,
    peek_write_ts 10%, apply_write of an older or slightly future timestamp 10%,
    a write_ts never applied 5%. Between operations a client sleeps up to
    `think_s` (0: it only yields).

    Returns the number of operations that raised `ExternalError` (re-raised
    unless `tolerate_errors`).
    """
    failures = 0
    rng = rt.rng

    async def client() -> None:
        nonlocal failures
        seen = 0
        for _ in range(ops_per_task):
            roll = rng.random()
            try:
                if roll < 0.45:
                    seen = max(seen, await oracle.read_ts())
                elif roll < 0.75:
                    w = await oracle.write_ts()
                    seen = max(seen, w.ts)
                    if think_s:
                        await rt.sleep(rng.random() * think_s)
                    await oracle.apply_write(w.ts)
                elif roll < 0.85:
                    seen = max(seen, await oracle.peek_write_ts())
                elif roll < 0.95:
                    await oracle.apply_write(min(MAX_TIMESTAMP, max(0, seen + rng.randint(-5, 3))))
                else:
                    seen = max(seen, (await oracle.write_ts()).ts)
            except ExternalError:
                failures += 1
                if not tolerate_errors:
                    raise
            await rt.sleep(rng.random() * think_s if think_s else 0)

    async with anyio.create_task_group() as tg:
        for _ in range(tasks):
            tg.start_soon(client)
    return failures


# --- The conformance suite --------------------------------------------------------------


async def _expect_invalid(what: str, op: Callable[[], Awaitable[object]]) -> None:
    try:
        await op()
    except InvalidUsage:
        return
    raise ConformanceFailure(f"{what}: expected InvalidUsage")


async def check_oracle(
    make: MakeOracle,
    rt: Runtime,
    *,
    clock: ManualWallClock | None = None,
    concurrency: int = 16,
) -> None:
    """Runs every check against oracles from `make(timeline)` (fresh timelines).

    Args:
        rt: the Runtime the oracles use (for the concurrent check's history).
        clock: the wall clock `make`'s Runtime reads, if injected: enables the
            exact wall-clock tracking checks.
        concurrency: tasks in the concurrent check.
    """
    await _check_scenarios(make)
    await _check_monotonic(make)
    await _check_concurrent(make, rt, concurrency)
    await _check_misuse(make)
    if clock is not None:
        await _check_wall_clock(make, clock)


async def _check_scenarios(make: MakeOracle) -> None:
    """The three cases of `apply_write`, and write_ts leaving read_ts alone."""
    async with await make(fresh_timeline("scenarios")) as o:
        r0, p0 = await o.read_ts(), await o.peek_write_ts()
        expect(0 <= r0 <= p0, f"fresh timeline: read_ts {r0} must be <= peek_write_ts {p0}")
        w1 = await o.write_ts()
        expect(w1.ts > p0 and w1.ts > r0, f"write_ts {w1.ts} must be > read {r0} and peek {p0}")
        expect(w1.advance_to == w1.ts + 1, f"advance_to {w1.advance_to} must be ts + 1")
        expect(await o.peek_write_ts() == w1.ts, "peek_write_ts must return the last write_ts")
        expect(await o.read_ts() == r0, "write_ts alone must not advance read_ts")

        # Below read_ts: nothing changes.
        await o.apply_write(r0)
        if r0 > 0:
            await o.apply_write(r0 - 1)
        expect(await o.read_ts() == r0, "apply_write(<= read_ts) must not change read_ts")
        expect(await o.peek_write_ts() == w1.ts, "apply_write(<= read_ts) must not change write_ts")

        # Between read_ts and write_ts: read_ts rises to it, write_ts stays.
        w2 = await o.write_ts()
        w3 = await o.write_ts()
        expect(w1.ts < w2.ts < w3.ts, f"write_ts must increase: {w1.ts}, {w2.ts}, {w3.ts}")
        await o.apply_write(w2.ts)
        got = await o.read_ts()
        expect(got == w2.ts, f"apply_write({w2.ts}) between read and write: read_ts is {got}")
        got = await o.peek_write_ts()
        expect(got == w3.ts, f"apply_write between read and write changed write_ts to {got}")
        await o.apply_write(w2.ts)  # idempotent
        expect(await o.read_ts() == w2.ts, "apply_write must be idempotent")

        # Above write_ts: both rise.
        t = w3.ts + 1000
        await o.apply_write(t)
        got_r, got_p = await o.read_ts(), await o.peek_write_ts()
        expect(got_r == t, f"apply_write({t}) above write_ts: read_ts is {got_r}, must be {t}")
        expect(got_p == t, f"apply_write({t}) above write_ts: write_ts is {got_p}, must be {t}")
        w4 = await o.write_ts()
        expect(w4.ts > t, f"write_ts {w4.ts} after apply_write({t}) must be > {t}")
        expect(await o.read_ts() == t, "read_ts moved without apply_write")


async def _check_monotonic(make: MakeOracle) -> None:
    """Sequential write_ts strictly increase; read_ts stays below the next one."""
    async with await make(fresh_timeline("monotonic")) as o:
        last = await o.peek_write_ts()
        for i in range(60):
            w = await o.write_ts()
            expect(w.ts > last, f"write_ts #{i} = {w.ts} not > previous {last}")
            if i % 3 == 0:
                await o.apply_write(w.ts)
                r = await o.read_ts()
                expect(r == w.ts, f"read_ts {r} after apply_write({w.ts})")
            last = w.ts
        r = await o.read_ts()
        nxt = await o.write_ts()
        expect(r < nxt.ts, f"read_ts {r} must be < a later write_ts {nxt.ts}")


async def _check_concurrent(
    make: MakeOracle, rt: Runtime, tasks: int
) -> None:
    """Concurrent allocations, then a concurrent mix, are linearizable (the
    table's `write_ts != write_ts` bound is what catches duplicate allocations
    that overlap, as they all do at one virtual instant)."""
    async with await make(fresh_timeline("concurrent")) as o:
        floor = await o.read_ts()  # nothing applied yet: the timeline's starting point
        rec = RecordingOracle(o, rt)

        async def allocate() -> None:
            for _ in range(5):
                await rec.write_ts()

        async with anyio.create_task_group() as tg:
            for _ in range(tasks):
                tg.start_soon(allocate)
        await run_random_workload(rec, rt, tasks=tasks, ops_per_task=10)
        assert_linearizable(rec.history, read_floor=floor)


async def _check_misuse(make: MakeOracle) -> None:
    await _expect_invalid("make('')", lambda: make(""))
    o = await make(fresh_timeline("misuse"))
    async with o:
        for bad in (-1, MAX_TIMESTAMP + 1, True, 1.5, "7", None):
            await _expect_invalid(
                f"apply_write({bad!r})",
                lambda bad=bad: o.apply_write(bad),  # type: ignore[misc]
            )
    # Running out of timestamps is an immediate, clean error (not a retry loop),
    # and leaves the readable state alone.
    async with await make(fresh_timeline("exhausted")) as o2:
        await o2.apply_write(MAX_TIMESTAMP)
        await _expect_invalid("write_ts after apply_write(MAX_TIMESTAMP)", o2.write_ts)
        await _expect_invalid("write_ts again", o2.write_ts)
        expect(await o2.read_ts() == MAX_TIMESTAMP, "read_ts must stay at MAX_TIMESTAMP")
    await _expect_invalid("read_ts after close", o.read_ts)
    await _expect_invalid("write_ts after close", o.write_ts)
    await _expect_invalid("apply_write after close", lambda: o.apply_write(1))


async def _check_wall_clock(
    make: MakeOracle, clock: ManualWallClock
) -> None:
    """write_ts = max(write_ts + 1, wall_ms), whatever the clock does."""
    async with await make(fresh_timeline("wall")) as o:
        base = clock.ms
        p0 = await o.peek_write_ts()
        r0 = await o.read_ts()
        w = await o.write_ts()
        expect(w.ts == max(base, p0 + 1), f"write_ts {w.ts} must be max(wall {base}, {p0} + 1)")
        w2 = await o.write_ts()
        expect(w2.ts == w.ts + 1, f"same wall clock: write_ts {w2.ts} must be {w.ts} + 1")
        clock.advance(250)
        w3 = await o.write_ts()
        expect(w3.ts == max(clock.ms, w2.ts + 1), f"write_ts {w3.ts} must follow the clock to {clock.ms}")
        clock.set(base - 60_000)  # the wall clock steps back a minute
        w4 = await o.write_ts()
        expect(w4.ts == w3.ts + 1, f"wall clock went back: write_ts {w4.ts} must be {w3.ts} + 1")
        far = clock.ms + 3_600_000
        await o.apply_write(far)
        w5 = await o.write_ts()
        expect(w5.ts == far + 1, f"after apply_write({far}) write_ts {w5.ts} must be {far + 1}")
        clock.set(far + 10_000)
        w6 = await o.write_ts()
        expect(w6.ts == far + 10_000, f"write_ts {w6.ts} must catch up with the clock {clock.ms}")
        expect(await o.read_ts() == far, "read_ts must be the last applied write")
        expect(r0 <= far, "read_ts went backwards")
        clock.set(base)
