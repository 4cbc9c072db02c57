"""The Runtime and the virtual-time loop: clock, cancellation, deadlock, I/O
refusal, random streams and the stock loop. Modeled CPU: test_cpu.py; latency
distributions: test_latency.py.

Virtual-time tests assert exact times: a timer fires at exactly its deadline, so
`==` on floats is the contract here, not an accident.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.latency import (
    Constant,
    LatencyModel,
)
from sim.runtime.loop import VIRTUAL_EPOCH_MS, VirtualDeadlock, VirtualEventLoop, VirtualIOError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


# --- The virtual clock ------------------------------------------------------------------


def test_clock_jumps_to_timers() -> None:
    async def main(rt: Runtime) -> float:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.sleep, 1000.0)
            for _ in range(1000):  # a thousand one-second timers alongside
                await rt.sleep(1.0)
        return rt.now()

    started = time.perf_counter()  # wall time of the test itself, not of the program
    assert run(main) == 1000.0
    assert time.perf_counter() - started < 1.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_clock_units_and_loop() -> None:
    rt = Runtime()
    assert rt.virtual
    assert isinstance(asyncio.get_running_loop(), VirtualEventLoop)
    assert (rt.now(), rt.now_ms(), rt.now_ns()) == (0.0, 0.0, 0)
    await rt.sleep(1.5)
    assert (rt.now(), rt.now_ms(), rt.now_ns()) == (1.5, 1500.0, 1_500_000_000)
    assert anyio.current_time() == rt.now()
    await rt.sleep(-3)  # negative: just yields
    await rt.sleep(0)
    assert rt.now() == 1.5


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_timers_fire_in_deadline_order() -> None:
    rt = Runtime()
    woke: list[tuple[float, str]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await rt.sleep(seconds)
        woke.append((rt.now(), name))

    async with anyio.create_task_group() as tg:
        for name, seconds in [("c", 3.0), ("a", 0.001), ("d", 2.5), ("b", 0.5)]:
            tg.start_soon(sleeper, name, seconds)
    assert woke == [(0.001, "a"), (0.5, "b"), (2.5, "d"), (3.0, "c")]


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_timers_due_at_the_same_instant_fire_in_scheduling_order() -> None:
    # Ties are broken by (deadline, sequence number), not by the heap's shape:
    # sleeps and anyio deadlines alike, interleaved with other deadlines.
    rt = Runtime()
    woke: list[int] = []

    async def sleeper(i: int, seconds: float) -> None:
        await rt.sleep(seconds)
        woke.append(i)

    async def deadline(i: int, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await anyio.sleep_forever()
        woke.append(i)

    seconds = [2.0 if i % 3 == 0 else 1.0 for i in range(40)]
    async with anyio.create_task_group() as tg:
        for i, s in enumerate(seconds):
            tg.start_soon(deadline if i % 2 else sleeper, i, s)
    assert woke == sorted(range(40), key=lambda i: seconds[i])
    assert rt.now() == 2.0


def test_far_future_timers_still_fire() -> None:
    # Past 2**24 s, 1e-9 s is below float resolution; a due timer must still run.
    async def main(rt: Runtime) -> list[float]:
        seen = []
        for seconds in (2.0**30, 1.0, 1e-12, 1e12):
            await rt.sleep(seconds)
            seen.append(rt.now())
        return seen

    assert run(main) == [2.0**30, 2.0**30 + 1, 2.0**30 + 1, 2.0**30 + 1 + 1e12]


def test_wall_clock_starts_at_the_virtual_epoch() -> None:
    async def main(rt: Runtime) -> list[int]:
        seen = [rt.wall_ms()]
        await rt.sleep(1.0015)
        seen.append(rt.wall_ms())
        seen.append(rt.derive("child").wall_ms())
        return seen

    epoch = VIRTUAL_EPOCH_MS
    assert run(main) == [epoch, epoch + 1001, epoch + 1001]


def test_wall_clock_can_be_injected() -> None:
    ticks = iter(range(100, 200, 10))

    async def main(rt: Runtime) -> list[int]:
        await rt.sleep(5)
        return [rt.wall_ms(), rt.wall_ms(), rt.derive("oracle").wall_ms()]

    assert run(main, wall_clock=lambda: next(ticks)) == [100, 110, 120]


def test_loop_epoch_is_configurable() -> None:
    loop = VirtualEventLoop(epoch_ms=42)
    try:
        assert loop.run_until_complete(_wall_ms()) == 42
    finally:
        loop.close()


async def _wall_ms() -> int:
    return Runtime().wall_ms()


# --- anyio and asyncio timeouts and cancellation -----------------------------------------


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_task_group_waits_for_its_slowest_child() -> None:
    rt = Runtime()
    async with anyio.create_task_group() as tg:
        for seconds in (1.0, 3.0, 2.0):
            tg.start_soon(rt.sleep, seconds)
    assert rt.now() == 3.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_fail_after() -> None:
    rt = Runtime()
    with pytest.raises(TimeoutError):
        with anyio.fail_after(2.0):
            await rt.sleep(5.0)
    assert rt.now() == 2.0
    with anyio.fail_after(2.0):
        await rt.sleep(1.0)
    assert rt.now() == 3.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_move_on_after() -> None:
    rt = Runtime()
    with anyio.move_on_after(2.0) as scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert rt.now() == 2.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_nested_deadlines_take_the_earliest() -> None:
    rt = Runtime()
    with pytest.raises(TimeoutError), anyio.fail_after(3.0), anyio.move_on_after(5.0):
        await rt.sleep(10.0)
    assert rt.now() == 3.0
    with anyio.move_on_after(5.0) as outer:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.0):
                await rt.sleep(10.0)
        await rt.sleep(10.0)
    assert outer.cancelled_caught
    assert rt.now() == 8.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_asyncio_timeout() -> None:
    rt = Runtime()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await rt.sleep(10.0)
    assert rt.now() == 1.5
    async with asyncio.timeout_at(rt.now() + 1.0) as cm:
        cm.reschedule(rt.now() + 4.0)
        await rt.sleep(3.0)
    assert rt.now() == 4.5


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_asyncio_wait_for() -> None:
    rt = Runtime()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(rt.sleep(10.0), timeout=0.25)
    assert rt.now() == 0.25
    assert await asyncio.wait_for(asyncio.sleep(0.5, result="x"), timeout=1.0) == "x"
    assert rt.now() == 0.75


def test_error_cancels_the_task_group() -> None:
    class Failed(Exception):
        pass

    async def main(rt: Runtime) -> list[tuple[float, str]]:
        events: list[tuple[float, str]] = []

        async def fail_at(seconds: float) -> None:
            await rt.sleep(seconds)
            raise Failed

        async def sibling(name: str) -> None:
            try:
                with anyio.move_on_after(100.0):  # its own scope inside the group
                    await rt.sleep(10.0)
                events.append((rt.now(), f"{name} finished"))
            except anyio.get_cancelled_exc_class():
                events.append((rt.now(), f"{name} cancelled"))
                raise

        async def group() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sibling, "a")
                tg.start_soon(fail_at, 1.0)
                tg.start_soon(sibling, "b")

        with pytest.raises(ExceptionGroup) as caught:
            await group()
        assert caught.group_contains(Failed)
        events.append((rt.now(), "group exited"))
        return events

    assert run(main) == [(1.0, "a cancelled"), (1.0, "b cancelled"), (1.0, "group exited")]


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_cancel_scope_cancels_a_whole_task_group() -> None:
    rt = Runtime()
    finished: list[str] = []

    async def worker(name: str, seconds: float) -> None:
        await rt.sleep(seconds)
        finished.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker, "quick", 1.0)
        tg.start_soon(worker, "slow", 5.0)
        await rt.sleep(2.0)
        tg.cancel_scope.cancel()
    assert finished == ["quick"]
    assert rt.now() == 2.0


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_asyncio_task_group_and_wait() -> None:
    rt = Runtime()
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(asyncio.sleep(s, result=s)) for s in (0.3, 0.1, 0.2)]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        assert [t.result() for t in done] == [0.1]
        assert rt.now() == 0.1
        assert len(pending) == 2
    assert rt.now() == 0.3


# --- Deadlock -----------------------------------------------------------------------------


def test_deadlock_when_every_task_waits_forever() -> None:
    async def main(rt: Runtime) -> None:
        event = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(event.wait)
            tg.start_soon(event.wait)
            await rt.sleep(5.0)  # time still runs while a timer is pending

    with pytest.raises(VirtualDeadlock, match="deadlock"):
        run(main)


def test_deadlock_on_sleep_forever() -> None:
    # anyio.sleep_forever() is a timer at +inf: it can never fire.
    async def main(rt: Runtime) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)
            await anyio.sleep_forever()

    started = time.perf_counter()
    with pytest.raises(VirtualDeadlock):
        run(main)
    assert time.perf_counter() - started < 1.0


def test_deadlock_on_a_lock_cycle() -> None:
    async def main(rt: Runtime) -> None:
        a, b = anyio.Lock(), anyio.Lock()

        async def take(first: anyio.Lock, second: anyio.Lock) -> None:
            async with first:
                await rt.sleep(1.0)
                async with second:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(take, a, b)
            tg.start_soon(take, b, a)

    with pytest.raises(VirtualDeadlock, match="3 tasks alive"):
        run(main)


def test_runtime_is_reusable_after_a_deadlock() -> None:
    async def stuck(rt: Runtime) -> None:
        await asyncio.get_running_loop().create_future()

    async def fine(rt: Runtime) -> float:
        await rt.sleep(2.0)
        return rt.now()

    with pytest.raises(VirtualDeadlock):
        run(stuck)
    assert run(fine) == 2.0


@pytest.mark.parametrize("virtual", [True, False], ids=["virtual", "stock"])
def test_a_virtual_run_collects_in_larger_batches_and_restores_the_thresholds(virtual: bool) -> None:
    """The collector's first threshold is raised for a virtual run only, and
    put back after it, also when the run fails: the process is the caller's."""
    before = gc.get_threshold()

    async def thresholds(rt: Runtime) -> tuple[int, ...]:
        return gc.get_threshold()

    async def fails(rt: Runtime) -> None:
        raise RuntimeError("boom")

    during = run(thresholds, virtual=virtual)
    assert during == ((50_000, *before[1:]) if virtual else before)
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError, match="boom"):
        run(fails, virtual=virtual)
    assert gc.get_threshold() == before


