"""Scheduling policies of the virtual loop (sim/runtime/schedule.py): fifo is
asyncio's order and untouched; random and pct reorder only what asyncio's
semantics leave free (different tasks' steps), are reproducible from the
run's seed, and reach a trace's metadata and replay command."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.cli.main import main as cli_main
from sim.history.checker import check_history
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec, parse_known_bad
from sim.nemesis.sweep import SeedTask, run_seed, write_run_trace
from sim.runtime import patches
from sim.runtime.core import Runtime, run
from sim.runtime.errors import InvalidUsage
from sim.runtime.loop import VirtualEventLoop
from sim.runtime.schedule import PctQueue, parse_schedule, schedule_rng

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from pathlib import Path

pytestmark = pytest.mark.virtual

POLICIES = ("random", "pct", "pct:d=2,k=300")


def _contention(log: list[tuple[int, int]], tasks: int = 8, steps: int = 6) -> object:
    """Tasks that each log `steps` steps, yielding between them: all of them
    ready at every instant, so only the policy decides the order."""

    async def main(rt: Runtime) -> None:
        async def worker(k: int) -> None:
            for i in range(steps):
                log.append((k, i))
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(k) for k in range(tasks)))

    return main


def _order(schedule: str, seed: int) -> list[tuple[int, int]]:
    log: list[tuple[int, int]] = []
    run(_contention(log), seed=seed, schedule=schedule)  # type: ignore[arg-type]
    return log


def test_fifo_keeps_asyncios_deque_and_round_robin() -> None:
    loop = VirtualEventLoop()
    try:
        assert type(loop._ready) is collections.deque
    finally:
        loop.close()
    assert _order("fifo", 1) == [(k, i) for i in range(6) for k in range(8)]
    assert _order("fifo", 1) == _order("fifo", 2)


@pytest.mark.parametrize("schedule", POLICIES)
def test_policy_order_depends_on_the_seed_only(schedule: str) -> None:
    orders = [tuple(_order(schedule, seed)) for seed in range(4)]
    assert orders[0] == tuple(_order(schedule, 0)), "same seed, same schedule"
    assert len(set(orders)) == 4, "four seeds, four schedules"
    assert all(o != tuple(_order("fifo", 0)) for o in orders)
    for order in orders:  # each task's own steps stay in program order
        for k in range(8):
            assert [i for t, i in order if t == k] == list(range(6))


def _ordered_program(log: list[tuple[str, int, int]]) -> Callable[[Runtime], Coroutine[Any, Any, None]]:
    async def main(rt: Runtime) -> None:
        loop = asyncio.get_running_loop()

        def done(k: int, i: int) -> Callable[[asyncio.Future[None]], None]:
            return lambda f: log.append(("done", k, i))

        async def worker(k: int) -> None:
            for i in range(4):
                loop.call_soon(log.append, ("soon", k, i))
            fut: asyncio.Future[None] = loop.create_future()
            for i in range(4):
                fut.add_done_callback(done(k, i))
            fut.set_result(None)
            await asyncio.sleep(0)
            log.append(("step", k, 0))

        await asyncio.gather(*(worker(k) for k in range(6)))

    return main


@pytest.mark.parametrize("schedule", POLICIES)
def test_what_asyncio_orders_stays_ordered(schedule: str) -> None:
    """A task's own call_soon callbacks, and a future's done-callbacks, run in
    the order they were scheduled; the task's next step runs after the
    callbacks it scheduled before yielding."""
    for seed in range(5):
        log: list[tuple[str, int, int]] = []
        run(_ordered_program(log), seed=seed, schedule=schedule)
        for k in range(6):
            mine = [(what, i) for what, t, i in log if t == k]
            assert mine == [*(("soon", i) for i in range(4)), *(("done", i) for i in range(4)), ("step", 0)]


def test_pct_starves_no_task_forever() -> None:
    """A high-priority task polling with sleep(0) for a low-priority one: the
    fairness bound lets the other run (without it the instant never ends)."""

    async def main(rt: Runtime) -> int:
        flag = asyncio.Event()
        spins = 0

        async def poller() -> None:
            nonlocal spins
            while not flag.is_set():
                spins += 1
                await asyncio.sleep(0)

        async def setter() -> None:
            flag.set()

        await asyncio.gather(*(poller() for _ in range(3)), setter())
        return spins

    for seed in range(10):
        assert run(main, seed=seed, schedule="pct") < 10_000


def test_parse_schedule() -> None:
    assert parse_schedule("fifo") == "fifo"
    assert parse_schedule(" random ") == "random"
    assert parse_schedule("pct") == "pct"
    assert parse_schedule("pct:d=3,k=2000") == "pct"
    assert parse_schedule("pct:d=2") == "pct:d=2,k=2000"
    for bad in ("", "lifo", "pct:d=0", "pct:k=5", "random:1", "pct:d=2,k=0"):
        with pytest.raises(InvalidUsage):
            parse_schedule(bad)
    with pytest.raises(InvalidUsage, match="virtual loop"):
        run(_contention([]), virtual=False, schedule="random")  # type: ignore[arg-type]


def test_policy_stream_is_the_runtime_schedule_stream() -> None:
    """The policy draws from `derive("schedule")`'s stream, so nothing else a
    seed draws (latencies, fault plans, client choices) moves."""
    a, b = schedule_rng(42), Runtime(seed=42).derive("schedule").rng
    assert [a.random() for _ in range(5)] == [b.random() for _ in range(5)]
    rt = Runtime(seed=42)
    assert a.getstate() != rt.rng.getstate()


def test_patches_ready_queue_and_handle_callback() -> None:
    """Patch 6 (tests/sim/runtime/test_patches.py's companion): a policy is the
    loop's ready queue, and a task's step is told by its callback."""
    loop = VirtualEventLoop(schedule="pct", seed=3)
    try:
        assert isinstance(loop._ready, PctQueue)

        async def noop() -> None:
            pass

        task = loop.create_task(noop())
        [(owner, handles)] = loop._ready._chains.items()
        assert owner is task
        assert getattr(patches.handle_callback(handles[0]), "__self__", None) is task
        loop.run_until_complete(task)
    finally:
        loop.close()


def _trace_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("schedule", ["random", "pct"])
def test_same_seed_same_policy_byte_identical_trace(schedule: str, tmp_path: Path) -> None:
    spec = default_spec("ddl-dml", "decoupled", 3, schedule=schedule)
    for name in ("a", "b"):
        history, events = run_spec(spec)
        write_run_trace(tmp_path / name, spec, history, events)
    a, b = _trace_bytes(tmp_path / "a"), _trace_bytes(tmp_path / "b")
    assert a == b
    meta = json.loads(a["meta.json"])
    assert meta["schedule"] == schedule
    assert meta["rerun"].endswith(f"--schedule {schedule}")


def test_policies_give_different_schedules_under_contention() -> None:
    """ddl-dml on decoupled: many clients' statements in flight at once. The
    same seed (same latency draws) under each policy runs differently."""
    runs = {}
    for schedule in ("fifo", "random", "pct"):
        h, _ = run_spec(default_spec("ddl-dml", "decoupled", 1, schedule=schedule))
        runs[schedule] = tuple((o.invoke_ns, o.complete_ns, o.status) for o in (h.op(i) for i in range(h.n)))
    assert len(set(runs.values())) == 3
    h2, _ = run_spec(default_spec("ddl-dml", "decoupled", 1, schedule="random"))
    assert tuple((o.invoke_ns, o.complete_ns, o.status) for o in (h2.op(i) for i in range(h2.n))) == runs["random"]


@pytest.mark.parametrize("schedule", ["random", "pct"])
def test_a_variant_caught_under_fifo_is_caught_under_each_policy(schedule: str) -> None:
    """peeks_ignore_catalog_ts on seed001 (test_known_bad's bound: 12 seeds)."""
    expected = {"insert-unknown-table", "select-unknown-table"}
    for seed in range(12):
        h, ev = run_spec(default_spec("seed001", "decoupled", seed, schedule=schedule,
                                      known_bad=parse_known_bad(["peeks_ignore_catalog_ts"])))
        if expected & set(check_history(h, ev).names):
            return
    pytest.fail(f"peeks_ignore_catalog_ts not caught within 12 seeds under {schedule}")


def test_sweep_task_carries_the_policy() -> None:
    r = run_seed(SeedTask("seed001", "decoupled", 2, ("peeks_ignore_catalog_ts",), "random"))
    assert r.rerun.endswith("--schedule random")
    h, _ = run_spec(default_spec("seed001", "decoupled", 2, schedule="random",
                                 known_bad=parse_known_bad(["peeks_ignore_catalog_ts"])))
    assert r.ops == h.n


def test_cli_run_replays_its_schedule(tmp_path: Path) -> None:
    runner = CliRunner()
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        r = runner.invoke(app, ["anomalies", "run", "ddl-dml", "--config", "decoupled", "--seed", "2",
                                "--schedule", "pct", "--out", str(out)])
        assert r.exit_code in (0, 1), r.output
        assert "--schedule pct" in r.output
        outs.append({k: v for k, v in _trace_bytes(out).items() if k not in ("verdict.json", ".coordsim-output")})
    assert outs[0] == outs[1]
    assert json.loads(outs[0]["meta.json"])["schedule"] == "pct"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "seed001", "--schedule", "lifo"], "unknown schedule 'lifo'"),
        (["run", "seed001", "--schedule", "random", "--mode", "real"], "needs virtual mode"),
        (["sweep", "--scenario", "seed001", "--config", "decoupled", "--seeds", "2", "--schedule", "x"],
         "unknown schedule 'x'"),
    ],
)
def test_bad_schedule_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", "anomalies", *args])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message in err[0], err
    assert list(tmp_path.iterdir()) == []
