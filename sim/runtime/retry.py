"""Retrying external operations by their error tier (DESIGN.md §9, seed 002).

`Determinate` failures are retried with capped exponential backoff and jitter
until a deadline; `Indeterminate` ones only when the operation is idempotent.
Backoff sleeps and jitter come from the `Runtime`, so virtual runs stay
deterministic. Nothing is retried once the process is stopping (a signal, or
a dependency that died: `sim.runtime.interrupts.stopping`): the retry would
only hold the stop up, often inside a shielded cleanup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, final

from sim.runtime.errors import Determinate, Indeterminate
from sim.runtime.interrupts import stopping

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime.core import Runtime

__all__ = ["RetryPolicy", "retry_external"]

T = TypeVar("T")


@final
@dataclass(frozen=True)
class RetryPolicy:
    deadline_s: float = 60.0
    base_s: float = 0.005
    cap_s: float = 1.0

    def backoff(self, rt: Runtime, attempt: int) -> float:
        """Full-jitter-ish backoff: between half and all of the capped exponential."""
        top: float = min(self.cap_s, self.base_s * 2.0**attempt)
        return top * (0.5 + rt.rng.random() / 2)


async def retry_external(
    rt: Runtime,
    op: Callable[[], Awaitable[T]],
    *,
    idempotent: bool,
    policy: RetryPolicy = RetryPolicy(),
    on_retry: Callable[[Exception], None] | None = None,
) -> T:
    """Runs `op`, retrying `Determinate` errors (and `Indeterminate` ones iff
    `idempotent`) until `policy.deadline_s` has passed (or the process is
    stopping); then re-raises the last."""
    start = rt.now()
    attempt = 0
    while True:
        try:
            return await op()
        except (Determinate, Indeterminate) as exc:
            if isinstance(exc, Indeterminate) and not idempotent:
                raise
            if rt.now() - start >= policy.deadline_s or stopping():
                raise
            if on_retry is not None:
                on_retry(exc)
            await rt.sleep(policy.backoff(rt, attempt))
            attempt += 1