# --- Real I/O is refused ------------------------------------------------------------------


async def _open_connection(rt: Runtime) -> object:
    return await asyncio.open_connection("127.0.0.1", 9)


async def _run_in_executor(rt: Runtime) -> object:
    return await asyncio.get_running_loop().run_in_executor(None, sum, [1, 2])


async def _to_thread(rt: Runtime) -> object:
    return await asyncio.to_thread(sum, [1, 2])


async def _anyio_to_thread(rt: Runtime) -> object:
    return await anyio.to_thread.run_sync(sum, [1, 2])


async def _subprocess_exec(rt: Runtime) -> object:
    return await asyncio.create_subprocess_exec("true")


async def _subprocess_shell(rt: Runtime) -> object:
    return await asyncio.create_subprocess_shell("true")


async def _anyio_run_process(rt: Runtime) -> object:
    return await anyio.run_process(["true"])


async def _getaddrinfo(rt: Runtime) -> object:
    return await anyio.getaddrinfo("localhost", 80)


async def _start_server(rt: Runtime) -> object:
    return await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)


@pytest.mark.parametrize(
    "io",
    [
        _open_connection,
        _run_in_executor,
        _to_thread,
        _anyio_to_thread,
        _subprocess_exec,
        _subprocess_shell,
        _anyio_run_process,
        _getaddrinfo,
        _start_server,
    ],
)
def test_real_io_raises(io: Callable[[Runtime], Awaitable[object]]) -> None:
    async def main(rt: Runtime) -> object:
        return await io(rt)

    with pytest.raises(VirtualIOError, match="virtual-time loop"):
        run(main)


