"""What both architectures keep while running: the incarnation they opened, the
modeled cores their CPU work runs on, counters, the catalog view cache and the
fenced state. Only scheduling differs between them; this is the rest."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from coordinator.group_commit import GroupCommitStats
from coordinator.planner import CatalogView
from coordinator.session import Coordinator, CoordinatorStatistics
from coordinator.statements import SqlError, SqlState
from oracle.api import CATALOG_TIMELINE

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment, Incarnation
    from coordinator.events import EventSink
    from sim.runtime.core import Runtime

__all__ = ["RunningCoordinator"]


class RunningCoordinator(Coordinator):
    """Shared state of a running coordinator (see the module docstring).

    Args:
        cores: the modeled cores CPU work runs on (the event loop has one).
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        env: Environment,
        rt: Runtime,
        *,
        cores: int,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        super().__init__(config, events=events, actor=actor)
        self._env = env
        self._rt = rt
        self._catalog_timeline = env.timeline(CATALOG_TIMELINE)
        self._pool = rt.core_pool(cores, actor)
        self._inc: Incarnation | None = None
        self._view: tuple[int, CatalogView] | None = None
        self._fenced: SqlError | None = None
        self._gc_stats = GroupCommitStats()
        #: statements, peeks, writes, ddl, confirms, conflicts, loop_messages
        self._counts = collections.Counter[str]()

    @property
    def incarnation(self) -> Incarnation:
        if self._inc is None:
            raise RuntimeError("the coordinator is not running")
        return self._inc

    def statistics(self) -> CoordinatorStatistics:
        c = self._counts
        return CoordinatorStatistics(
            statements=c["statements"],
            peeks=c["peeks"],
            writes=c["writes"],
            ddl=c["ddl"],
            group_commits=self._gc_stats.commits,
            writes_group_committed=self._gc_stats.writes,
            confirm_leadership_calls=c["confirms"],
            oracle_calls=self._inc.oracle_calls() if self._inc is not None else 0,
            loop_busy_s=self._busy_s(),
            loop_cores=self._pool.cores,
            ddl_conflicts=c["conflicts"],
            loop_messages=c["loop_messages"],
            empty_group_commits=self._gc_stats.empty_commits,
        )

    def _busy_s(self) -> float:
        """Modeled CPU spent; the event loop overrides it with its handler time."""
        return self._pool.statistics().busy_s

    async def _cpu(self, seconds: float) -> None:
        if seconds > 0:
            await self._rt.cpu(seconds, self._pool)

    def _fence(self, exc: BaseException) -> SqlError:
        """Marks this coordinator fenced (it stops serving, as Materialize halts)."""
        if self._fenced is None:
            self._fenced = SqlError(
                SqlState.ADMIN_SHUTDOWN, f"fenced by a newer coordinator: {exc}"
            )
        return self._fenced

    def _catalog_view(self) -> CatalogView:
        """Name lookups over the cached catalog, rebuilt when the cache moves."""
        catalog = self.incarnation.catalog
        upper = catalog.cached_upper
        if self._view is None or self._view[0] != upper:
            self._view = (upper, CatalogView(catalog.state()))
        return self._view[1]
