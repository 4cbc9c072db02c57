"""Internal events a coordinator reports while it runs — oracle calls, group
commits, `confirm_leadership()` calls, catalog appends — so a run's trace can
explain what happened and the checker can verify the oracle's guarantees.

The names match the trace format's event kinds (`sim.history.model.EventKind`); the
coordinator does not import `sim` (DESIGN.md §3), the runner maps these over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["CoordinatorEvent", "EventSink"]


@final
@dataclass(frozen=True, slots=True)
class CoordinatorEvent:
    """One internal event; times are the Runtime clock's seconds."""

    kind: str  # oracle.write_ts|oracle.read_ts|oracle.peek_write_ts|oracle.apply_write|group-commit|confirm-leadership|catalog-append
    component: str
    start_s: float
    end_s: float
    ok: bool = True
    timeline: str | None = None
    ts: int | None = None
    batch_size: int | None = None
    actor: str | None = None
    detail: Mapping[str, Any] | None = None


#: Receives each event as it happens; must not block.
EventSink: TypeAlias = "Callable[[CoordinatorEvent], None]"
