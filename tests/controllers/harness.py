"""A storage + compute controller pair on one persist location, fed commands the
way a coordinator would, plus an exact model of the tables to check answers."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Self

from controllers.commands import (
    AdvanceCatalogFrontier,
    Append,
    ComputeResponse,
    DeterministicCommand,
    Peek,
    PeekResponse,
    PeekRows,
)
from controllers.compute import ComputeConfig, ComputeController, PeekWaiters
from controllers.storage import AppendResult, StorageConfig, StorageController
from controllers.transform import Row, Transform, encode_row

if TYPE_CHECKING:
    from types import TracebackType

    from persist.client import PersistClient
    from sim.runtime.core import Runtime

__all__ = ["Harness", "TableModel"]


class TableModel:
    """Every `(row, diff)` written to each table, by time: the ground truth."""

    def __init__(self) -> None:
        self.writes: dict[int, list[tuple[int, Row, int]]] = {}

    def add(self, ts: int, updates: dict[int, list[tuple[Row, int]]]) -> None:
        for tid, rows in updates.items():
            self.writes.setdefault(tid, []).extend((ts, r, d) for r, d in rows)

    def contents(self, table_id: int, as_of: int) -> dict[Row, int]:
        acc: dict[Row, int] = {}
        for ts, row, d in self.writes.get(table_id, []):
            if ts <= as_of:
                acc[row] = acc.get(row, 0) + d
        return {r: n for r, n in acc.items() if n}

    def expected(
        self, table_id: int, as_of: int, columns: tuple[str, ...], *transforms: Transform
    ) -> tuple[Row, ...]:
        """The exact answer of `transforms` (applied in order) at `as_of`."""
        contents = list(self.contents(table_id, as_of).items())
        for t in transforms:
            c = t.compile(columns)
            kept = [(c.project(r), n) for r, n in contents if c.keep(r)]
            contents = [((sum(n for _, n in kept),), 1)] if c.count else kept
            columns = c.columns
        rows = [r for r, n in contents for _ in range(n)]
        return tuple(sorted(rows, key=encode_row))


class Harness:
    """Both controllers, a response sink, and helpers to drive them."""

    def __init__(self, persist: PersistClient, rt: Runtime, *, window: int = 1000) -> None:
        self.persist = persist
        self.rt = rt
        self.other: list[ComputeResponse] = []
        self.waiters = PeekWaiters(self.other.append)
        self.storage = StorageController(persist, rt, config=StorageConfig(compaction_window=window))
        self.compute = ComputeController(
            persist, rt, self.waiters, config=ComputeConfig(compaction_window=window)
        )
        self.catalog_ts = 0
        self._peek_ids = itertools.count(1)
        self.model = TableModel()

    async def __aenter__(self) -> Self:
        await self.storage.__aenter__()
        await self.compute.__aenter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.compute.__aexit__(et, e, tb)
        finally:
            await self.storage.__aexit__(et, e, tb)

    async def apply(self, *cmds: DeterministicCommand, advance: bool = True) -> int:
        """Applies `cmds` as one catalog change at a fresh catalog time; returns it.
        With `advance`, also moves both catalog frontiers past it."""
        self.catalog_ts += 1
        for cmd in cmds:
            await self.send(cmd)
        if advance:
            await self.send(AdvanceCatalogFrontier(self.catalog_ts + 1))
        return self.catalog_ts

    async def send(self, cmd: DeterministicCommand) -> None:
        await self.storage.apply(cmd)  # ignores what is not about tables
        self.compute.send(cmd)

    async def append(self, ts: int, updates: dict[int, list[tuple[Row, int]]]) -> AppendResult:
        # Into the model first: a replica may answer a peek on these rows before
        # this append returns to us.
        self.model.add(ts, updates)
        return await self.storage.append(Append(ts, updates, self.catalog_ts))

    def peek(
        self, collection_id: int, as_of: int, *, cluster_id: int = 1, catalog_ts: int | None = None,
        transform: Transform | None = None,
    ) -> int:
        """Sends a peek; returns its id (await `result(id)` for the answer)."""
        peek_id = next(self._peek_ids)
        self.compute.send(
            Peek(
                peek_id, collection_id, cluster_id, as_of,
                self.catalog_ts if catalog_ts is None else catalog_ts,
                transform if transform is not None else Transform(),
            )
        )
        return peek_id

    async def result(self, peek_id: int) -> PeekResponse:
        return await self.waiters.wait(peek_id)

    async def rows(self, peek_id: int) -> tuple[Row, ...]:
        response = await self.result(peek_id)
        assert isinstance(response.result, PeekRows), response
        return response.result.rows
