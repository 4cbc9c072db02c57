"""Checker `subscribe` (issue 36, item 5): hand-written histories with one
defect each — a dropped update, a duplicated one, one out of timestamp order,
one beyond the frontier, a phantom, a wrong snapshot, a stale `as_of` — are
caught by name; the correct stream is valid; what the replay cannot know
leaves the verdict `unknown`, never `valid`; and real recorded runs of the
`subscribe` workload (event loop, decoupled, two adapters) are judged valid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from coordinator import subscribe as coordinator_subscribe
from coordinator.adapters import MultiAdapterCoordinator
from sim.history.capture import RecordingSession, event_sink
from sim.history.checker import subscribe as sc
from sim.history.checker.run import check_history
from sim.history.checker.subscribe import check_subscribe, subscribe_args
from sim.history.checker.verdict import Outcome
from sim.history.model import History, Kind, Op, Status
from sim.history.recorder import HistoryRecorder
from sim.load.workloads import OpContext, workload
from sim.runtime.core import run
from tests.coordinator.harness import build_coordinator, config, latency_model, virtual_env

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.runtime.core import Runtime

#: A stream as `subscribe_args` takes it: [(upper, [(ts, value, diff), …]), …].
Batches = list[tuple[int, list[tuple[int, int, int]]]]

#: The correct stream of `_history`: the snapshot {1} at 15, then +2 at 20,
#: -1 at 30, 2 -> 12 at 40 (with progress alone in between).
GOOD: Batches = [
    (16, [(15, 1, 1)]),
    (25, [(20, 2, 1)]),
    (28, []),
    (35, [(30, 1, -1)]),
    (45, [(40, 2, -1), (40, 12, 1)]),
]


def _op(oid: int, kind: Kind, t: int, **kw: Any) -> Op:
    """Op `oid` of process `oid` on table t, invoked at `t` ns, ok 5 ns later."""
    kw.setdefault("status", Status.OK)
    kw.setdefault("complete_ns", None if kw["status"] is Status.INFO else t + 5)
    return Op(op_id=oid, process=kw.pop("process", oid), kind=kind, obj=kw.pop("obj", "t"), invoke_ns=t, **kw)


def _history(
    batches: Batches, *, as_of: int = 15, subscribe_at: int = 15, extra: Sequence[Op] = (), **options: Any
) -> History:
    """create t; insert 1 at 10; the subscription; insert 2 at 20; delete 1
    at 30; update 2 -> 12 at 40."""
    return History.from_ops([
        _op(0, Kind.CREATE_TABLE, 0, catalog_ts=1),
        _op(1, Kind.ADD, 5, elements=(1,), write_ts=10),
        _op(2, Kind.SUBSCRIBE, subscribe_at, complete_ns=1000, args=subscribe_args(as_of, batches, **options)),
        _op(3, Kind.ADD, 100, elements=(2,), write_ts=20),
        _op(4, Kind.DELETE, 200, args={"where": [["=", 1]]}, count=1, read_ts=25, write_ts=30),
        _op(5, Kind.UPDATE, 300, args={"where": [["=", 2]], "add": 10}, count=1, read_ts=35, write_ts=40),
        *extra,
    ])


def _names(batches: Batches, **kw: Any) -> list[str]:
    v = check_subscribe(_history(batches, **kw))
    return v.names


def test_the_correct_stream_is_valid_and_judged() -> None:
    h = _history(GOOD)
    v = check_subscribe(h)
    assert v.outcome is Outcome.VALID, v.anomalies
    assert v.coverage is not None
    assert v.coverage.judged == {2}
    assert v.stats["judged"] == 1
    report = check_history(h)
    assert report.outcome is Outcome.VALID, [a for v in report.verdicts for a in v.anomalies][:3]
    assert report.complete


def test_a_dropped_update_is_caught() -> None:
    dropped = [GOOD[0], GOOD[1], GOOD[2], (35, []), GOOD[4]]
    v = check_subscribe(_history(dropped))
    assert v.names == [sc.MISSING]
    assert "(1, -1) at 30" in v.anomalies[0].explanation
    assert check_history(_history(dropped)).outcome is Outcome.INVALID


def test_a_duplicated_update_is_caught() -> None:
    twice = [GOOD[0], (25, [(20, 2, 1), (20, 2, 1)]), *GOOD[2:]]
    assert _names(twice) == [sc.DUPLICATE]
    # Delivered again in a later batch: duplicated, and late.
    again = [GOOD[0], GOOD[1], (28, [(20, 2, 1)]), *GOOD[3:]]
    assert _names(again) == [sc.DUPLICATE, sc.OUT_OF_ORDER]


def test_an_out_of_order_update_is_caught() -> None:
    # +2 at 20 arrives only after the progress passed 25.
    late = [GOOD[0], (25, []), (28, [(20, 2, 1)]), *GOOD[3:]]
    assert _names(late) == [sc.OUT_OF_ORDER]
    # Within one batch, a later time before an earlier one.
    swapped = [GOOD[0], (35, [(30, 1, -1), (20, 2, 1)]), *GOOD[4:]]
    assert _names(swapped) == [sc.OUT_OF_ORDER]
    # Progress that goes back.
    regress = [GOOD[0], GOOD[1], (22, []), (35, [(30, 1, -1)]), GOOD[4]]
    assert _names(regress) == [sc.OUT_OF_ORDER]


def test_updates_beyond_the_frontier_and_phantoms_are_caught() -> None:
    # -1 at 30 announced in a batch whose progress is only 25.
    early = [GOOD[0], (25, [(20, 2, 1), (30, 1, -1)]), (35, []), GOOD[4]]
    assert _names(early) == [sc.BEYOND]
    # Beyond the last progress: not counted, but still beyond.
    last = [*GOOD[:-1], (45, [(40, 2, -1), (40, 12, 1), (50, 7, 1)])]
    assert _names(last) == [sc.BEYOND]
    phantom = [GOOD[0], (25, [(20, 2, 1), (22, 99, 1)]), *GOOD[2:]]
    assert _names(phantom) == [sc.PHANTOM]
    wrong_time = [GOOD[0], (25, [(21, 2, 1)]), *GOOD[2:]]
    assert _names(wrong_time) == [sc.MISSING, sc.PHANTOM]


def test_a_wrong_snapshot_is_caught() -> None:
    assert _names([(16, []), *GOOD[1:]]) == [sc.SNAPSHOT]
    assert _names([(16, [(15, 1, 1), (15, 1, 1)]), *GOOD[1:]]) == [sc.SNAPSHOT]
    # SNAPSHOT = false: nothing at as_of is right, the rows are wrong.
    assert _names([(16, []), *GOOD[1:]], snapshot=False) == []
    assert _names(GOOD, snapshot=False) == [sc.SNAPSHOT]


def test_a_stale_as_of_is_caught_unless_asked_for() -> None:
    # Begun after the insert at 10 was acknowledged, yet as_of 5.
    stale = [(6, []), (25, [(10, 1, 1), (20, 2, 1)]), *GOOD[2:]]
    assert _names(stale, as_of=5) == ["not-strict-serializable"]
    # AS OF 5, asked for: not strict serializable by request.
    assert _names(stale, as_of=5, explicit=True) == []


def test_what_the_replay_cannot_know_is_unknown_not_valid() -> None:
    # An indeterminate UPDATE before the window: the contents are unknowable.
    info = _op(6, Kind.UPDATE, 50, status=Status.INFO, args={"add": 1})
    h = _history(GOOD, extra=[info])
    v = check_subscribe(h)
    assert v.coverage is not None
    assert v.coverage.judged == set()
    assert sc.UNKNOWABLE in v.coverage.unjudged
    assert check_history(h).outcome is Outcome.UNKNOWN
    # A table dropped and created again: incarnations are not modeled.
    drop = _op(7, Kind.DROP_TABLE, 2000, catalog_ts=5)
    assert check_history(_history(GOOD, extra=[drop])).outcome is Outcome.UNKNOWN
    # A stream that is not one.
    bad = History.from_ops([_op(0, Kind.CREATE_TABLE, 0), _op(1, Kind.SUBSCRIBE, 10, args={"batches": 3})])
    v = check_subscribe(bad)
    assert v.coverage is not None
    assert sc.MALFORMED in v.coverage.unjudged


def test_an_indeterminate_insert_is_placed_by_what_was_seen() -> None:
    seen = [*GOOD[:-1], (45, [(40, 2, -1), (40, 12, 1), (42, 77, 1)])]
    info = _op(6, Kind.ADD, 400, status=Status.INFO, elements=(77,))
    assert check_subscribe(_history(seen, extra=[info])).outcome is Outcome.VALID
    # Seen by nobody: it did not happen, and the correct stream is valid.
    assert check_subscribe(_history(GOOD, extra=[info])).outcome is Outcome.VALID


def test_a_history_without_subscriptions_is_valid_and_judges_nothing() -> None:
    h = History.from_ops([_op(0, Kind.CREATE_TABLE, 0), _op(1, Kind.ADD, 5, elements=(1,), write_ts=3)])
    v = check_subscribe(h)
    assert v.outcome is Outcome.VALID
    assert not v.skipped
    assert v.coverage is not None
    assert v.coverage.judged == set()


# --- real recorded runs ------------------------------------------------------------------------


SETUPS = (("event-loop", 1), ("decoupled", 1), ("decoupled", 2))


def _recorded_run(name: str, adapters: int) -> tuple[History, list[Any]]:
    """The `subscribe` workload's writers (3 clients, 30 statements each) and
    subscribers on `name` with `adapters`, every statement and stream recorded."""
    wl = workload("subscribe")
    tables = 2

    async def main(rt: Runtime) -> tuple[History, list[Any]]:
        recorder = HistoryRecorder(rt.now)
        cfg = config(name, adapters=adapters) if adapters > 1 else config(name)
        async with build_coordinator(cfg, virtual_env(rt), rt, events=event_sink(recorder)) as coord:
            sessions = [0]

            def session() -> RecordingSession:
                sessions[0] += 1
                return RecordingSession(coord.connect(), recorder, client=f"c{sessions[0]}")

            await wl.setup(session(), tables)
            counter = [0]

            async def writer(client: int) -> None:
                s = session()
                for k in range(30):
                    r = await wl.op(s, OpContext(client, k, tables, rt, counter, level=1))
                    assert r.ok, r.error
                    await rt.sleep(0.005)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as bg:
                    bg.start_soon(wl.background, session, tables, rt)
                    async with anyio.create_task_group() as tg:
                        for c in range(3):
                            tg.start_soon(writer, c)
                    bg.cancel_scope.cancel()
            if isinstance(coord, MultiAdapterCoordinator):
                assert sum(1 for a in coord.adapters if a.statistics().statements) == adapters
        return recorder.history(), recorder.events()

    return run(main, seed=11, latency=latency_model())


@pytest.mark.virtual
@pytest.mark.parametrize(("name", "adapters"), SETUPS, ids=[f"{n}x{a}" for n, a in SETUPS])
def test_a_recorded_subscribe_workload_run_is_valid(name: str, adapters: int) -> None:
    """Every SUBSCRIBE of the run judged, and the whole history valid."""
    h, events = _recorded_run(name, adapters)
    v = check_subscribe(h)
    assert v.outcome is Outcome.VALID, v.anomalies
    assert v.stats["subscriptions"] >= 4
    assert v.stats["judged"] == v.stats["subscriptions"], v.coverage
    assert v.stats["updates"] > 0
    report = check_history(h, events)
    assert report.outcome is Outcome.VALID, [a for v in report.verdicts for a in v.anomalies][:3]


@pytest.mark.virtual
def test_a_run_whose_server_drops_updates_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run with a serving bug injected — every third listen batch
    loses its first update — is caught as dropped updates."""
    consolidated = coordinator_subscribe._consolidated
    calls = [0]

    def lossy(updates: Any, up_to: int | None) -> Any:
        out = consolidated(updates, up_to)
        calls[0] += 1
        return out[1:] if out and calls[0] % 3 == 0 else out

    monkeypatch.setattr(coordinator_subscribe, "_consolidated", lossy)
    h, _ = _recorded_run("decoupled", 2)
    v = check_subscribe(h)
    assert sc.MISSING in v.names, v.names
