"""The one way to open the timestamp oracle: `open_oracles(spec, rt)` opens one
process's oracle backend, and its `timeline(name)` the oracle of each timeline
on it. `oracle_spec(url)` resolves a URL into the `OracleSpec` it names.
Nothing else constructs an implementation (tests/test_opening.py checks it), so
the coordinators, the harness, `compare` and the conformance suite open
oracles alike. Wrappers (`BatchingOracle`, `GatedOracle`, `ObservedOracle`)
go on top of what it opens.

| URL | backend | oracle | durable state |
|---|---|---|---|
| `mem://[?window_ms=N]` | `MEMORY` | `MemoryOracle` | a fresh `MemTimestampStore` |
| `memory+postgres://…[?stash=NAME&window_ms=N]` | `MEMORY_POSTGRES` | `MemoryOracle` | `PostgresTimestampStore` |
| `postgres://…`, `postgresql://…` | `POSTGRES` | `PostgresOracle` | the `timestamp_oracle` table |
| `modeled://` | `MODELED` | `ModeledOracle` (virtual mode's Postgres oracle) | in-memory rows, modeled round trips |

Postgres URLs also take `pool_size`, `isolation=serializable|read-committed`
(default serializable, as CockroachDB) and the libpq parameters of
`sim.runtime.urls.PG_PASSTHROUGH` (`password`, `application_name`,
`connect_timeout`, the TLS ones, …). Unknown parameters are `InvalidUsage`.
asyncpg is imported only for Postgres backends.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self, final

from oracle.api import REALTIME_TIMELINE, check_timeline
from oracle.memory import DEFAULT_WINDOW_MS, MemoryOracle
from oracle.modeled import ModeledOracle, ModeledOracleRows
from oracle.timestamp_store import MemTimestampStore, UnfencedTimestampStore
from sim.runtime.errors import InvalidUsage
from sim.runtime.urls import PG_PASSTHROUGH, ParsedUrl, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from oracle.timestamp_store import TimestampStore
    from sim.runtime.core import Runtime
    from sim.runtime.pgclient import PostgresClient

__all__ = ["OracleBackend", "OracleSpec", "Oracles", "open_oracles", "oracle_spec"]


class OracleBackend(enum.StrEnum):
    """Where a process's oracles keep their state (the module docstring's table)."""

    MEMORY = "memory"
    MEMORY_POSTGRES = "memory+postgres"
    POSTGRES = "postgres"
    MODELED = "modeled"

    @property
    def in_memory_oracle(self) -> bool:
        """Today's oracle (state in memory, durable through a store), which fences."""
        return self in (OracleBackend.MEMORY, OracleBackend.MEMORY_POSTGRES)


_ON_POSTGRES: Final = (OracleBackend.MEMORY_POSTGRES, OracleBackend.POSTGRES)