def test_anyio_threads_work_on_the_stock_loop() -> None:
    assert run(_anyio_to_thread, virtual=False) == 3


# --- Random streams -----------------------------------------------------------------------


def _draws(rt: Runtime, n: int = 5) -> list[float]:
    return [rt.rng.random() for _ in range(n)]


def test_derive_is_reproducible() -> None:
    assert _draws(Runtime(seed=3).derive("replica")) == _draws(Runtime(seed=3).derive("replica"))
    assert _draws(Runtime(seed=3).derive("a").derive("b")) == _draws(
        Runtime(seed=3).derive("a").derive("b")
    )


def test_derive_streams_differ_by_name_and_seed() -> None:
    rt = Runtime(seed=3)
    streams = [
        _draws(rt),
        _draws(rt.derive("a")),
        _draws(rt.derive("b")),
        _draws(rt.derive("a").derive("b")),
        _draws(Runtime(seed=4).derive("a")),
    ]
    assert len({tuple(s) for s in streams}) == len(streams)


def test_derive_streams_are_independent() -> None:
    one, two = Runtime(seed=9), Runtime(seed=9)
    a1, b1 = one.derive("a"), one.derive("b")
    plain = [a1.rng.random() for _ in range(10)]
    a2, b2 = two.derive("a"), two.derive("b")
    interleaved = []
    for _ in range(10):  # draws on "b" (and on the parent) must not shift "a"
        b2.rng.random()
        two.rng.random()
        interleaved.append(a2.rng.random())
    assert interleaved == plain
    assert b1.rng.random() != b2.rng.random()  # b2 really did draw


