"""The shadow catalog (seed 004): every call runs on two implementations, one after
the other, and any disagreement — a different result, a different error, a
different cached state — raises `ShadowMismatch` with a readable diff.

Writes are serialized by the shadow, so both sides see the same sequence of
appends and must answer each one alike (both `Appended` or both `Conflict`).
The inner catalogs must have no oracle of their own: the shadow picks commit
timestamps and calls `apply_write` once, itself.

One process per shadow location: the two stores are not updated atomically
together, so concurrent openers (or writers) in different processes may be
ordered differently by each, which the shadow reports as a mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, final

import anyio

from catalog.api import Appended, Changes, DurableCatalog, Progress, Subscription
from catalog.objects import CatalogState
from sim.runtime.errors import CoordsimError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Sequence

    from catalog.api import AppendResult, CatalogEvent, OpenReport, UpgradeCheck
    from catalog.objects import CatalogUpdate
    from catalog.transaction import Transaction
    from oracle.api import TimestampOracle

__all__ = ["ShadowCatalog", "ShadowMismatch", "describe_state_diff"]

T = TypeVar("T")


class ShadowMismatch(CoordsimError):
    """The two implementations of a shadow catalog disagreed (a bug in one)."""


def describe_state_diff(a: CatalogState, b: CatalogState, *, limit: int = 10) -> str:
    """Lines naming entries only in `a`, only in `b`, or different (first `limit`)."""
    lines: list[str] = []
    for k in sorted(a.entries.keys() | b.entries.keys()):
        va, vb = a.entries.get(k), b.entries.get(k)
        if va == vb:
            continue
        name = f"{k[0]} {k[1]}"
        if vb is None:
            lines.append(f"  only in primary:   {name} = {va}")
        elif va is None:
            lines.append(f"  only in secondary: {name} = {vb}")
        else:
            lines.append(f"  differs: {name}\n    primary:   {va}\n    secondary: {vb}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"  … and {len(lines) - limit} more"]
    return "\n".join(lines)


def _describe(value: object, error: BaseException | None) -> str:
    if error is not None:
        return f"raised {type(error).__name__}: {error}"
    return f"returned {value!r}"


async def _capture(call: Awaitable[T]) -> tuple[T | None, CoordsimError | None]:
    try:
        return await call, None
    except CoordsimError as exc:
        return None, exc


@final
class ShadowCatalog(DurableCatalog):
    """`primary` and `secondary` (typically persist and stash) run in lockstep;
    results come from `primary` once the two agree."""

    def __init__(
        self, primary: DurableCatalog, secondary: DurableCatalog, *, oracle: TimestampOracle | None = None
    ) -> None:
        self.primary = primary
        self.secondary = secondary
        self._oracle = oracle
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"ShadowCatalog({self.primary!r}, {self.secondary!r})"

    async def close(self) -> None:
        try:
            await self.primary.close()
        finally:
            await self.secondary.close()

    # --- comparison ----------------------------------------------------------------------

    def _mismatch(self, op: str, detail: str) -> ShadowMismatch:
        return ShadowMismatch(f"shadow catalog: {op} disagrees\n{detail}")

    def _same(self, op: str, a: Any, b: Any) -> None:
        if isinstance(a, CatalogState) and isinstance(b, CatalogState):
            if a != b:
                raise self._mismatch(op, describe_state_diff(a, b))
        elif a != b:
            raise self._mismatch(op, f"  primary:   {a!r}\n  secondary: {b!r}")

    async def _both(self, op: str, a: Awaitable[T], b: Awaitable[T]) -> T:
        ra, ea = await _capture(a)
        rb, eb = await _capture(b)
        if ea is not None or eb is not None:
            if type(ea) is type(eb):
                assert ea is not None
                raise ea
            raise self._mismatch(
                op, f"  primary {_describe(ra, ea)}\n  secondary {_describe(rb, eb)}"
            ) from (ea or eb)
        self._same(op, ra, rb)
        return ra  # type: ignore[return-value]

    def _check_states(self, op: str) -> None:
        self._same(f"{op} (cached upper)", self.primary.cached_upper, self.secondary.cached_upper)
        self._same(f"{op} (cached state)", self.primary.state(), self.secondary.state())

    # --- initialization ------------------------------------------------------------------

    async def is_initialized(self) -> bool:
        return await self._both("is_initialized", self.primary.is_initialized(), self.secondary.is_initialized())

    async def get_deploy_generation(self) -> int | None:
        return await self._both(
            "get_deploy_generation", self.primary.get_deploy_generation(), self.secondary.get_deploy_generation()
        )

    async def fetch_upper(self) -> int:
        return await self._both("fetch_upper", self.primary.fetch_upper(), self.secondary.fetch_upper())

    async def open(
        self, *, bootstrap: CatalogState | None = None, deploy_generation: int | None = None
    ) -> OpenReport:
        async with self._lock:
            report = await self._both(
                "open",
                self.primary.open(bootstrap=bootstrap, deploy_generation=deploy_generation),
                self.secondary.open(bootstrap=bootstrap, deploy_generation=deploy_generation),
            )
            self._check_states("open")
        if self._oracle is not None:
            await self._oracle.apply_write(self.primary.cached_upper - 1)
        return report

    async def check_open(self, *, replica_sizes: frozenset[str] | None = None) -> UpgradeCheck:
        return await self._both(
            "check_open",
            self.primary.check_open(replica_sizes=replica_sizes),
            self.secondary.check_open(replica_sizes=replica_sizes),
        )

    async def open_read_only(self) -> None:
        await self._both("open_read_only", self.primary.open_read_only(), self.secondary.open_read_only())
        self._check_states("open_read_only")

    async def join(self, epoch: int) -> None:
        await self._both("join", self.primary.join(epoch), self.secondary.join(epoch))
        self._check_states("join")

    def epoch(self) -> int | None:
        a, b = self.primary.epoch(), self.secondary.epoch()
        self._same("epoch", a, b)
        return a

    # --- reads ---------------------------------------------------------------------------

    def state(self) -> CatalogState:
        self._check_states("state")
        return self.primary.state()

    @property
    def cached_upper(self) -> int:
        a, b = self.primary.cached_upper, self.secondary.cached_upper
        self._same("cached_upper", a, b)
        return a

    def dump(self) -> str:
        a, b = self.primary.dump(), self.secondary.dump()
        if a != b:
            self._check_states("dump")
            self._same("dump", a, b)
        return a

    async def sync(self) -> int:
        async with self._lock:
            upper = await self._both("sync", self.primary.sync(), self.secondary.sync())
            self._check_states("sync")
        return upper

    # --- writes --------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        self._check_states("transaction")
        return self.primary.transaction()

    async def commit_transaction(self, tx: Transaction, *, commit_ts: int | None = None) -> AppendResult:
        if commit_ts is None:
            commit_ts = tx.upper
            if self._oracle is not None:
                commit_ts = max((await self._oracle.write_ts()).ts, tx.upper)
        if commit_ts < tx.upper:
            raise InvalidUsage(f"commit_ts {commit_ts} is below the transaction's upper {tx.upper}")
        return await self.compare_and_append(tx.upper, commit_ts + 1, tx.updates(commit_ts))

    async def compare_and_append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]
    ) -> AppendResult:
        async with self._lock:
            result = await self._both(
                f"compare_and_append({expected_upper}, {new_upper})",
                self.primary.compare_and_append(expected_upper, new_upper, updates),
                self.secondary.compare_and_append(expected_upper, new_upper, updates),
            )
            self._check_states("compare_and_append")
        if isinstance(result, Appended) and self._oracle is not None:
            await self._oracle.apply_write(new_upper - 1)
        return result

    async def confirm_leadership(self) -> None:
        await self._both(
            "confirm_leadership", self.primary.confirm_leadership(), self.secondary.confirm_leadership()
        )

    # --- the pTVC ------------------------------------------------------------------------

    async def snapshot_at(self, ts: int) -> CatalogState:
        return await self._both(f"snapshot_at({ts})", self.primary.snapshot_at(ts), self.secondary.snapshot_at(ts))

    async def subscribe_at(self, ts: int) -> Subscription:
        a = await self.primary.subscribe_at(ts)
        try:
            b = await self.secondary.subscribe_at(ts)
        except BaseException:
            await a.aclose()
            raise
        self._same(f"subscribe_at({ts}) snapshot", a.snapshot, b.snapshot)

        async def close() -> None:
            try:
                await a.aclose()
            finally:
                await b.aclose()

        return Subscription(ts, a.snapshot, self._merged(ts, a, b), close)

    async def _merged(self, ts: int, a: Subscription, b: Subscription) -> AsyncIterator[CatalogEvent]:
        """`a`'s events, each stretch up to a `Progress` checked against `b`'s."""
        other = aiter(b)
        b_upper = ts + 1
        b_changes: dict[int, tuple[CatalogUpdate, ...]] = {}
        pending: list[Changes] = []
        async for event in a:
            if isinstance(event, Changes):
                pending.append(event)
                continue
            assert isinstance(event, Progress)
            while b_upper < event.upper:
                e = await anext(other)
                if isinstance(e, Changes):
                    b_changes[e.ts] = e.updates
                else:
                    b_upper = e.upper
            for c in pending:
                self._same(f"subscription changes at {c.ts}", c.updates, b_changes.pop(c.ts, ()))
            early = sorted(t for t in b_changes if t < event.upper)
            if early:
                raise self._mismatch(
                    "subscription", f"  secondary has changes at {early} that primary lacks"
                )
            for c in pending:
                yield c
            pending.clear()
            yield event

    async def downgrade_since(self, ts: int) -> None:
        await self._both(
            f"downgrade_since({ts})", self.primary.downgrade_since(ts), self.secondary.downgrade_since(ts)
        )

    async def since(self) -> int:
        return await self._both("since", self.primary.since(), self.secondary.since())
