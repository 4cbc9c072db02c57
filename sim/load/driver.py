"""What a scenario program drives: recorded clients on a `Deployment`.

Every scenario — the shipped programs (`sim.load.scenarios.builtin`), a user's
`async def scenario(sim)` file, and the anomaly runs, which add a nemesis —
runs against the same `Sim`: clients that each stick to a live coordinator,
move (as a fresh process) when it stops, fences them, or a new one takes their
share, and record every statement in the history.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from coordinator.adapters import MultiAdapterCoordinator
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from sim.history.capture import PreparedStatements, RecordingSession
from sim.load.deployment import Deployment, LatencySwitch
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine, Sequence

    from coordinator.config import CoordinatorConfig
    from coordinator.session import Coordinator
    from sim.history.recorder import HistoryRecorder
    from sim.runtime.core import Runtime

__all__ = ["Client", "Sim", "Step", "drive"]

#: The coordinator went away under the statement, or fenced it.
_GONE: Final = frozenset({SqlState.ADMIN_SHUTDOWN.value})
#: A client whose every live coordinator has dropped or fenced it tries them
#: again after this long, doubling up to `_RECONNECT_MAX_S`, as a connection
#: pool does. Not a measured cost: it only decides how many refused statements
#: a deployment with no serving coordinator shows, instead of the client
#: waiting forever for one to start (issue 21's stuck split-brain seeds, where
#: each coordinator of two fenced the other). Both are far below a run's
#: STUCK_AFTER_S (30 s), so such a run ends with its statements refused.
_RECONNECT_S: Final = 0.01
_RECONNECT_MAX_S: Final = 0.64


@final
class Client:
    """One client connection: sticks to a live coordinator (client `index`
    of n spreads over them as a load balancer would), moves as a fresh
    process when the one it used stops or fences it. Its randomness is its
    own stream, `client-<index>`."""

    def __init__(self, sim: Sim, index: int, name: str | None = None) -> None:
        self.sim, self.index, self.name = sim, index, name or f"c{index + 1}"
        self.rng = sim.rt.derive(f"client-{index}").rng
        self._session: RecordingSession | None = None
        self._coord: Coordinator | None = None
        self._gone: list[Coordinator] = []
        self._backoff = _RECONNECT_S

    async def _bind(self) -> RecordingSession:
        dep = self.sim.dep
        while True:
            live = [h.coord for h in dep.live if all(h.coord is not g for g in self._gone)]
            if live:
                break
            if not dep.live:
                await dep.wait_changed()  # a restart is coming, or the run is ending
                continue
            # Every live coordinator refused us: try them again later (they
            # may serve by then), unless one starts or stops first.
            with anyio.move_on_after(self._backoff) as waited:
                await dep.wait_changed()
            if waited.cancelled_caught:
                self._backoff = min(2 * self._backoff, _RECONNECT_MAX_S)
                self._gone = [g for g in self._gone if not dep.is_live(g)]
        coord = live[self.index % len(live)]
        dropped = self._dropped() if coord is self._coord else None
        if dropped is not None and dropped.is_set():
            assert self._session is not None
            # Its adapter crashed: reconnect to one of the coordinator's others.
            self._session.rebind(coord.connect())
        if coord is not self._coord or self._session is None:
            if self._session is None:
                self._session = RecordingSession(
                    coord.connect(), self.sim.recorder, client=self.name, statements=self.sim.statements
                )
            else:
                self._session.rebind(coord.connect())
            self._coord = coord
        return self._session

    def _dropped(self) -> anyio.Event | None:
        """Several adapters: the event set once this client's adapter crashes,
        set already if it has been replaced; None if there is no such adapter
        (one adapter, or no connection yet)."""
        coord, session = self._coord, self._session
        if not isinstance(coord, MultiAdapterCoordinator) or session is None:
            return None
        dropped = coord.dropped(session.session)
        if dropped is None:
            dropped = anyio.Event()
            dropped.set()
        return dropped

    async def execute(self, sql: str) -> Result:
        """Runs `sql` on this client's coordinator. If that process dies
        meanwhile the connection drops: the statement ends `info` (the
        recording session records a cancelled statement so) and the client
        moves on."""
        sim = self.sim
        if sim.transcript is not None:
            sim.transcript.append(Step(self.name, self.index, sim.rt.now() - sim.t0, sql))
        session = await self._bind()
        coord = self._coord
        assert coord is not None
        dep = self.sim.dep
        host = dep.host_of(coord)
        adapter = self._dropped()
        result: Result | None = None
        async with anyio.create_task_group() as tg:

            async def drop_on_crash() -> None:
                if host is not None:
                    await host.killed.wait()
                    tg.cancel_scope.cancel()

            async def drop_on_adapter_crash() -> None:
                assert adapter is not None
                await adapter.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(drop_on_crash)
            if adapter is not None:  # (one adapter: no task, so schedules stay as they were)
                tg.start_soon(drop_on_adapter_crash)
            try:
                result = await session.execute(sql)
            except InvalidUsage as exc:
                # A decoupled coordinator stopped under the statement lets its
                # oracle's "closed" error escape instead of answering 57P01
                # (reported to the lead); the recording session already
                # recorded the statement as `info`.
                if dep.is_live(coord):
                    raise
                result = Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, f"connection lost: {exc}"))
            tg.cancel_scope.cancel()
        if result is None:
            result = Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, "connection lost"))
        if adapter is not None and adapter.is_set() and dep.is_live(coord):
            return result  # only its adapter went away: the next statement reconnects
        if result.code in _GONE or not dep.is_live(coord):
            self._gone.append(coord)
        elif result.ok:
            self._backoff = _RECONNECT_S
        return result

    async def jitter(self, upto: float = 0.002) -> None:
        """Waits a random while (up to `upto` s), as a client between statements."""
        await self.sim.rt.sleep(self.rng.uniform(0, upto))


@final
@dataclass(frozen=True)
class Step:
    """One statement of a scripted scenario (`Sim.play`): client `client`
    (index `index`, which picks its coordinator) runs `sql`, starting no
    earlier than `at_s` seconds after the scenario started."""

    client: str
    index: int
    at_s: float
    sql: str


@final
class Sim:
    """A scenario's handle on its deployment: `n_clients` and `size` are the
    run's shape (a program reads them; a user script may ignore them).

    With `transcript` (a list), every statement a `Client` runs is appended
    to it as a `Step`, so a run can be replayed as a script (the shrinker)."""

    def __init__(
        self, rt: Runtime, dep: Deployment, recorder: HistoryRecorder, *, n_clients: int = 2, size: int = 4,
        transcript: list[Step] | None = None,
    ) -> None:
        self.rt, self.dep, self.recorder = rt, dep, recorder
        self.n_clients, self.size = n_clients, size
        self.failures: list[str] = []
        self.restarts = 0
        self._sessions = 0
        self.transcript = transcript
        self.t0 = rt.now()
        #: Statement texts prepared once for all the clients (issue 20).
        self.statements = PreparedStatements()

    def client(self, index: int) -> Client:
        """Client `index` (named `c<index + 1>`)."""
        return Client(self, index)

    def clients(self, n: int | None = None) -> list[Client]:
        """Clients 0 … n-1 (`n_clients` by default)."""
        return [Client(self, i) for i in range(self.n_clients if n is None else n)]

    def session(self, name: str | None = None) -> Client:
        """A new client connection, recorded under `name` (default c<n>)."""
        index = self._sessions
        self._sessions += 1
        return Client(self, index, name)

    async def sql(self, client: Client, text: str) -> Result:
        """Runs one statement on `client`; the result (with `.ok`, `.rows`,
        `.error`) is for the scenario to branch on."""
        return await client.execute(text)

    async def wait(self, seconds: float) -> None:
        await self.rt.sleep(seconds)

    async def concurrently(self, *calls: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Runs the calls concurrently and returns when all have."""
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(call)

    async def play(
        self, steps: Sequence[Step], *, background: int = 0, background_sql: str = "SELECT count(*) FROM t"
    ) -> None:
        """Runs a script: each client its steps in order, each step once its
        `at_s` has come (clients run concurrently); meanwhile `background`
        unrecorded readers run `background_sql` on the newest coordinator
        until the clients are done (busy-reads' load on the read_ts batcher)."""
        mine: dict[tuple[str, int], list[Step]] = {}
        for step in steps:
            mine.setdefault((step.client, step.index), []).append(step)
        done = anyio.Event()

        async def client(name: str, index: int, todo: list[Step]) -> None:
            c = Client(self, index, name)
            for step in todo:
                wait = self.t0 + step.at_s - self.rt.now()
                if wait > 0:
                    await self.rt.sleep(wait)
                await c.execute(step.sql)

        async def reader() -> None:
            while not done.is_set():
                coord = self.dep.newest
                if coord is None:
                    await self.dep.wait_changed()
                    continue
                await coord.connect().execute(background_sql)

        async def clients() -> None:
            await self.concurrently(*(lambda k=k, v=v: client(k[0], k[1], v) for k, v in mine.items()))
            done.set()

        await self.concurrently(clients, *([reader] * background))

    async def restart(self) -> None:
        """Fault: the oldest coordinator crashes and a new one opens the same
        stores; its clients continue on the new one as fresh processes."""
        if self.dep.live:
            await self.dep.stop_coordinator(self.dep.live[0])
        self.restarts += 1
        await self.dep.start_coordinator()

    def expect(self, condition: bool, message: str) -> None:
        """Records a scenario-level failure (reported; the history is still checked)."""
        if not condition:
            self.failures.append(message)


@contextlib.asynccontextmanager
async def drive(
    rt: Runtime,
    config: CoordinatorConfig,
    recorder: HistoryRecorder,
    *,
    switch: LatencySwitch | None = None,
    postgres_url: str | None = None,
    modeled: bool = False,
    blob_url: str | None = None,
    n_clients: int = 2,
    size: int = 4,
    transcript: list[Step] | None = None,
) -> AsyncIterator[Sim]:
    """A `Sim` on a fresh deployment with its first coordinator running (see
    `Deployment.running`); every coordinator stops on exit. `transcript`:
    see `Sim`."""
    async with Deployment.running(
        rt, config, recorder, switch or LatencySwitch(), postgres_url=postgres_url, modeled=modeled,
        blob_url=blob_url,
    ) as dep:
        yield Sim(rt, dep, recorder, n_clients=n_clients, size=size, transcript=transcript)
