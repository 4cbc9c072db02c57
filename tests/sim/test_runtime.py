"""The Runtime and the virtual-time loop: clock, cancellation, I/O refusal, modeled
CPU, random streams and latency distributions.

Virtual-time tests assert exact times: a timer fires at exactly its deadline, so
`==` on floats is the contract here, not an accident.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import statistics
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from sim.runtime.core import Runtime, run
from sim.runtime.cpu import CorePoolStatistics
from sim.runtime.latency import (
    Constant,
    Distribution,
    Empirical,
    LatencyModel,
    LatencySpecError,
    LogNormal,
    Uniform,
)
from sim.runtime.loop import VIRTUAL_EPOCH_MS, VirtualDeadlock, VirtualEventLoop, VirtualIOError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from typing import Any


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


# --- Modeled CPU --------------------------------------------------------------------------


async def _four_jobs(rt: Runtime, cores: int, seconds: float) -> tuple[float, CorePoolStatistics]:
    pool = rt.core_pool(cores, "coord")
    start = rt.now()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(rt.cpu, seconds, pool)
    return rt.now() - start, pool.statistics()


def test_core_pool_of_one_serializes() -> None:
    async def main(rt: Runtime) -> tuple[float, CorePoolStatistics]:
        return await _four_jobs(rt, 1, 0.5)

    took, stats = run(main)
    assert took == 2.0
    assert stats == CorePoolStatistics("coord", 1, busy_s=2.0, acquisitions=4, wait_s=3.0)


def test_core_pool_of_two_runs_two_at_a_time() -> None:
    async def main(rt: Runtime) -> tuple[float, CorePoolStatistics]:
        return await _four_jobs(rt, 2, 0.5)

    took, stats = run(main)
    assert took == 1.0
    assert stats == CorePoolStatistics("coord", 2, busy_s=2.0, acquisitions=4, wait_s=1.0)


@pytest.mark.virtual
@pytest.mark.asyncio
async def test_core_pool_serves_in_arrival_order_and_survives_cancellation() -> None:
    rt = Runtime()
    pool = rt.core_pool(1, "loop")
    order: list[str] = []

    async def job(name: str, seconds: float) -> None:
        await rt.cpu(seconds, pool)
        order.append(name)

    async with anyio.create_task_group() as tg:
        for name in "abc":
            tg.start_soon(job, name, 1.0)
        await rt.sleep(0.1)  # "a" holds the core now
        with anyio.move_on_after(0.5):  # gives up while waiting for the core
            await job("impatient", 1.0)
    assert order == ["a", "b", "c"]
    assert rt.now() == 3.0
    assert pool.statistics() == CorePoolStatistics("loop", 1, 3.0, acquisitions=3, wait_s=3.0)


def test_core_pool_needs_a_core() -> None:
    with pytest.raises(ValueError, match=">= 1 core"):
        Runtime().core_pool(0, "none")


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


# --- Distributions and the latency model ------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "constant", "ms": 1.1},
        {"kind": "uniform", "low_ms": 0.3, "high_ms": 2.7},
        {"kind": "lognormal", "median_ms": 12.345, "sigma": 0.6},
        {"kind": "empirical", "samples_ms": [0.1, 5.0, 2.5, 2.5]},
    ],
)
def test_distribution_round_trips(spec: Mapping[str, Any]) -> None:
    dist = Distribution.from_dict(spec)
    assert dist.to_dict() == spec
    assert Distribution.from_dict(dist.to_dict()) == dist


def test_distribution_values() -> None:
    assert Distribution.from_dict({"kind": "constant", "ms": 3}) == Constant(0.003)
    assert Distribution.from_dict({"kind": "uniform", "low_ms": 1, "high_ms": 2}) == Uniform(
        0.001, 0.002
    )
    assert Distribution.from_dict({"kind": "lognormal", "median_ms": 4, "sigma": 1}) == LogNormal(
        0.004, 1.0
    )
    assert Distribution.from_dict({"kind": "empirical", "samples_ms": [1, 2]}) == Empirical(
        (0.001, 0.002)
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "gaussian", "ms": 1}, "unknown distribution kind 'gaussian'"),
        ({"ms": 1}, "unknown distribution kind None"),
        ({"kind": ["constant"]}, "unknown distribution kind"),
        ({"kind": "constant"}, r"constant distribution takes \['ms'\], got \[\]"),
        ({"kind": "constant", "ms": 1, "sigma": 2}, r"got \['ms', 'sigma'\]"),
        ({"kind": "constant", "ms": -1}, "finite duration >= 0"),
        ({"kind": "constant", "ms": "soon"}, "bad constant distribution"),
        ({"kind": "constant", "ms": None}, "bad constant distribution"),
        ({"kind": "constant", "ms": math.inf}, "finite duration"),
        ({"kind": "uniform", "low_ms": 5, "high_ms": 1}, "uniform high 0.001 < low 0.005"),
        ({"kind": "uniform", "low_ms": math.nan, "high_ms": 1}, "finite duration"),
        ({"kind": "lognormal", "median_ms": 1, "sigma": -0.5}, "sigma must be >= 0"),
        ({"kind": "lognormal", "median_ms": -1, "sigma": 0.5}, "lognormal median"),
        ({"kind": "empirical", "samples_ms": []}, "at least one sample"),
        ({"kind": "empirical", "samples_ms": [1, -2]}, "empirical sample"),
        ({"kind": "empirical", "samples_ms": [1, "x"]}, "bad empirical distribution"),
        ({"kind": "empirical", "samples_ms": 5}, "bad empirical distribution"),
        ({"kind": "empirical", "samples_ms": "123"}, "must be a list"),
    ],
)
def test_bad_distribution_specs(spec: Mapping[str, Any], message: str) -> None:
    with pytest.raises(LatencySpecError, match=message):
        Distribution.from_dict(spec)


def test_bad_latency_profiles() -> None:
    with pytest.raises(LatencySpecError, match="table of distributions"):
        LatencyModel.from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(LatencySpecError, match="latency 'oracle': expected a table"):
        LatencyModel.from_dict({"oracle": 5})
    with pytest.raises(LatencySpecError, match="latency 'oracle': unknown distribution kind"):
        LatencyModel.from_dict({"oracle": {"kind": "fast"}})
    assert issubclass(LatencySpecError, ValueError)


def test_lognormal_median_matches_its_samples() -> None:
    dist = LogNormal(0.005, 0.8)
    rng = random.Random(1234)
    samples = [dist.sample(rng) for _ in range(20_001)]
    assert statistics.median(samples) == pytest.approx(0.005, rel=0.05)
    assert statistics.fmean(samples) == pytest.approx(dist.mean(), rel=0.05)
    assert min(samples) > 0
    assert LogNormal(0.0, 1.0).sample(rng) == 0.0


def test_samples_stay_in_range() -> None:
    rng = random.Random(5)
    uniform = Uniform(0.001, 0.002)
    assert all(0.001 <= uniform.sample(rng) <= 0.002 for _ in range(1000))
    empirical = Empirical([0.001, 0.004, 0.004])
    drawn = {empirical.sample(rng) for _ in range(1000)}
    assert drawn == {0.001, 0.004}
    assert empirical.mean() == pytest.approx(0.003)
    assert uniform.mean() == pytest.approx(0.0015)
    assert Constant(0.5).sample(rng) == 0.5 == Constant(0.5).mean()


def test_latency_model_falls_back_to_dotted_prefix_then_default() -> None:
    oracle, read_ts, default = Constant(0.001), Constant(0.002), Constant(0.003)
    model = LatencyModel({"oracle": oracle, "oracle.read_ts": read_ts}, default=default)
    assert model.distribution("oracle.read_ts") is read_ts
    assert model.distribution("oracle.read_ts.retry") is read_ts
    assert model.distribution("oracle.write_ts") is oracle
    assert model.distribution("oracle") is oracle
    assert model.distribution("oracles") is default
    assert model.distribution("replica.peek") is default
    assert model.distribution("") is default
    assert model.names() == ["oracle", "oracle.read_ts"]

    bare = LatencyModel({"oracle": oracle})
    with pytest.raises(LatencySpecError, match=r"no latency configured for 'replica\.peek'"):
        bare.distribution("replica.peek")

    faster = model.with_overrides({"oracle": Constant(0.0)})
    assert faster.distribution("oracle.write_ts") == Constant(0.0)
    assert faster.distribution("oracle.read_ts") is read_ts
    assert model.distribution("oracle.write_ts") is oracle  # unchanged


def test_latency_model_round_trips() -> None:
    spec = {
        "default": {"kind": "constant", "ms": 0.5},
        "oracle": {"kind": "lognormal", "median_ms": 2.0, "sigma": 0.4},
        "replica.peek": {"kind": "uniform", "low_ms": 1.0, "high_ms": 3.0},
    }
    model = LatencyModel.from_dict(spec)
    assert model.to_dict() == spec
    assert LatencyModel.from_dict(model.to_dict()).to_dict() == spec
    assert LatencyModel.from_dict({}).to_dict() == {}


def test_delay_sleeps_for_the_sample_it_returns() -> None:
    latency = LatencyModel({"net": Uniform(0.001, 0.01)})

    async def main(rt: Runtime) -> None:
        total = 0.0
        for _ in range(50):
            total += await rt.delay("net.rpc")
        assert rt.now() == pytest.approx(total, abs=1e-12)
        before = rt.now()
        assert 0.001 <= rt.sample("net") <= 0.01
        assert rt.now() == before  # sample() does not sleep

    run(main, seed=3, latency=latency)


def test_default_latency_is_zero() -> None:
    async def main(rt: Runtime) -> tuple[float, float]:
        return await rt.delay("anything.at.all"), rt.now()

    assert run(main) == (0.0, 0.0)


def test_same_seed_same_delays() -> None:
    latency = LatencyModel(default=LogNormal(0.002, 1.0))

    async def main(rt: Runtime) -> list[float]:
        return [await rt.delay("x") for _ in range(20)]

    assert run(main, seed=8, latency=latency) == run(main, seed=8, latency=latency)
    assert run(main, seed=8, latency=latency) != run(main, seed=9, latency=latency)


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


def test_real_time_cpu_is_slept_in_quanta_not_per_cost() -> None:
    """A thousand 50 µs costs are slept off in about fifty 1 ms sleeps, not a
    thousand timer rounds (each at least a millisecond on the stock loop), and
    the total slept plus what is still owed is exactly what was spent."""

    async def main(rt: Runtime) -> tuple[list[float], float]:
        slept: list[float] = []
        sleep = rt.sleep

        async def counting_sleep(seconds: float) -> None:
            slept.append(seconds)
            await sleep(seconds)

        rt.sleep = counting_sleep  # type: ignore[method-assign]
        pool = rt.core_pool(1, "loop")
        for _ in range(1000):
            await rt.cpu(50e-6, pool)
        return slept, pool.owed_s

    slept, owed = run(main, virtual=False)
    assert 45 <= len(slept) <= 51
    assert sum(slept) + owed == pytest.approx(0.05)
