"""Model-based test of a persist shard: random operations against a plain model.

The model is the list of acknowledged updates plus the upper and the reader's
since. Every read (snapshot, listen, a restarted client's snapshot) must equal
the model exactly: no acknowledged update lost or duplicated. It runs on mem
(virtual time, with lease expiry), on mem behind the unreliable wrappers at 5 %
and 20 % fault rates, and on Postgres Consensus + file Blob (real I/O).

Stateful rules cannot be async: each state machine owns one `asyncio.Runner`
and runs every rule's coroutine on it, so a listen opened by one rule can be
advanced by later ones on the same loop.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from persist.client import (
    Appended,
    Listen,
    ListenBatch,
    PersistClient,
    PersistConfig,
    ReadHandle,
    WriteHandle,
)
from persist.codec import Update, consolidate
from persist.faults import UnreliableBlob, UnreliableConsensus
from persist.frontier import Frontier
from persist.machine import LeaseExpiredError, Machine, MachineConfig, UpperMismatch
from persist.open import open_blob, open_consensus, open_location
from sim.runtime.core import Runtime
from sim.runtime.errors import Indeterminate
from sim.runtime.loop import VirtualEventLoop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine
    from pathlib import Path

    from persist.location import Blob, Consensus

LEASE_MS = 10_000
SHARD = "model"

# Small spaces, so that updates collide and consolidate.
updates_st = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 3), st.sampled_from([-1, 1, 2])),
    max_size=4,
)


def _rows(spec: list[tuple[int, int, int, int]], lower: int, upper: int) -> list[Update]:
    """Updates from `spec`, each time folded into `[lower, upper)`."""
    width = upper - lower
    return [Update(f"k{k}".encode(), f"v{v}".encode(), lower + t % width, d) for k, v, t, d in spec]


def _at(updates: list[Update], as_of: int) -> list[Update]:
    """The collection at `as_of`, as `ReadHandle.snapshot` returns it."""
    return [u._replace(ts=as_of) for u in consolidate([u for u in updates if u.ts <= as_of], since=as_of)]


class ShardModel(RuleBasedStateMachine):
    """A shard and its model; subclasses choose the location and the loop."""

    virtual: ClassVar[bool] = True
    fault_rate: ClassVar[float] = 0.0

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner(loop_factory=VirtualEventLoop if self.virtual else asyncio.new_event_loop)
        self.rt = Runtime(seed=11)
        self.updates: list[Update] = []
        self.upper = 0
        self.since = 0
        self.listen: Listen | None = None
        self.listen_iter: AsyncIterator[ListenBatch] | None = None
        self.listen_as_of = 0
        self.listened: list[Update] = []
        self.lazy: WriteHandle | None = None
        self.lazy_ok: tuple[int, int] = (0, 0)  # wall ms (start, end) of its last success
        self.shard = SHARD

    # --- plumbing ---------------------------------------------------------------------

    def run(self, coro_fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return self.runner.run(coro_fn())

    async def location(self) -> tuple[Blob, Consensus]:
        return await open_location()

    def config(self) -> PersistConfig:
        return PersistConfig(machine=MachineConfig(lease_ms=LEASE_MS, rollup_interval=8))

    @initialize()
    def open(self) -> None:
        async def go() -> None:
            inner_blob, inner_consensus = await self.location()
            self.inner = (inner_blob, inner_consensus)
            self.blob: Blob = inner_blob
            self.consensus: Consensus = inner_consensus
            if self.fault_rate:
                rng = random.Random(7)
                half = self.fault_rate / 2
                self.blob = UnreliableBlob(inner_blob, rng, p_fail=half, p_timeout=half)
                self.consensus = UnreliableConsensus(inner_consensus, rng, p_fail=half, p_timeout=half)
            # The client's task group must be entered and exited by one task, and
            # every rule runs as its own task: a host task owns the client until
            # teardown (which awaits it, so its failures surface).
            ready, self.stop = asyncio.Event(), asyncio.Event()

            async def host() -> None:
                try:
                    async with PersistClient(self.blob, self.consensus, self.rt, config=self.config()) as c:
                        self.client = c
                        ready.set()
                        await self.stop.wait()
                finally:
                    ready.set()  # also when entering failed: open() must not hang

            self.host = asyncio.get_running_loop().create_task(host())
            await ready.wait()
            if self.host.done():
                self.host.result()  # raises what went wrong
            self.writers = [await self.client.open_writer(self.shard) for _ in range(3)]
            self.reader: ReadHandle = await self.client.open_reader(self.shard)
            if self.virtual:
                self.lazy = await self.client.open_writer(self.shard, heartbeat=False)
                now = self.rt.wall_ms()
                self.lazy_ok = (now, now)

        self.run(go)

    def teardown(self) -> None:
        async def go() -> None:
            if not hasattr(self, "host"):
                return  # open() failed; its error is the one to see
            if self.listen_iter is not None:
                await self.listen_iter.aclose()  # type: ignore[attr-defined]
            self.stop.set()
            await self.host
            await self.inner[1].close()
            await self.inner[0].close()

        try:
            self.run(go)
        finally:
            self.runner.close()

    async def settle(self, rows: list[Update], expected: int, new_upper: int) -> bool:
        """After an error whose outcome is unknown, learns from the upper whether
        the append landed (only this test writes, so the upper says it)."""
        upper = await self.reader.fetch_recent_upper()
        if upper == Frontier.at(new_upper):
            return True
        assert upper == Frontier.at(expected), (upper, expected, new_upper)
        return False

    # --- writes -----------------------------------------------------------------------

    @rule(w=st.integers(0, 2), spec=updates_st, width=st.integers(1, 3))
    def compare_and_append(self, w: int, spec: list[tuple[int, int, int, int]], width: int) -> None:
        lower, upper = self.upper, self.upper + width
        rows = _rows(spec, lower, upper)

        async def go() -> None:
            result = await self.writers[w].compare_and_append(rows, lower, upper)
            assert result == Appended(Frontier.at(upper)), result

        self.run(go)
        self.updates += rows
        self.upper = upper

    @rule(w=st.integers(0, 2), off=st.sampled_from([-2, -1, 1, 2]), spec=updates_st)
    def compare_and_append_wrong_upper(self, w: int, off: int, spec: list[tuple[int, int, int, int]]) -> None:
        expected = max(0, self.upper + off)
        if expected == self.upper:
            return
        rows = _rows(spec, expected, expected + 1)

        async def go() -> None:
            result = await self.writers[w].compare_and_append(rows, expected, expected + 1)
            assert result == UpperMismatch(Frontier.at(self.upper)), result

        self.run(go)

    @rule(spec=updates_st, width=st.integers(1, 3))
    def race(self, spec: list[tuple[int, int, int, int]], width: int) -> None:
        """All writers compare_and_append at the same upper, each its own data:
        exactly one wins and the others learn the winner's upper. (The same new
        upper for all, so that what hypothesis draws next never depends on which
        writer the scheduler let win: real-time runs must replay identically.)"""
        lower, new_upper = self.upper, self.upper + width
        attempts = [
            [*_rows(spec, lower, new_upper), Update(f"w{i}".encode(), b"", lower, 1)]
            for i in range(len(self.writers))
        ]
        results: list[Appended | UpperMismatch | None] = [None] * len(self.writers)

        async def go() -> None:
            async def one(i: int) -> None:
                results[i] = await self.writers[i].compare_and_append(attempts[i], lower, new_upper)

            async with anyio.create_task_group() as tg:
                for i in range(len(self.writers)):
                    tg.start_soon(one, i)

        self.run(go)
        winners = [i for i, r in enumerate(results) if isinstance(r, Appended)]
        assert len(winners) == 1, results
        (win,) = winners
        for i, r in enumerate(results):
            assert r == (Appended if i == win else UpperMismatch)(Frontier.at(new_upper)), (i, r)
        self.updates += attempts[win]
        self.upper = new_upper

    @rule(w=st.integers(0, 2), overlap=st.integers(0, 2), spec=updates_st, width=st.integers(1, 3))
    def replicated_append(self, w: int, overlap: int, spec: list[tuple[int, int, int, int]], width: int) -> None:
        """`append` by a replica that is behind: the part already written must be
        the same data, and lands only once."""
        lower = max(0, self.upper - overlap)
        new_upper = self.upper + width
        already = [u for u in self.updates if u.ts >= lower]
        fresh = _rows(spec, self.upper, new_upper)

        async def go() -> None:
            result = await self.writers[w].append(already + fresh, lower, new_upper)
            assert result == Appended(Frontier.at(new_upper)), result

        self.run(go)
        self.updates += fresh
        self.upper = new_upper

    @rule(gap=st.integers(1, 3))
    def append_with_gap_is_refused(self, gap: int) -> None:
        lower = self.upper + gap

        async def go() -> None:
            result = await self.writers[0].append([], lower, lower + 1)
            assert result == UpperMismatch(Frontier.at(self.upper)), result

        self.run(go)

    # --- leases (virtual time only: real tests never sleep) ----------------------------

    @precondition(lambda self: self.virtual)
    @rule(seconds=st.sampled_from([1.0, 4.0, 25.0]))
    def time_passes(self, seconds: float) -> None:
        """Heartbeating handles keep their leases; the lazy writer's runs out."""
        self.run(lambda: self.rt.sleep(seconds))

    @precondition(lambda self: self.lazy is not None)
    @rule(spec=updates_st)
    def lazy_writer_appends(self, spec: list[tuple[int, int, int, int]]) -> None:
        lower, upper = self.upper, self.upper + 1
        rows = _rows(spec, lower, upper)
        last_start, last_end = self.lazy_ok
        outcome: list[object] = []

        async def go() -> None:
            assert self.lazy is not None
            start = self.rt.wall_ms()
            try:
                result = await self.lazy.compare_and_append(rows, lower, upper)
            except LeaseExpiredError:
                outcome.append("expired")
            except Indeterminate:
                outcome.append("applied" if await self.settle(rows, lower, upper) else "expired")
            else:
                assert result == Appended(Frontier.at(upper)), result
                outcome.append("applied")
            end = self.rt.wall_ms()
            if start - last_end > LEASE_MS:
                assert outcome[0] != "applied" or (end - last_start) <= LEASE_MS, "used an expired lease"
            if end - last_start <= LEASE_MS:
                assert outcome[0] == "applied", "lease expired early"
            if outcome[0] == "applied":
                self.lazy_ok = (start, end)
            else:
                with pytest.raises(LeaseExpiredError):
                    await self.lazy.compare_and_append([], self.upper, self.upper)
                self.lazy = await self.client.open_writer(self.shard, heartbeat=False)
                now = self.rt.wall_ms()
                self.lazy_ok = (now, now)

        self.run(go)
        if outcome[0] == "applied":
            self.updates += rows
            self.upper = upper

    # --- reads ------------------------------------------------------------------------

    @precondition(lambda self: self.upper > self.since)
    @rule(data=st.data())
    def snapshot(self, data: st.DataObject) -> None:
        as_of = data.draw(st.integers(self.since, self.upper - 1), label="as_of")

        async def go() -> None:
            assert await self.reader.snapshot(as_of) == _at(self.updates, as_of)

        self.run(go)

    @precondition(lambda self: self.listen is None and self.upper > self.since)
    @rule(data=st.data())
    def open_listen(self, data: st.DataObject) -> None:
        as_of = data.draw(st.integers(self.since, self.upper - 1), label="as_of")

        async def go() -> None:
            assert await self.reader.snapshot(as_of) == _at(self.updates, as_of)
            self.listen = self.reader.listen(as_of)
            self.listen_iter = aiter(self.listen)

        self.run(go)
        self.listen_as_of = as_of
        self.listened = []

    @precondition(lambda self: self.listen is not None and self.listen.frontier < self.upper)
    @rule()
    def follow_listen(self) -> None:
        """Takes listen batches up to the current upper: together with the snapshot
        they are exactly the updates after `as_of`, at their own times."""

        async def go() -> None:
            assert self.listen is not None
            assert self.listen_iter is not None
            while self.listen.frontier < self.upper:
                batch = await anext(self.listen_iter)
                assert batch.progress <= Frontier.at(self.upper)
                self.listened += batch.updates

        self.run(go)
        assert self.listen is not None
        frontier = self.listen.frontier
        want = [u for u in self.updates if self.listen_as_of < u.ts < frontier]
        assert consolidate(self.listened) == consolidate(want)

    @precondition(lambda self: self.listen is not None)
    @rule()
    def close_listen(self) -> None:
        async def go() -> None:
            assert self.listen is not None
            assert self.listen_iter is not None
            # close() too: a never-started iterator's aclose() runs no cleanup.
            self.listen.close()
            await self.listen_iter.aclose()  # type: ignore[attr-defined]

        self.run(go)
        self.listen = self.listen_iter = None

    @rule(data=st.data())
    def downgrade_since(self, data: st.DataObject) -> None:
        top = self.upper if self.listen is None else min(self.upper, self.listen.frontier - 1)
        if top < self.since:
            return
        new_since = data.draw(st.integers(self.since, top), label="new_since")

        async def go() -> None:
            await self.reader.downgrade_since(new_since)
            assert self.reader.since == Frontier.at(new_since)

        self.run(go)
        self.since = new_since

    @rule()
    def restart_sees_the_same_shard(self) -> None:
        """A second client on the same location rebuilds exactly the live state
        and reads exactly the model."""

        async def go() -> None:
            fresh = Machine(self.shard, self.blob, self.consensus, self.rt, self.client.config.machine)
            live = await self.client.machine(self.shard)
            for _ in range(5):
                a, b = await fresh.fetch(), await live.fetch()
                if a is not None and b is not None and a.seqno == b.seqno:
                    assert a == b
                    break
            else:
                raise AssertionError("the shard never held still")
            async with PersistClient(self.blob, self.consensus, self.rt.derive("restart")) as other:
                r = await other.open_reader(self.shard, heartbeat=False)
                assert await r.fetch_recent_upper() == Frontier.at(self.upper)
                if r.since.less_equal(self.upper - 1):
                    as_of = self.upper - 1
                    assert await r.snapshot(as_of) == _at(self.updates, as_of)
                await r.expire()

        self.run(go)

    @invariant()
    def upper_is_the_model_upper(self) -> None:
        if hasattr(self, "writers"):
            assert not self.host.done(), self.host
            assert self.client._machines[self.shard].state.upper == Frontier.at(self.upper)