@final
@dataclass(frozen=True)
class OracleSpec:
    """A resolved oracle configuration: everything `open_oracles` needs.

    Args:
        backend: which implementation, on what.
        url: Postgres backends: the database (a URL `PostgresClient.connect`
            takes); "" otherwise.
        pool_size: Postgres backends: the process's connections.
        application_name: Postgres backends: its sessions' name in
            `pg_stat_activity` (fault tests find our backends by it).
        store_name: `MEMORY_POSTGRES`: the store (one per deployment).
        window_ms: in-memory oracles: how far ahead the persisted upper is set.
        store: `MEMORY`: the store every process of a virtual deployment
            shares (it outlives them, as a database would); None: a fresh
            one for each `open_oracles`.
        rows: `MODELED`: likewise, the modeled `timestamp_oracle` table.
        unguarded_clock: known-bad variant (issue 38): `write_ts` is the wall
            clock without the `max`/`GREATEST` (`MemoryOracle.open`).
        skip_epoch_fencing: known-bad variant: in-memory oracles never learn
            they were deposed (`oracle.timestamp_store.UnfencedTimestampStore`).
    """

    backend: OracleBackend
    url: str = ""
    pool_size: int = 8
    application_name: str = "coordsim-oracle"
    store_name: str = "default"
    window_ms: int = DEFAULT_WINDOW_MS
    store: MemTimestampStore | None = None
    rows: ModeledOracleRows | None = None
    unguarded_clock: bool = False
    skip_epoch_fencing: bool = False

    def __post_init__(self) -> None:
        if (self.backend in _ON_POSTGRES) != bool(self.url):
            raise InvalidUsage(f"an oracle on {self.backend} takes a database URL iff it is on Postgres")
        for name in ("pool_size", "window_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidUsage(f"{name} must be an int >= 1, got {value!r}")
        if not self.store_name or len(self.store_name) > 256:
            raise InvalidUsage(f"invalid store name {self.store_name!r}: a non-empty str of <= 256 chars")
        if self.store is not None and self.backend is not OracleBackend.MEMORY:
            raise InvalidUsage(f"a shared in-memory store is for the {OracleBackend.MEMORY} backend only")
        if self.rows is not None and self.backend is not OracleBackend.MODELED:
            raise InvalidUsage(f"shared modeled rows are for the {OracleBackend.MODELED} backend only")
        if self.skip_epoch_fencing and not self.backend.in_memory_oracle:
            raise InvalidUsage("skip_epoch_fencing needs an in-memory oracle (only it fences)")


_PG_SCHEMES: Final = ("postgres", "postgresql")
_MEMORY_PG_SCHEMES: Final = ("memory+postgres", "memory+postgresql")


def _int_param(u: ParsedUrl, name: str, default: int) -> int:
    raw = u.params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidUsage(f"parameter {name}={raw!r} in {redact_url(u.url)} must be an integer >= 1")
    return value


def oracle_spec(url: str, *, application_name: str | None = None) -> OracleSpec:
    """The `OracleSpec` that `url` names (see the module docstring).

    Args:
        application_name: overrides the URL's (Postgres sessions' name).

    Raises:
        InvalidUsage: an unknown scheme or parameter, or a bad value (one line).
    """
    from sim.runtime.pg import ISOLATION_PARAM, isolation_of, with_isolation  # asyncpg

    u = parse_url(url)
    if u.scheme in ("mem", "modeled"):
        u.require_params(("window_ms",) if u.scheme == "mem" else ())
        if u.netloc or u.path not in ("", "/"):
            raise InvalidUsage(f"{u.scheme}:// takes no name or path, got {redact_url(url)}")
        backend = OracleBackend.MEMORY if u.scheme == "mem" else OracleBackend.MODELED
    elif u.scheme in _PG_SCHEMES:
        u.require_params(PG_PASSTHROUGH | {"pool_size", ISOLATION_PARAM})
        backend = OracleBackend.POSTGRES
    elif u.scheme in _MEMORY_PG_SCHEMES:
        u.require_params(PG_PASSTHROUGH | {"pool_size", "stash", "window_ms", ISOLATION_PARAM})
        backend = OracleBackend.MEMORY_POSTGRES
    else:
        raise InvalidUsage(
            f"unknown oracle URL scheme {u.scheme!r} in {redact_url(url)}: "
            "expected mem://, memory+postgres://, postgres:// or modeled://"
        )
    # The parameter keeps the store's former name (issue 37): URLs in use say `stash=`.
    store_name = u.params.get("stash", "default")
    if not store_name:
        raise InvalidUsage(f"parameter stash in {redact_url(url)} must not be empty")
    return OracleSpec(
        backend,
        # application_name is not left to the URL: the client sets it
        # explicitly. The isolation level rides along in the driver's URL.
        url=with_isolation(driver_url(url, drop=("application_name",)), isolation_of(url))
        if backend in _ON_POSTGRES
        else "",
        pool_size=_int_param(u, "pool_size", 8),
        application_name=application_name or u.params.get("application_name", "coordsim-oracle"),
        store_name=store_name,
        window_ms=_int_param(u, "window_ms", DEFAULT_WINDOW_MS),
    )


async def open_oracles(spec: OracleSpec | str, rt: Runtime) -> Oracles:
    """Opens one process's oracle backend (a Postgres pool; a store, whose
    epoch the process bumps when it opens its first timeline; modeled rows).
    Use it as `async with await open_oracles(spec, rt) as oracles:`, then
    `await oracles.timeline(name)`; closing it closes every oracle it opened.

    Args:
        spec: an `OracleSpec`, or a URL naming one (`oracle_spec`).

    Raises:
        InvalidUsage: a bad spec or URL.
        ExternalError: the database cannot be reached (one line).
    """
    if isinstance(spec, str):
        spec = oracle_spec(spec)
    if spec.backend is OracleBackend.MODELED:
        return Oracles(spec, rt, rows=spec.rows or ModeledOracleRows())
    if spec.backend is OracleBackend.MEMORY:
        return Oracles(spec, rt, store=spec.store or MemTimestampStore(rt), owns_store=spec.store is None)
    if spec.backend is OracleBackend.MEMORY_POSTGRES:
        from oracle.timestamp_store_postgres import PostgresTimestampStore

        store = await PostgresTimestampStore.connect(
            spec.url, rt, name=spec.store_name, pool_size=spec.pool_size,
            application_name=spec.application_name,
        )
        return Oracles(spec, rt, store=store, owns_store=True)
    from sim.runtime.pgclient import PostgresClient

    client = await PostgresClient.connect(
        spec.url, rt, pool_size=spec.pool_size, application_name=spec.application_name
    )
    return Oracles(spec, rt, client=client)


@final
class Oracles:
    """One process's oracles on one backend; `open_oracles` opens it.

    An in-memory oracle's process holds one store epoch for all its timelines
    (opening the first bumps it, fencing every older process); Postgres
    oracles share one pool; modeled ones one table.
    """

    def __init__(
        self,
        spec: OracleSpec,
        rt: Runtime,
        *,
        store: TimestampStore | None = None,
        owns_store: bool = False,
        client: PostgresClient | None = None,
        rows: ModeledOracleRows | None = None,
    ) -> None:
        """Use `open_oracles`."""
        self.spec = spec
        self._rt = rt
        self._raw_store = store
        self._store = UnfencedTimestampStore(store) if store is not None and spec.skip_epoch_fencing else store
        self._owns_backend = owns_store or client is not None
        self._client = client
        self._rows = rows
        self._epoch: int | None = None
        self._oracles: dict[str, TimestampOracle] = {}
        self._opening: set[str] = set()  # membership only
        self._handed_over = False
        self._closed = False

    @property
    def backend(self) -> OracleBackend:
        return self.spec.backend

    @property
    def epoch(self) -> int | None:
        """In-memory oracles: this process's store epoch, once a timeline is open."""
        return self._epoch

    def __repr__(self) -> str:
        return f"Oracles({self.spec.backend}, {sorted(self._oracles)})"

    async def timeline(
        self, name: str = REALTIME_TIMELINE, *, at_upper: bool = True, owns_backend: bool = False
    ) -> TimestampOracle:
        """The oracle of timeline `name`, opened on first use (later calls return it).

        Args:
            at_upper: in-memory oracles: False starts `read_ts` and `write_ts`
                at 0, for a caller that fast-forwards it at once to another
                oracle's state (`MemoryOracle.open`, `oracle.switching`).
            owns_backend: hand the backend to this oracle: closing it closes
                the backend, and this object opens nothing more (one timeline
                as a process of its own: conformance suites, tools).

        Raises:
            InvalidUsage: a bad timeline; closed; `name` opening concurrently.
            Fenced: in-memory oracles: a newer process bumped the epoch.
            ExternalError: the backend failed (one line).
        """
        if self._closed or self._handed_over:
            raise InvalidUsage(f"{self!r} is closed")
        if not owns_backend:
            return await self._timeline(name, at_upper=at_upper)
        if self._oracles or self._opening:
            raise InvalidUsage("owns_backend: the backend already serves other timelines")
        self._opening.add(name)
        try:
            check_timeline(name)
            oracle = await self._open(name, at_upper=at_upper, owns=self._owns_backend)
        except BaseException:
            await self.close()  # the caller gets no handle to close it with
            raise
        finally:
            self._opening.discard(name)
        self._handed_over = True
        return oracle

    async def _timeline(self, name: str, *, at_upper: bool) -> TimestampOracle:
        check_timeline(name)
        oracle = self._oracles.get(name)
        if oracle is not None:
            return oracle
        if name in self._opening:
            raise InvalidUsage(f"timeline {name!r} is already being opened")
        self._opening.add(name)
        try:
            oracle = await self._open(name, at_upper=at_upper, owns=False)
        finally:
            self._opening.discard(name)
        self._oracles[name] = oracle
        return oracle

    async def _open(self, name: str, *, at_upper: bool, owns: bool) -> TimestampOracle:
        spec, rt = self.spec, self._rt
        if self._rows is not None:
            return ModeledOracle(self._rows, name, rt, unguarded_clock=spec.unguarded_clock)
        if self._store is not None:
            if self._epoch is None:
                self._epoch = await self._store.open()  # a new process: fences every older one
            return await MemoryOracle.open(
                self._store, name, rt, epoch=self._epoch, window_ms=spec.window_ms,
                owns_store=owns, unguarded_clock=spec.unguarded_clock, at_upper=at_upper,
            )
        from oracle.postgres import PostgresOracle

        assert self._client is not None
        return await PostgresOracle.on(
            self._client, name, rt, unguarded_clock=spec.unguarded_clock, _owns_client=owns
        )

    async def persisted_upper(self, timeline: str) -> int | None:
        """In-memory oracles: the upper the store holds for `timeline` (above
        every timestamp any process handed out on it), read without opening
        the timeline or bumping the epoch; None if there is none."""
        check_timeline(timeline)
        if self._store is None:
            raise InvalidUsage(f"{self.spec.backend} oracles keep no store")
        return await self._store.read_upper(timeline)

    async def close(self) -> None:
        """Closes the oracles (the last opened first), then the backend."""
        if self._closed:
            return
        self._closed = True
        oracles = list(self._oracles.values())
        self._oracles.clear()
        try:
            for oracle in reversed(oracles):
                await oracle.close()
        finally:
            if not self._handed_over:
                if self._client is not None:
                    await self._client.close()
                elif self._raw_store is not None and self._owns_backend:
                    await self._raw_store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
