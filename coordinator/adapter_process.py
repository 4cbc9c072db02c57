"""One adapter as an OS process of its own (issue 36, real mode with
`adapters > 1`): `python -m coordinator.adapter_process SPEC` serves one
decoupled adapter of a deployment on a Unix socket.

**What the process runs.** Its own oracle clients (own connections, own
read_ts batching), its own handle on the durable catalog joined at the
deployment's epoch (`open_incarnation(join_epoch=…)`: adapters never fence
each other), its own persist client on the deployment's shared Consensus
(the deployment's database) and Blob, and its own storage and compute
controllers with one simulated replica, which follow the one catalog
(`follow_catalog`) and read and write the one set of table shards.

**Where the controllers live: with each adapter.** The seeds point at
controllers in a process of their own that every adapter reaches; that
needs the controllers' commands and peek responses on the wire, which is
not built. Each adapter process instead runs controllers that follow the
shared catalog, which is what a Materialize use case with its own cluster
looks like: the compute side is per use case, and table writes are
concurrent compare-and-append writers on shared persist shards (seed 002).
What this changes: every adapter's replica hydrates and maintains the
tables itself, and a write acknowledged on adapter A reaches adapter B's
replica through persist (`persist.machine` polls Consensus), not a shared
controller. Visibility is unchanged: B's peek takes its `read_ts` from the
shared oracle after A's `apply_write`, and waits for its replica's frontier
to pass it. The rules of `coordinator.adapters` for writes and DDL hold
as they are; the deployment's write lock is a row of its database
(`coordinator.write_lock`).

**The wire.** One Unix-socket connection per client session (as a pgwire
connection is); frames are a 4-byte big-endian length and a pickle. A
request is a `Statement`; a reply is the encoded `Result`, the adapter's
`CoordinatorStatistics` as of the reply (the parent sums the latest of each
adapter) and, when the parent records backends, what this process recorded
since its previous reply (a `BackendWindow`, which the parent absorbs). The socket lives in a 0700 directory of the parent's
making, so only this user's processes reach it. The process writes `ready`
on stdout once it serves, and stops when its stdin closes (the parent
exited, or was killed).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import struct
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.buffered import BufferedByteReceiveStream

from controllers.compute import PeekWaiters
from coordinator.adapter_host import AdapterHost
from coordinator.decoupled import DecoupledCoordinator
from coordinator.environment import Environment, open_incarnation
from coordinator.follow_catalog import follow_catalog
from coordinator.session import Result
from coordinator.statements import SqlError, SqlState
from coordinator.write_lock import PostgresWriteLock
from sim.runtime.backend_stats import BACKEND_STATS, BackendStats

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from controllers.commands import DeterministicCommand
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Incarnation
    from coordinator.session import CoordinatorStatistics
    from coordinator.statements import Statement
    from oracle.gated import ProcessGate
    from sim.runtime.backend_stats import BackendWindow
    from sim.runtime.core import Runtime
    from sim.runtime.latency import LatencyModel

__all__ = ["AdapterSpec", "decode_result", "encode_result", "main", "receive_frame", "send_frame"]

#: Frames larger than this are refused (a corrupt length, not a big result).
MAX_FRAME: Final = 256 * 1024 * 1024

_LENGTH: Final = struct.Struct(">I")


@final
@dataclass(frozen=True)
class AdapterSpec:
    """What the parent tells adapter `index` (1-based) of a deployment."""

    index: int
    config: CoordinatorConfig
    env_name: str
    database_url: str  # the deployment's database: oracle, catalog stash, Consensus
    blob_url: str
    epoch: int  # the catalog epoch the deployment's own process opened
    seed: int
    latency: LatencyModel  # the run's model of what stays simulated (the replica)
    socket_path: str
    actor: str
    #: Record backend round trips and handler CPU (`sim.runtime.backend_stats`)
    #: and ship each reply's share to the parent, which records the run's.
    record_backend: bool = False


# --- the wire --------------------------------------------------------------------


async def send_frame(stream: anyio.abc.ByteSendStream, payload: object) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    await stream.send(_LENGTH.pack(len(data)) + data)


async def receive_frame(stream: BufferedByteReceiveStream) -> Any:
    """The next frame's object. Raises anyio.EndOfStream / IncompleteRead when
    the peer closed."""
    (n,) = _LENGTH.unpack(await stream.receive_exactly(_LENGTH.size))
    if n > MAX_FRAME:
        raise anyio.BrokenResourceError(f"frame of {n} bytes")
    return pickle.loads(await stream.receive_exactly(n))  # our own child, on a 0700 socket


def encode_result(result: Result) -> tuple[Any, ...]:
    """`Result` as plain values (`SqlError` does not pickle: its constructor
    takes the code and message apart)."""
    error = None if result.error is None else (result.error.code.value, result.error.message)
    return (result.rows, result.columns, result.rows_affected, error,
            result.read_ts, result.write_ts, result.catalog_ts)


def decode_result(data: tuple[Any, ...]) -> Result:
    rows, columns, affected, error, read_ts, write_ts, catalog_ts = data
    err = None if error is None else SqlError(SqlState(error[0]), error[1])
    return Result(rows, columns, affected, err, read_ts, write_ts, catalog_ts)


# --- the adapter -----------------------------------------------------------------


@final
class _ProcessHost(AdapterHost):
    """What this process's one adapter shares with the deployment: the catalog
    epoch it joins and the write lock row; its controllers are its own."""

    def __init__(self, spec: AdapterSpec, env: Environment, lock: PostgresWriteLock) -> None:
        self._spec = spec
        self._env = env
        self.waiters = PeekWaiters()
        self.peek_ids = itertools.count(1)
        self.write_lock = lock

    @contextlib.asynccontextmanager
    async def open_adapter(
        self, rt: Runtime, actor: str, gate: ProcessGate | None = None
    ) -> AsyncIterator[Incarnation]:
        async with (
            open_incarnation(
                self._env, self._spec.config, rt, self.waiters,
                derive_commands=False, actor=actor, join_epoch=self._spec.epoch,
            ) as inc,
            anyio.create_task_group() as tg,
        ):
            storage_ready, compute_ready = anyio.Event(), anyio.Event()

            async def to_compute(cmd: DeterministicCommand) -> None:
                inc.compute.send(cmd)

            tg.start_soon(follow_catalog, inc, rt, inc.storage.apply, storage_ready)
            tg.start_soon(follow_catalog, inc, rt, to_compute, compute_ready)
            await storage_ready.wait()
            await compute_ready.wait()
            try:
                yield inc
            finally:
                tg.cancel_scope.cancel()


async def serve(spec: AdapterSpec, rt: Runtime) -> None:
    """Runs the adapter until stdin closes."""
    from persist.open import open_blob, open_consensus

    # Installed before the backends open: their clients pick it up.
    recorder = BackendStats() if spec.record_backend else None
    BACKEND_STATS.set(recorder)
    marks = [recorder.mark()] if recorder is not None else []

    def recorded_since_last_reply() -> BackendWindow | None:
        if recorder is None:
            return None
        window = recorder.since(marks[0])
        marks[0] = recorder.mark()
        return window

    blob = await open_blob(spec.blob_url)
    consensus = await open_consensus(spec.database_url)
    lock = await PostgresWriteLock.connect(spec.database_url, spec.env_name)
    try:
        env = Environment(rt, blob=blob, consensus=consensus, postgres_url=spec.database_url, name=spec.env_name)
        coord = DecoupledCoordinator(
            spec.config, env, rt, actor=spec.actor, host=_ProcessHost(spec, env, lock)
        )
        async with coord, anyio.create_task_group() as tg:

            async def client(stream: anyio.abc.SocketStream) -> None:
                session = coord.connect()
                reader = BufferedByteReceiveStream(stream)
                async with stream:
                    while True:
                        try:
                            statement: Statement = await receive_frame(reader)
                        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                            return
                        result = await session.execute(statement)
                        stats: CoordinatorStatistics = coord.statistics()
                        try:
                            await send_frame(stream, (encode_result(result), stats, recorded_since_last_reply()))
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                            return

            listener = await anyio.create_unix_listener(spec.socket_path)
            tg.start_soon(listener.serve, client)
            print("ready", flush=True)  # noqa: T201 - the parent's start signal
            await _until_stdin_closes()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await lock.close()
            await consensus.close()
            await blob.close()


async def _until_stdin_closes() -> None:
    """Returns once the parent is gone (its end of our stdin closed)."""
    await anyio.to_thread.run_sync(sys.stdin.buffer.read, abandon_on_cancel=True)


def main() -> None:
    """Entry: `python -m coordinator.adapter_process SPEC_FILE`."""
    from sim.runtime.core import run

    with open(sys.argv[1], "rb") as f:
        spec: AdapterSpec = pickle.load(f)  # our parent wrote it, 0600 in a 0700 directory
    os.unlink(sys.argv[1])

    async def _main(rt: Runtime) -> None:
        await serve(spec, rt)

    run(_main, seed=spec.seed, virtual=False, latency=spec.latency)


if __name__ == "__main__":
    main()
