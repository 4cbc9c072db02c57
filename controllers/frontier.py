"""What both controllers keep of time: the catalog frontier they have applied,
and the read holds that keep a collection's since from passing a time.

The catalog frontier is an upper that never regresses: every catalog change at
times `< catalog_frontier` has been applied, so an ephemeral command planned at
`catalog_ts` may act once `catalog_ts < catalog_frontier` (controllers/commands.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import anyio

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CatalogFollower", "ReadHold"]


class CatalogFollower:
    """Base of a controller that learns the catalog from `AdvanceCatalogFrontier`
    commands; it starts at 0 (nothing applied)."""

    def __init__(self) -> None:
        self._frontier = 0
        self._frontier_changed = anyio.Event()

    @property
    def catalog_frontier(self) -> int:
        """Every catalog change at times `< catalog_frontier` has been applied."""
        return self._frontier

    async def wait_catalog_frontier(self, catalog_ts: int) -> None:
        """Waits until the catalog frontier is beyond `catalog_ts`."""
        while self._frontier <= catalog_ts:
            await self._frontier_changed.wait()

    def _advance_catalog_frontier(self, ts: int) -> bool:
        """Moves the catalog frontier to `ts` and wakes its waiters.

        Returns:
            True iff the frontier moved (False if it already was at `ts`).

        Raises:
            InvalidUsage: `ts` is below the frontier.
        """
        if ts < self._frontier:
            raise InvalidUsage(f"catalog frontier cannot regress from {self._frontier} to {ts}")
        if ts == self._frontier:
            return False
        self._frontier = ts
        self._frontier_changed.set()
        self._frontier_changed = anyio.Event()
        return True


@final
class ReadHold:
    """Keeps collection `id` readable at `ts` (its since at or below `ts`) until
    released; the controller that handed it out allows no compaction past it."""

    def __init__(self, collection_id: int, ts: int, on_release: Callable[[ReadHold], None]) -> None:
        self.id = collection_id
        self.ts = ts
        self._on_release = on_release
        self._released = False

    def release(self) -> None:
        """Idempotent: releasing twice releases once."""
        if not self._released:
            self._released = True
            self._on_release(self)
