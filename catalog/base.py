"""What the persist and stash catalogs share: the cache, opening (initialize or
migrate + epoch bump in one compare-and-append), transactions, the epoch check
before every write, and the oracle's `apply_write` after it. (`fencing=False`
drops the epoch check: the known-bad `KnownBad.skip_epoch_fencing`.)

A backend supplies six primitives (`_recent_upper`, `_read_current`, `_load`,
`_catch_up`, `_write`, `_after_write`) plus the pTVC reads. The invariant kept
here: the cache only moves forward, and only under `_lock`, so a write checked
against the cached upper sees exactly the state it is appended to.

With the Runtime's event log on (`sim.runtime.events`), every transaction is a
`catalog.txn` event (kind `open`, `append` or `commit`; its updates; outcome
`appended`, `conflict`, `fenced` or `error`; the uppers, epoch and latency),
and an opener that finds a newer epoch is a `fenced` event.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import TYPE_CHECKING

import anyio

from catalog.api import (
    Appended,
    AppendResult,
    CatalogNotReady,
    Conflict,
    DurableCatalog,
    OpenReport,
    UpgradeCheck,
)
from catalog.migrations import MigrationError, initial_state, migrate
from catalog.objects import FORMAT_VERSION, KINDS, CatalogState, CatalogUpdate, Config
from catalog.transaction import Transaction
from sim.runtime.errors import Fenced, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from oracle.api import TimestampOracle
    from sim.runtime.core import Runtime

__all__ = ["CachedCatalog", "check_updates"]


def check_updates(expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]) -> None:
    """Raises `InvalidUsage` unless the arguments of a compare-and-append are well formed."""
    for name, v in (("expected_upper", expected_upper), ("new_upper", new_upper)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InvalidUsage(f"{name} must be an int >= 0, got {v!r}")
    if new_upper <= expected_upper:
        raise InvalidUsage(f"new_upper {new_upper} must be greater than expected_upper {expected_upper}")
    for u in updates:
        if not isinstance(u, CatalogUpdate):
            raise InvalidUsage(f"catalog updates must be CatalogUpdate, got {type(u).__name__}")
        if not expected_upper <= u.ts < new_upper:
            raise InvalidUsage(f"update at ts {u.ts} is outside [{expected_upper}, {new_upper})")
        if u.diff not in (1, -1):
            raise InvalidUsage(f"catalog updates have diff +1 or -1, got {u.diff}")
        if u.kind not in KINDS:
            raise InvalidUsage(f"unknown object kind {u.kind!r}")


class CachedCatalog(DurableCatalog):
    """A `DurableCatalog` over a backend that stores the update log and can
    compare-and-append to it (see the module docstring)."""

    def __init__(self, rt: Runtime, oracle: TimestampOracle | None, *, fencing: bool = True) -> None:
        self._rt = rt
        self._fencing = fencing
        self._oracle = oracle
        self._cache = CatalogState()
        self._upper = 0
        self._epoch: int | None = None
        self._mode = "closed"  # "closed" | "open" | "read_only"
        self._lock = anyio.Lock()

    # --- backend primitives --------------------------------------------------------------

    @abstractmethod
    async def _recent_upper(self) -> int:
        """The durable upper, linearized."""

    @abstractmethod
    async def _read_current(self) -> tuple[int, CatalogState]:
        """The durable upper and the catalog at `upper - 1` (empty if 0), without
        touching the cache."""

    @abstractmethod
    async def _load(self) -> None:
        """(Re)loads the cache from scratch at the current upper. Lock held."""

    @abstractmethod
    async def _catch_up(self, target: int) -> None:
        """Moves the cache forward to an upper `>= target` (a durable upper). Lock held."""

    @abstractmethod
    async def _write(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate], epoch: int | None
    ) -> AppendResult:
        """The durable compare-and-append; `epoch` (None: don't) is checked
        atomically with it where the backend can. Lock held."""

    @abstractmethod
    async def _after_write(self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]) -> None:
        """Moves the cache past this object's own successful write. Lock held."""

    @abstractmethod
    async def _confirm(self, epoch: int) -> None:
        """The backend's linearized leadership check (raises `Fenced`)."""

    # --- helpers -------------------------------------------------------------------------

    def _require(self, *modes: str) -> None:
        if self._mode not in modes:
            want = " or ".join("opened read-only" if m == "read_only" else f"{m}ed" if m == "open" else m for m in modes)
            raise InvalidUsage(f"the catalog is {self._mode_name()}; this needs it {want}")

    def _mode_name(self) -> str:
        return {"closed": "not opened", "open": "open", "read_only": "opened read-only"}[self._mode]

    async def _pick_ts(self, commit_ts: int | None, upper: int) -> int:
        if commit_ts is not None:
            return commit_ts
        if self._oracle is not None:
            return max((await self._oracle.write_ts()).ts, upper)
        return upper

    async def _applied(self, new_upper: int) -> None:
        if self._oracle is not None:
            await self._oracle.apply_write(new_upper - 1)

    def _check_epoch(self) -> None:
        assert self._epoch is not None
        if not self._fencing:
            return
        current = self._cache.config("epoch")
        if current != self._epoch:
            self._report_fenced("write", current)
            raise Fenced(f"catalog epoch is {current}, this opener holds epoch {self._epoch}")

    def _report_fenced(self, step: str, current: int | None) -> None:
        """A `fenced` event: this opener (the bound actor) holds an older epoch."""
        if self._rt.events.on:
            self._rt.events.emit("fenced", component="catalog", step=step, epoch=self._epoch, current_epoch=current)

    def _report_txn(
        self, kind: str, start: float, *, ops: int, outcome: str, expected_upper: int, new_upper: int | None
    ) -> None:
        self._rt.events.emit(
            "catalog.txn", kind=kind, ops=ops, outcome=outcome, expected_upper=expected_upper,
            new_upper=new_upper, epoch=self._epoch, latency_ms=round((self._rt.now() - start) * 1e6) / 1000,
        )

    # --- initialization ------------------------------------------------------------------

    async def is_initialized(self) -> bool:
        return await self._recent_upper() > 0

    async def fetch_upper(self) -> int:
        return await self._recent_upper()

    async def get_deploy_generation(self) -> int | None:
        if self._mode != "closed":
            return self._cache.config("deploy_generation")
        upper, state = await self._read_current()
        return state.config("deploy_generation") if upper > 0 else None

    async def open(
        self, *, bootstrap: CatalogState | None = None, deploy_generation: int | None = None
    ) -> OpenReport:
        self._require("closed")
        if deploy_generation is not None and (
            not isinstance(deploy_generation, int) or isinstance(deploy_generation, bool) or deploy_generation < 0
        ):
            raise InvalidUsage(f"deploy_generation must be an int >= 0, got {deploy_generation!r}")
        start = self._rt.now()
        async with self._lock:
            while True:
                await self._load()
                upper, current = self._upper, self._cache
                migrated_from: int | None = None
                steps: tuple[str, ...] = ()
                if upper == 0:
                    target = bootstrap.copy() if bootstrap is not None else initial_state()
                    epoch = 1
                else:
                    plan = migrate(current)
                    if plan.steps:
                        migrated_from, steps = plan.from_version, plan.steps
                    target = plan.state
                    epoch = (current.config("epoch") or 0) + 1
                target.put(Config("epoch", epoch))
                if deploy_generation is not None:
                    target.put(Config("deploy_generation", deploy_generation))
                ts = await self._pick_ts(None, upper)
                updates = target.diff(current, ts)
                result = await self._write(upper, ts + 1, updates, None)
                if isinstance(result, Conflict):
                    continue  # a concurrent opener won: start over on its state
                self._epoch, self._mode = epoch, "open"
                await self._after_write(upper, ts + 1, updates)
                break
        await self._applied(ts + 1)
        if self._rt.events.on:
            # The epoch bump fences every opener of an older epoch.
            self._report_txn("open", start, ops=len(updates), outcome="appended", expected_upper=upper,
                             new_upper=ts + 1)
        return OpenReport(epoch, upper == 0, migrated_from, steps)

    async def check_open(self, *, replica_sizes: frozenset[str] | None = None) -> UpgradeCheck:
        upper, state = await self._read_current()
        if upper == 0:
            return UpgradeCheck(False, None, FORMAT_VERSION, ())
        plan = migrate(state, replica_sizes=replica_sizes)
        return UpgradeCheck(True, plan.from_version, FORMAT_VERSION, plan.steps)

    async def open_read_only(self) -> None:
        self._require("closed")
        async with self._lock:
            await self._load()
            if self._upper == 0:
                raise CatalogNotReady("cannot open an uninitialized catalog read-only")
            try:
                plan = migrate(self._cache)
            except MigrationError as exc:
                raise CatalogNotReady(f"cannot open read-only: {exc}") from exc
            if plan.steps:
                raise CatalogNotReady(
                    f"cannot open read-only: format version {plan.from_version} needs migration "
                    f"to {FORMAT_VERSION} ({len(plan.steps)} steps)"
                )
            self._mode = "read_only"

    async def join(self, epoch: int) -> None:
        self._require("closed")
        async with self._lock:
            await self._load()
            if self._upper == 0:
                raise CatalogNotReady("cannot join an uninitialized catalog")
            current = self._cache.config("epoch")
            if self._fencing and current != epoch:
                self._report_fenced("join", current)
                raise Fenced(f"catalog epoch is {current}, cannot join at epoch {epoch}")
            self._epoch, self._mode = epoch, "open"

    def epoch(self) -> int | None:
        return self._epoch

    # --- reads ---------------------------------------------------------------------------

    def state(self) -> CatalogState:
        self._require("open", "read_only")
        return self._cache.copy()

    @property
    def cached_upper(self) -> int:
        return self._upper

    def dump(self) -> str:
        self._require("open", "read_only")
        return json.dumps(self._cache.to_json(), indent=2, sort_keys=True)

    async def sync(self) -> int:
        self._require("open", "read_only")
        upper = await self._recent_upper()
        async with self._lock:
            if upper > self._upper:
                await self._catch_up(upper)
            return self._upper

    # --- writes --------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        self._require("open")
        return Transaction(self._cache.copy(), self._upper)

    async def commit_transaction(self, tx: Transaction, *, commit_ts: int | None = None) -> AppendResult:
        self._require("open")
        if tx.upper < self._upper:
            if self._rt.events.on:
                self._report_txn("commit", self._rt.now(), ops=len(tx.updates(tx.upper)), outcome="conflict",
                                 expected_upper=tx.upper, new_upper=None)
            return Conflict(self._upper)
        ts = await self._pick_ts(commit_ts, tx.upper)
        if ts < tx.upper:
            raise InvalidUsage(f"commit_ts {ts} is below the transaction's upper {tx.upper}")
        return await self._reported("commit", tx.upper, ts + 1, tx.updates(ts))

    async def compare_and_append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]
    ) -> AppendResult:
        return await self._reported("append", expected_upper, new_upper, updates)

    async def _reported(
        self, kind: str, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]
    ) -> AppendResult:
        """`_compare_and_append`, reported as a `catalog.txn` event of `kind`."""
        if not self._rt.events.on:
            return await self._compare_and_append(expected_upper, new_upper, updates)
        start, outcome = self._rt.now(), "error"
        try:
            result = await self._compare_and_append(expected_upper, new_upper, updates)
            outcome = "conflict" if isinstance(result, Conflict) else "appended"
            return result
        except Fenced:
            outcome = "fenced"
            raise
        finally:
            self._report_txn(kind, start, ops=len(updates), outcome=outcome, expected_upper=expected_upper,
                             new_upper=new_upper)

    async def _compare_and_append(
        self, expected_upper: int, new_upper: int, updates: Sequence[CatalogUpdate]
    ) -> AppendResult:
        self._require("open")
        check_updates(expected_upper, new_upper, updates)
        async with self._lock:
            if expected_upper > self._upper:
                await self._catch_up(await self._recent_upper())
            if expected_upper != self._upper:
                self._check_epoch()
                return Conflict(self._upper)
            self._check_epoch()
            self._cache.copy().apply(updates)  # consistent with the state it appends to?
            epoch = self._epoch if self._fencing else None
            result = await self._write(expected_upper, new_upper, updates, epoch)
            if isinstance(result, Conflict):
                await self._catch_up(result.current_upper)
                self._check_epoch()
                return result
            await self._after_write(expected_upper, new_upper, updates)
        await self._applied(new_upper)
        return Appended(new_upper)

    async def confirm_leadership(self) -> None:
        self._require("open")
        assert self._epoch is not None
        if self._fencing:
            try:
                await self._confirm(self._epoch)
            except Fenced:
                self._report_fenced("confirm_leadership", None)
                raise