# --- variants ---------------------------------------------------------------------------


class _Unreliable20(ShardModel):
    fault_rate = 0.2


class _Unreliable5(ShardModel):
    fault_rate = 0.05


class _PostgresFile(ShardModel):
    virtual = False
    pg_url: ClassVar[str] = ""
    root: ClassVar[Path | None] = None

    async def location(self) -> tuple[Blob, Consensus]:
        assert self.root is not None
        self.shard = f"model-{uuid.uuid4().hex[:12]}"
        blob = await open_blob(f"file://{self.root / self.shard}?fsync=false")
        return blob, await open_consensus(self.pg_url)


def _settings(examples: int, steps: int) -> settings:
    return settings(max_examples=examples, stateful_step_count=steps)


def test_shard_matches_model_on_mem() -> None:
    run_state_machine_as_test(ShardModel, settings=_settings(70, 40))


def test_shard_matches_model_with_20pct_faults() -> None:
    run_state_machine_as_test(_Unreliable20, settings=_settings(50, 40))


def test_shard_matches_model_with_5pct_faults() -> None:
    run_state_machine_as_test(_Unreliable5, settings=_settings(30, 40))


@pytest.mark.postgres
def test_shard_matches_model_on_postgres_and_file(pg_url: str, tmp_path: Path) -> None:
    _PostgresFile.pg_url = pg_url
    _PostgresFile.root = tmp_path
    run_state_machine_as_test(_PostgresFile, settings=_settings(30, 30))


@pytest.mark.slow
def test_shard_matches_model_many_examples() -> None:
    run_state_machine_as_test(ShardModel, settings=_settings(200, 50))
    run_state_machine_as_test(_Unreliable20, settings=_settings(100, 50))


@pytest.mark.slow
@pytest.mark.postgres
def test_shard_matches_model_on_postgres_and_file_many_examples(pg_url: str, tmp_path: Path) -> None:
    _PostgresFile.pg_url = pg_url
    _PostgresFile.root = tmp_path
    run_state_machine_as_test(_PostgresFile, settings=_settings(40, 40))

