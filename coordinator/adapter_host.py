"""What the adapters of one deployment share (issue 36), as the decoupled
coordinator needs it when it runs as one adapter of several: an interface,
implemented in virtual mode by `coordinator.adapters` and across OS processes
by `coordinator.adapter_process`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractAsyncContextManager

    from controllers.compute import PeekWaiters
    from coordinator.environment import Incarnation
    from oracle.gated import ProcessGate
    from sim.runtime.core import Runtime

__all__ = ["AdapterHost"]


class AdapterHost(ABC):
    """What the adapters of one deployment share (issue 36): the compute
    controller's response routing, unique peek ids, and the opening of each
    adapter's incarnation on the shared controllers."""

    #: Routes the shared compute controller's peek responses to their waiters.
    waiters: PeekWaiters
    #: Peek ids unique across the adapters (one compute controller answers all).
    peek_ids: Iterator[int]
    #: The global write lock of read-then-write (UPDATE/DELETE): global means
    #: the deployment's, not one adapter's, or two adapters' updates of one
    #: row both retract it (a lost update). An `anyio.Lock` when the adapters
    #: share a process; a lock row of the deployment's database when each is
    #: an OS process (`coordinator.write_lock`).
    write_lock: AbstractAsyncContextManager[object]

    @abstractmethod
    def open_adapter(
        self, rt: Runtime, actor: str, gate: ProcessGate | None = None
    ) -> AbstractAsyncContextManager[Incarnation]:
        """The incarnation adapter `actor` runs on while entered; its oracle
        calls pass `gate` (`oracle.gated`) if given."""
