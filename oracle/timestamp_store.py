"""The timestamp store behind today's in-memory oracle: durable per-timeline upper bounds and an
epoch that fences older processes (seed 000, "the current TimestampOracle").

The invariant it protects: a process whose epoch is no longer current can never
again make a durable change, and every process learns the uppers of every
earlier one, so a restarted oracle never hands out a timestamp twice.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Self, final

from anyio.lowlevel import checkpoint

from oracle.api import check_timeline
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:
    from sim.runtime.core import Runtime

__all__ = ["MemTimestampStore", "TimestampStore", "UnfencedTimestampStore"]


class TimestampStore(ABC):
    """A small durable store: an epoch (fencing token) and one upper per timeline.

    State: the current epoch (0 until the first `open`) and, per timeline, an
    upper or nothing. Every handle on one store (e.g. `PostgresTimestampStore`
    objects of one name, from any process) shares it, and each method is
    linearizable over all of them: it takes effect at one instant between its
    call and its return.

    Every method is one durable transaction (a real round trip, or a modeled one
    in memory). Misuse — an invalid timeline (`oracle.api.check_timeline`), an
    upper outside `[0, 2**63 - 1]`, an epoch `open` cannot have returned (< 1),
    a bool for an int — raises `InvalidUsage` before touching the store.
    Failures of the store raise `ExternalError`; implementations retry what is
    safe to retry (every method here is idempotent or, for `open`, harmless to
    repeat: a repeated bump only skips an epoch). `Fenced` is an answer, not a
    failure: it is never retried.
    """

    @abstractmethod
    async def open(self) -> int:
        """Bumps the epoch and returns the new value, fencing every older opener.

        The result is >= 1 and greater than every epoch an earlier `open` of the
        store returned, so two calls (from any processes) never return the same
        epoch. Read uppers only after `open` returns: then they include every
        upper written by an older epoch (its writes either committed before the
        bump or are refused).
        """

    @abstractmethod
    async def read_upper(self, timeline: str) -> int | None:
        """The upper persisted for `timeline` (>= every upper a `write_upper` that
        returned before the call wrote), or None if none ever was."""

    @abstractmethod
    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        """In one transaction: checks `epoch` is still current, then raises the
        persisted upper of `timeline` to at least `upper` (never lowers it; other
        timelines are untouched). Idempotent.

        Raises:
            Fenced: `epoch` is not the current epoch (nothing written).
        """

    @abstractmethod
    async def confirm_leadership(self, epoch: int) -> None:
        """One transaction that checks `epoch` is still current (returns iff it is).

        Raises:
            Fenced: a newer process has opened the store.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Releases connections; the store must not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


_BIGINT_MAX = 2**63 - 1


def check_upper(upper: int) -> None:
    if not isinstance(upper, int) or isinstance(upper, bool) or not 0 <= upper <= _BIGINT_MAX:
        raise InvalidUsage(f"upper must be an int in [0, {_BIGINT_MAX}], got {upper!r}")


def check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise InvalidUsage(f"epoch must be an int >= 1 (from TimestampStore.open), got {epoch!r}")


@final
class MemTimestampStore(TimestampStore):
    """The store in memory, for virtual-time runs: durable for as long as the object
    lives, so "restarting" an oracle means opening a new one on the same store.

    Each transaction costs one sample of the latency named `stash.txn` (zero unless
    the Runtime's latency model says otherwise) and commits at the end of it.
    """

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._epoch = 0
        self._uppers: dict[str, int] = {}
        self.transactions = 0

    async def _txn(self) -> None:
        await checkpoint()
        await self._rt.delay("stash.txn")
        self.transactions += 1

    async def open(self) -> int:
        await self._txn()
        self._epoch += 1
        return self._epoch

    async def read_upper(self, timeline: str) -> int | None:
        check_timeline(timeline)
        await self._txn()
        return self._uppers.get(timeline)

    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        check_timeline(timeline)
        check_upper(upper)
        check_epoch(epoch)
        await self._txn()
        if epoch != self._epoch:
            raise Fenced(f"store epoch is {self._epoch}, this process opened epoch {epoch}")
        self._uppers[timeline] = max(self._uppers.get(timeline, 0), upper)

    async def confirm_leadership(self, epoch: int) -> None:
        check_epoch(epoch)
        await self._txn()
        if epoch != self._epoch:
            raise Fenced(f"store epoch is {self._epoch}, this process opened epoch {epoch}")


@final
class UnfencedTimestampStore(TimestampStore):
    """The known-bad `KnownBad.skip_epoch_fencing`: `inner` without its fencing.
    A write that finds a newer epoch takes the epoch back (`open`) and writes
    anyway, and `confirm_leadership` always succeeds — so a deposed process
    never learns it was deposed, and two oracles hand out timestamps at once."""

    def __init__(self, inner: TimestampStore) -> None:
        self.inner = inner
        self._epoch: int | None = None

    async def open(self) -> int:
        self._epoch = await self.inner.open()
        return self._epoch

    async def read_upper(self, timeline: str) -> int | None:
        return await self.inner.read_upper(timeline)

    async def write_upper(self, timeline: str, upper: int, epoch: int) -> None:
        try:
            await self.inner.write_upper(timeline, upper, self._epoch or epoch)
        except Fenced:
            self._epoch = await self.inner.open()
            await self.inner.write_upper(timeline, upper, self._epoch)

    async def confirm_leadership(self, epoch: int) -> None:
        # The same round trip, its answer ignored.
        with contextlib.suppress(Fenced):
            await self.inner.confirm_leadership(self._epoch or epoch)

    async def close(self) -> None:
        await self.inner.close()