def test_streams_do_not_depend_on_the_process() -> None:
    # Stream seeds come from hashlib, not hash(): fixed across PYTHONHASHSEED values.
    assert Runtime(seed=1).derive("replica").rng.random() == 0.43533925674150964
    assert Runtime(seed=1).rng.random() == 0.8175923289989419


def test_derive_shares_models_and_clock() -> None:
    latency = LatencyModel(default=Constant(0.25))
    rt = Runtime(seed=2, latency=latency, wall_clock=lambda: 7)
    child = rt.derive("x")
    assert child.latency is latency
    assert child.seed == 2
    assert child.name == "x"
    assert child.derive("y").name == "x/y"

    async def main(_: Runtime) -> tuple[float, int]:
        took = await child.delay("anything")
        return took, child.wall_ms()

    assert run(main) == (0.25, 7)


# --- The stock loop -----------------------------------------------------------------------


def test_runtime_on_the_stock_loop() -> None:
    async def main(rt: Runtime) -> tuple[bool, float, int, float]:
        start, wall_before = rt.now(), time.time_ns() // 1_000_000
        pool = rt.core_pool(2, "cpu")
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(rt.cpu, 0.002, pool)
        await rt.delay("x")
        return rt.virtual, rt.now() - start, rt.wall_ms() - wall_before, pool.statistics().busy_s

    virtual, took, wall_ms, busy = run(
        main, virtual=False, latency=LatencyModel(default=Constant(0.001))
    )
    assert not virtual
    # Two rounds of 2 ms jobs, then 1 ms (a real timer may fire a hair early).
    assert took >= 0.0049
    assert 0 <= wall_ms < 5_000  # the real wall clock, not the virtual epoch
    assert busy >= 0.0079


@pytest.mark.asyncio
async def test_unmarked_tests_run_on_the_stock_loop() -> None:
    rt = Runtime()
    assert not rt.virtual
    assert not isinstance(asyncio.get_running_loop(), VirtualEventLoop)
    before = rt.now()
    await rt.sleep(0.001)
    assert rt.now() - before >= 0.0009
    with anyio.move_on_after(0.001) as scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught


def test_unique_hex_is_seeded_in_virtual_time_and_unique_in_real_time() -> None:
    async def draw(rt: Runtime) -> str:
        return rt.unique_hex()

    assert run(draw, seed=5) == run(draw, seed=5)  # virtual: a function of the seed
    a, b = run(draw, seed=5, virtual=False), run(draw, seed=5, virtual=False)
    assert a != b  # real: two processes with one seed never share writer ids
    assert len(a) == 32
