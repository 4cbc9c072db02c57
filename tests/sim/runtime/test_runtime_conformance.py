"""The `Runtime` contract, run on both loops `run` offers: the virtual-time loop
and the stock asyncio loop.

Each test asserts what holds on both: orderings, lower bounds on elapsed time,
reproducible random streams, modeled-CPU accounting, task ownership. On the
stock loop sleeps are a few milliseconds and nothing bounds wall time from
above (machines are noisy); the virtual loop's exact times are checked in
`test_runtime.py`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Final

import anyio
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.cpu import REAL_CPU_QUANTUM_S
from sim.runtime.latency import LatencyModel, Uniform
from sim.runtime.loop import VirtualEventLoop
from sim.runtime.tasks import TaskOwner

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

MS: Final = 0.001
#: asyncio runs a timer once `now + clock resolution` passes its deadline, so a
#: real sleep may end up to one resolution (1 ns on Linux) early; allow 1 µs.
EARLY_S: Final = 1e-6


@pytest.fixture(params=[True, False], ids=["virtual", "stock"])
def virtual(request: pytest.FixtureRequest) -> bool:
    """Which loop `run` uses: every test here runs on both."""
    flag: bool = request.param
    return flag


# --- run ----------------------------------------------------------------------------------


def test_run_uses_the_loop_asked_for_and_returns_mains_result(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[bool, bool, int]:
        return rt.virtual, isinstance(asyncio.get_running_loop(), VirtualEventLoop), rt.seed

    assert run(main, seed=41, virtual=virtual) == (virtual, virtual, 41)


def test_run_raises_what_main_raises(virtual: bool) -> None:
    async def main(rt: Runtime) -> None:
        await rt.sleep(MS)
        raise LookupError("from main")

    with pytest.raises(LookupError, match="from main"):
        run(main, virtual=virtual)


# --- Clock and sleeps -------------------------------------------------------------------


def test_sleeps_wake_in_deadline_order(virtual: bool) -> None:
    async def main(rt: Runtime) -> list[tuple[int, float, float]]:
        woke: list[tuple[int, float, float]] = []

        async def sleeper(slot: int) -> None:
            # Deadlines are recorded, not assumed: on the stock loop a stall
            # while the sleepers start may reorder them, and then the wakes
            # must follow the deadlines, not the slots. Every sleep is a
            # timer (a zero sleep is a plain yield, which runs before timers
            # that expired during a stall).
            seconds = (slot + 1) * 4 * MS
            deadline = rt.now() + seconds
            await rt.sleep(seconds)
            woke.append((slot, deadline, rt.now()))

        async with anyio.create_task_group() as tg:
            for slot in (3, 1, 5, 0, 4, 2):
                tg.start_soon(sleeper, slot)
        return woke

    woke = run(main, virtual=virtual)
    assert sorted(slot for slot, _, _ in woke) == [0, 1, 2, 3, 4, 5]
    deadlines = [deadline for _, deadline, _ in woke]
    assert deadlines == sorted(deadlines)
    assert all(at >= deadline - EARLY_S for _, deadline, at in woke)
    if virtual:  # no stalls in virtual time: the deadlines are the slots'
        assert [slot for slot, _, _ in woke] == [0, 1, 2, 3, 4, 5]


def test_now_is_monotonic_and_advances_by_at_least_the_sleep(virtual: bool) -> None:
    async def main(rt: Runtime) -> list[tuple[float, float, float]]:
        spans = []
        for seconds in (0.0, 1 * MS, 3 * MS, 0.0, 2 * MS, 0.5 * MS):
            before = rt.now()
            await rt.sleep(seconds)
            spans.append((seconds, before, rt.now()))
        return spans

    spans = run(main, virtual=virtual)
    for seconds, before, after in spans:
        assert after - before >= seconds - EARLY_S
    clock = [t for _, before, after in spans for t in (before, after)]
    assert clock == sorted(clock)


def test_clock_units_agree(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[float, float, int, float]:
        await rt.sleep(2 * MS)
        return rt.now(), rt.now_ms(), rt.now_ns(), rt.now()

    s, ms, ns, later = run(main, virtual=virtual)
    # Each call reads the clock again: later reads are never earlier.
    assert s * 1000 <= ms + 1e-6
    assert ms <= later * 1000 + 1e-6
    assert s * 1e9 - 1 <= ns <= later * 1e9 + 1


def test_sleep_zero_or_negative_just_yields(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[list[str], bool]:
        order: list[str] = []

        async def a() -> None:
            order.append("a1")
            await rt.sleep(0)
            order.append("a2")
            await rt.sleep(-5)
            order.append("a3")

        async def b() -> None:
            order.append("b1")
            await rt.sleep(0)
            order.append("b2")

        start = rt.now()
        async with anyio.create_task_group() as tg:
            tg.start_soon(a)
            tg.start_soon(b)
        return order, rt.now() >= start

    order, monotonic = run(main, virtual=virtual)
    assert order == ["a1", "b1", "a2", "b2", "a3"]
    assert monotonic


def test_timeouts_interrupt_sleeps(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[bool, float, bool, float]:
        start = rt.now()
        with anyio.move_on_after(2 * MS) as scope:
            await rt.sleep(3600)
        moved_on = rt.now() - start
        start = rt.now()
        timed_out = False
        try:
            with anyio.fail_after(1 * MS):
                await rt.delay("anything")  # zero latency: returns at once
                await rt.sleep(3600)
        except TimeoutError:
            timed_out = True
        return scope.cancelled_caught, moved_on, timed_out, rt.now() - start

    cancelled, moved_on, timed_out, failed_after = run(main, virtual=virtual)
    assert cancelled
    assert moved_on >= 2 * MS - EARLY_S
    assert timed_out
    assert failed_after >= 1 * MS - EARLY_S


def test_wall_clock_can_be_injected_and_is_shared_by_derived_runtimes(virtual: bool) -> None:
    ticks = iter(range(1_000, 2_000, 10))

    async def main(rt: Runtime) -> tuple[int, int, int]:
        child = rt.derive("child")
        return rt.wall_ms(), child.wall_ms(), child.derive("grandchild").wall_ms()

    assert run(main, virtual=virtual, wall_clock=lambda: next(ticks)) == (1_000, 1_010, 1_020)


# --- Random streams and latency -----------------------------------------------------------


def _draws(rt: Runtime, n: int = 8) -> list[float]:
    return [rt.rng.random() for _ in range(n)]


def test_streams_are_a_function_of_seed_and_name_only(virtual: bool) -> None:
    """The same on either loop and whatever else draws: reproducible, independent."""

    async def main(rt: Runtime) -> dict[str, list[float]]:
        got = {"root": _draws(rt)}
        _draws(rt, 1000)  # the parent drawing more shifts nothing derived
        got["a"] = _draws(rt.derive("a"))
        got["b"] = _draws(rt.derive("b"))
        got["a/b"] = _draws(rt.derive("a").derive("b"))
        again = rt.derive("a")
        got["a again"] = _draws(again)
        return got

    got = run(main, seed=7, virtual=virtual)
    # A Runtime built with no loop at all draws the same numbers.
    ref = Runtime(seed=7)
    assert got["root"] == _draws(ref)
    assert got["a"] == got["a again"] == _draws(Runtime(seed=7).derive("a"))
    assert got["a/b"] == _draws(Runtime(seed=7).derive("a").derive("b"))
    streams = [got["root"], got["a"], got["b"], got["a/b"], _draws(Runtime(seed=8).derive("a"))]
    assert len({tuple(s) for s in streams}) == len(streams)  # names and seeds separate streams
    assert run(main, seed=7, virtual=not virtual) == got


def test_derived_runtimes_share_the_models(virtual: bool) -> None:
    latency = LatencyModel({"net": Uniform(1 * MS, 2 * MS)})

    async def main(rt: Runtime) -> tuple[bool, bool, bool]:
        child = rt.derive("child")
        return child.latency is rt.latency, child.virtual == rt.virtual, child.seed == rt.seed

    assert run(main, seed=3, virtual=virtual, latency=latency) == (True, True, True)


def test_delay_sleeps_at_least_the_sample_it_returns(virtual: bool) -> None:
    latency = LatencyModel({"net": Uniform(1 * MS, 3 * MS)})

    async def main(rt: Runtime) -> list[tuple[float, float]]:
        out = []
        for _ in range(6):
            before = rt.now()
            sample = await rt.delay("net.rpc")
            out.append((sample, rt.now() - before))
        return out

    got = run(main, seed=4, virtual=virtual, latency=latency)
    ref = Runtime(seed=4, latency=latency)
    assert [sample for sample, _ in got] == [ref.sample("net.rpc") for _ in range(6)]
    for sample, took in got:
        assert 1 * MS <= sample <= 3 * MS
        assert took >= sample - EARLY_S


def test_unique_hex_is_well_formed_seeded_only_in_virtual_time(virtual: bool) -> None:
    async def main(rt: Runtime) -> list[str]:
        return [rt.unique_hex(), rt.unique_hex(64), rt.unique_hex(1)]

    first, second = run(main, seed=5, virtual=virtual), run(main, seed=5, virtual=virtual)
    for ids in (first, second):
        assert [len(i) for i in ids] == [32, 16, 1]
        assert all(int(i, 16) >= 0 for i in ids)
    # Virtual: a function of the seed (traces repeat). Real: two processes with
    # one seed must never share writer ids or blob keys.
    assert (first[:2] == second[:2]) is virtual


# --- Modeled CPU --------------------------------------------------------------------------


def test_cpu_serializes_beyond_the_core_count(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[int, float, float, int, float, float]:
        pool = rt.core_pool(2, "pool")
        inside = peak = 0

        async def hold() -> None:
            nonlocal inside, peak
            async with pool.core():
                inside += 1
                peak = max(peak, inside)
                await rt.sleep(2 * MS)
                inside -= 1

        start = rt.now()
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(hold)
        held = rt.now() - start

        cpu_pool = rt.core_pool(2, "cpu")
        start = rt.now()
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(rt.cpu, 4 * MS, cpu_pool)
        spent = rt.now() - start
        stats = cpu_pool.statistics()
        return peak, held, spent, stats.acquisitions, stats.busy_s, stats.wait_s

    peak, held, spent, acquisitions, busy, waited = run(main, virtual=virtual)
    assert peak == 2
    assert held >= 3 * 2 * MS - EARLY_S  # six 2 ms holds, two at a time
    assert spent >= 3 * 4 * MS - EARLY_S
    assert acquisitions == 6
    assert busy >= 6 * 4 * MS - 6 * EARLY_S
    assert waited >= (4 + 4 + 8 + 8) * MS - 6 * EARLY_S  # four jobs queued, two of them twice as long


def test_core_pool_serves_waiters_in_arrival_order(virtual: bool) -> None:
    async def main(rt: Runtime) -> list[int]:
        pool = rt.core_pool(1, "loop")
        done: list[int] = []

        async def job(i: int) -> None:
            await rt.cpu(1 * MS, pool)
            done.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(job, i)
        return done

    assert run(main, virtual=virtual) == [0, 1, 2, 3, 4, 5]


def test_small_cpu_costs_add_up(virtual: bool) -> None:
    """Costs far below a real timer's granularity are still paid in total (on
    the stock loop, up to one quantum may still be owed at the end)."""

    async def main(rt: Runtime) -> tuple[float, float]:
        pool = rt.core_pool(1, "loop")
        start = rt.now()
        for _ in range(80):
            await rt.cpu(0.1 * MS, pool)
        return rt.now() - start, pool.statistics().acquisitions

    took, acquisitions = run(main, virtual=virtual)
    assert acquisitions == 80
    assert took >= 80 * 0.1 * MS - REAL_CPU_QUANTUM_S - EARLY_S


def test_cpu_then_serves_in_arrival_order_and_adds_small_costs_up(virtual: bool) -> None:
    """`Runtime.cpu_then`, the callback form of `cpu`: the same order, and on
    the stock loop the same owing of costs below a timer's granularity (85
    costs of 0.1 ms leave about half a millisecond owed there, none here)."""

    async def main(rt: Runtime) -> tuple[list[int], float, int, float]:
        pool = rt.core_pool(1, "loop")
        done: list[int] = []
        finished = anyio.Event()
        start = rt.now()

        def then(i: int) -> None:
            done.append(i)
            if len(done) == 85:
                finished.set()

        for i in range(85):
            rt.cpu_then(0.1 * MS, pool, functools.partial(then, i))
        await finished.wait()
        return done, rt.now() - start, pool.statistics().acquisitions, pool.owed_s

    done, took, acquisitions, owed = run(main, virtual=virtual)
    assert done == list(range(85))
    assert acquisitions == 85
    assert took >= 85 * 0.1 * MS - REAL_CPU_QUANTUM_S - EARLY_S
    assert owed == (0.0 if virtual else pytest.approx(0.5 * MS))


# --- Task ownership -----------------------------------------------------------------------


class _Owner(TaskOwner):
    """Runs `background` for the span of its `async with`."""

    def __init__(self, rt: Runtime, *, fail_after_s: float | None = None) -> None:
        self.rt = rt
        self.fail_after_s = fail_after_s
        self.ticks = 0
        self.cleaned_up = False

    def _start_background(self, tg: TaskGroup) -> None:
        tg.start_soon(self.background)

    async def background(self) -> None:
        try:
            start = self.rt.now()
            while True:
                self.ticks += 1
                await self.rt.sleep(1 * MS)
                if self.fail_after_s is not None and self.rt.now() - start >= self.fail_after_s:
                    raise ValueError("background task failed")
        finally:
            self.cleaned_up = True


def test_a_task_owners_failing_task_surfaces_and_cancels_the_body(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[bool, bool, float, bool]:
        reached = surfaced = False
        start = rt.now()
        owner = _Owner(rt, fail_after_s=3 * MS)
        try:
            async with owner:
                await rt.sleep(3600)
                reached = True
        except* ValueError:
            surfaced = True
        return surfaced, reached, rt.now() - start, owner.cleaned_up

    surfaced, reached, took, cleaned_up = run(main, virtual=virtual)
    assert surfaced
    assert not reached  # the body was cancelled, not left to sleep an hour
    assert took >= 3 * MS - EARLY_S
    assert cleaned_up


def test_leaving_a_task_owner_cancels_and_awaits_its_tasks(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[int, bool, bool]:
        owner = _Owner(rt)
        async with owner:
            await rt.sleep(5 * MS)
            running_inside = not owner.cleaned_up
        return owner.ticks, running_inside, owner.cleaned_up

    ticks, running_inside, cleaned_up = run(main, virtual=virtual)
    assert ticks >= 1
    assert running_inside
    assert cleaned_up  # cancelled and finished before `async with` returned


def test_a_task_owners_body_error_propagates_and_stops_its_tasks(virtual: bool) -> None:
    async def main(rt: Runtime) -> tuple[bool, bool]:
        owner = _Owner(rt)
        propagated = False
        try:
            async with owner:
                await rt.sleep(2 * MS)
                raise KeyError("from the body")
        except* KeyError:
            propagated = True
        return propagated, owner.cleaned_up

    assert run(main, virtual=virtual) == (True, True)
