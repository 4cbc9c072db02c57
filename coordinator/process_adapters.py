"""Several adapters of one deployment, each an OS process (issue 36, real mode
with `adapters > 1`); in virtual mode they are simulated processes of one
loop instead (`coordinator.adapters`).

This process is the deployment's own: it opens the deployment's incarnation
once (which opens the catalog, bumping its epoch and fencing older
deployments), creates the write-lock row, then starts `config.adapters`
children (`python -m coordinator.adapter_process`), each joining the catalog
at that epoch. All of them are on the same Postgres database (oracle rows,
catalog, persist Consensus) and the same Blob, so oracle and catalog
contention between the adapters is real. The module docstring of
`coordinator.adapter_process` says what each child runs, and why the
controllers live with each adapter.

Clients: `connect` spreads sessions over the adapters round robin (or pins
one with `adapter=`); each session is one connection to its adapter's socket,
opened at its first statement. A statement whose connection breaks (its
adapter died) ends `info`: it may have been applied. A child that exits
while the deployment runs ends the run with `ExternalError`, naming it and
the last line it wrote to stderr.

SUBSCRIBE (`coordinator.subscribe`) is served by this process, whichever
adapter the session is on: the adapters' socket protocol is one request, one
reply, and a stream would need frames of its own. This process has what a
subscription reads: the oracle (its `read_ts` and `as_of`), the catalog
(synced up to the catalog `read_ts`, so a table created through any adapter
is found) and a persist client on the shared shards.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import subprocess
import sys
from typing import TYPE_CHECKING, Final, Self, final

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from controllers.compute import PeekWaiters
from coordinator.adapter_process import AdapterSpec, decode_result, receive_frame, send_frame
from coordinator.adapters import adapter_actor
from coordinator.config import OracleKind
from coordinator.environment import open_incarnation
from coordinator.peeks import linearize
from coordinator.planner import CatalogView
from coordinator.session import Coordinator, CoordinatorStatistics, Result, Session
from coordinator.statements import SqlError, SqlState
from coordinator.subscribe import (
    Subscription,
    Subscriptions,
    serve_subscription,
    shutdown_error,
    subscribe_table,
)
from coordinator.write_lock import create_lock_row
from sim.runtime.backend_stats import current_backend_stats
from sim.runtime.errors import ExternalError, Indeterminate, InvalidUsage
from sim.runtime.owners import private_tmpdir, remove_tree
from sim.runtime.tasks import AsyncExitStack, concurrently

if TYPE_CHECKING:
    from collections.abc import Awaitable
    from types import TracebackType

    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment, Incarnation
    from coordinator.events import EventSink
    from coordinator.statements import Statement, Subscribe
    from coordinator.subscribe import Feed, Item
    from sim.runtime.core import Runtime

__all__ = ["ProcessAdaptersCoordinator"]

#: How long a child may take to start serving (interpreter, imports, its
#: connections, catching up with the catalog).
START_WITHIN_S: Final = 60.0

#: How long a child may take to stop once its stdin closed, before it is killed.
STOP_WITHIN_S: Final = 10.0


@final
class ProcessAdaptersCoordinator(Coordinator):
    """`config.adapters` adapter processes of one real-mode deployment (see
    the module docstring); owned via `async with`. Statistics are the
    adapters' summed, each as of its latest reply."""

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        if config.adapters < 2:
            raise InvalidUsage(f"{config.name}: adapter processes need adapters >= 2")
        if env.postgres_url is None or env.blob_url is None:
            raise InvalidUsage("adapter processes run in real mode only (virtual: coordinator.adapters)")
        if config.oracle is OracleKind.MEMORY:
            raise InvalidUsage(
                f"{config.name}: adapters in several processes need a shared oracle; "
                "the in-memory oracle lives in one process"
            )
        super().__init__(config, events=events, actor=actor)
        self._env = env
        self._database_url = env.postgres_url
        self._rt = rt
        self._blob_url = env.blob_url
        self._stack: AsyncExitStack | None = None
        self._round_robin = itertools.count()
        self._procs: list[anyio.abc.Process] = []
        self._dir = ""
        self._stats: list[CoordinatorStatistics | None] = [None] * config.adapters
        self._session_adapter: dict[int, int] = {}
        self._conns: dict[int, tuple[anyio.abc.SocketStream, BufferedByteReceiveStream]] = {}
        self._stopping = False
        #: Set when an adapter process died under the deployment.
        self._failure: Indeterminate | None = None
        #: The run's backend recorder (real-mode compare), which the
        #: adapters' recordings join.
        self._backend = current_backend_stats()
        #: The deployment's own incarnation and task group, which serve SUBSCRIBE.
        self._shared: Incarnation | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._subscriptions = Subscriptions()

    def child_pids(self) -> tuple[int, ...]:
        """The adapters' OS process ids, in adapter order."""
        return tuple(p.pid for p in self._procs)

    # --- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            # The deployment's own incarnation: opening its catalog fixes the
            # epoch the adapters join; it serves nothing itself.
            shared = await stack.enter_async_context(
                open_incarnation(
                    self._env, self.config, self._rt, PeekWaiters(), derive_commands=False, actor=self.actor
                )
            )
            epoch = shared.catalog.epoch()
            assert epoch is not None
            await create_lock_row(self._database_url, self._env.name)
            # Claimed (an owner record naming this process), so a SIGKILLed
            # run's sockets and specs are reclaimed by the next start.
            adapters_dir = private_tmpdir("coordsim-adapters-", "adapters")  # 0700
            stack.callback(remove_tree, adapters_dir)
            self._dir = str(adapters_dir)
            stack.push_async_callback(self._stop_children)
            # Started before the watchers' task group, so a child that fails
            # to start is this call's one error, not a task group's.
            children = [await self._start_child(i, epoch) for i in range(1, self.config.adapters + 1)]
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            for i, (proc, stderr_path) in enumerate(children, start=1):
                tg.start_soon(self._watch_child, i, proc, stderr_path, tg.cancel_scope)
            stack.push_async_callback(self._close_connections)
            self._shared, self._tg = shared, tg
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None
        self._subscriptions.shutdown(shutdown_error())
        self._shared = self._tg = None
        suppressed = await stack.__aexit__(et, e, tb)
        if self._failure is not None:
            raise self._failure
        return suppressed

    async def _start_child(self, index: int, epoch: int) -> tuple[anyio.abc.Process, str]:
        """Starts adapter `index` and waits until it serves; returns it and
        the path of its stderr.

        Raises:
            Indeterminate: it exited, or did not serve within `START_WITHIN_S`.
        """
        spec = AdapterSpec(
            index=index, config=self.config, env_name=self._env.name, database_url=self._database_url,
            blob_url=self._blob_url, epoch=epoch, seed=self._rt.seed, latency=self._rt.latency,
            socket_path=os.path.join(self._dir, f"adapter-{index}.sock"),
            actor=adapter_actor(self.actor, index), record_backend=self._backend is not None,
        )
        spec_path = os.path.join(self._dir, f"adapter-{index}.spec")
        fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
        stderr_path = os.path.join(self._dir, f"adapter-{index}.stderr")
        err_fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            proc = await anyio.open_process(
                [sys.executable, "-m", "coordinator.adapter_process", spec_path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_fd,
            )
        finally:
            os.close(err_fd)
        self._procs.append(proc)
        assert proc.stdout is not None
        line = b""
        with anyio.move_on_after(START_WITHIN_S):
            async for chunk in proc.stdout:
                line += chunk
                if b"\n" in line:
                    break
        if line.strip() != b"ready":
            with anyio.move_on_after(1.0):
                await proc.wait()
            how = (
                f"exited with code {proc.returncode} while starting"
                if proc.returncode is not None
                else f"did not start within {START_WITHIN_S:.0f} s"
            )
            raise Indeterminate(f"adapter process {index} {how}: {_last_line(stderr_path) or 'no message'}")
        return proc, stderr_path

    async def _watch_child(
        self, index: int, proc: anyio.abc.Process, stderr_path: str, scope: anyio.CancelScope
    ) -> None:
        code = await proc.wait()
        if not self._stopping:
            # Ends the deployment: everything inside it is cancelled, and
            # leaving it raises this (one error, not a task group's).
            self._failure = Indeterminate(
                f"adapter process {index} (pid {proc.pid}) exited with code {code}: "
                f"{_last_line(stderr_path) or 'no message'}"
            )
            scope.cancel()

    async def _stop_children(self) -> None:
        """Closes each child's stdin (its signal to stop) and waits; kills the
        ones that outlive `STOP_WITHIN_S`."""
        self._stopping = True
        with anyio.CancelScope(shield=True):
            for proc in self._procs:
                if proc.stdin is not None:
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await proc.stdin.aclose()
            for proc in self._procs:
                with anyio.move_on_after(STOP_WITHIN_S):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    async def _close_connections(self) -> None:
        conns, self._conns = self._conns, {}
        for stream, _ in conns.values():
            with contextlib.suppress(Exception):
                await stream.aclose()

    # --- the client API --------------------------------------------------------------

    def connect(self, *, adapter: int | None = None) -> Session:
        """A new session on the next adapter round robin, or on adapter
        `adapter` (1-based).

        Raises:
            InvalidUsage: `adapter` is not in 1..adapters.
        """
        n = self.config.adapters
        if adapter is None:
            i = next(self._round_robin) % n
        elif 1 <= adapter <= n:
            i = adapter - 1
        else:
            raise InvalidUsage(f"adapter {adapter} is not one of 1..{n}")
        session = Session(self, next(self._session_ids))
        self._session_adapter[session.id] = i
        return session

    def execute(self, session: Session, statement: Statement) -> Awaitable[Result]:
        return self._execute(session, statement)

    async def _execute(self, session: Session, statement: Statement) -> Result:
        i = self._session_adapter.get(session.id)
        if i is None:
            return Result.failed(SqlError(SqlState.FEATURE_NOT_SUPPORTED, "connect() to pick an adapter"))
        conn = self._conns.get(session.id)
        try:
            if conn is None:
                path = os.path.join(self._dir, f"adapter-{i + 1}.sock")
                opened = await anyio.connect_unix(path)
                conn = (opened, BufferedByteReceiveStream(opened))
                self._conns[session.id] = conn
        except OSError as exc:
            return Result.failed(SqlError(SqlState.ADMIN_SHUTDOWN, f"adapter {i + 1}: {exc}"))
        stream, reader = conn
        try:
            await send_frame(stream, statement)
            data, stats, backend = await receive_frame(reader)
        except BaseException as exc:
            # A cancelled or broken exchange leaves the connection out of step:
            # drop it (the adapter sees the disconnect); the next statement
            # opens a new one.
            self._conns.pop(session.id, None)
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()
            if isinstance(exc, (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError)):
                return Result.failed(SqlError(SqlState.INDETERMINATE, f"adapter {i + 1} connection lost"))
            raise
        self._stats[i] = stats
        if backend is not None and self._backend is not None:
            self._backend.absorb(backend)
        return decode_result(data)

    def subscribe(self, session: Session, statement: Subscribe) -> Subscription:
        """Served by this process (see the module docstring)."""
        del session

        def open_(feed: Feed) -> None:
            if self._tg is None:
                feed.put(SqlError(SqlState.ADMIN_SHUTDOWN, "the deployment is not running"))
                return
            self._subscriptions.add(feed)
            self._tg.start_soon(self._subscription, statement, feed)

        return Subscription(open_)

    async def _subscription(self, stmt: Subscribe, feed: Feed) -> None:
        inc = self._shared
        assert inc is not None
        try:
            read_ts, catalog_ts = await concurrently(inc.oracle.read_ts, inc.catalog_oracle.read_ts)
            if inc.catalog.cached_upper <= catalog_ts:
                await inc.catalog.sync()
            table = subscribe_table(CatalogView(inc.catalog.state()), stmt)
        except SqlError as exc:
            feed.put(exc)
            return
        except ExternalError as exc:
            feed.put(SqlError(SqlState.SERIALIZATION_FAILURE, f"SUBSCRIBE to {stmt.table!r}: {exc}"))
            return

        async def forward(item: Item) -> None:
            feed.put(item)

        await serve_subscription(
            feed, stmt, table, persist=inc.persist, read_ts=read_ts, catalog_ts=catalog_ts,
            linearize=lambda ts: linearize(inc.oracle, self._rt, ts, read_ts), sink=forward,
        )

    def statistics(self) -> CoordinatorStatistics:
        """The adapters' counters summed, each as of its latest reply."""
        return CoordinatorStatistics.summed(s for s in self._stats if s is not None)


def _last_line(path: str) -> str:
    """The last non-empty line of a child's stderr (its error), if any."""
    try:
        with open(path, "rb") as f:
            lines = [ln.strip() for ln in f.read()[-4096:].splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].decode(errors="replace") if lines else ""
