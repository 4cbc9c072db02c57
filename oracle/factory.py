"""Opening oracles by URL: one timeline (`open_oracle`) or one per timeline on a
shared backend (`OracleFactory`).

| URL | oracle | durable state |
|---|---|---|
| `mem://[?window_ms=N]` | `MemoryOracle` | a fresh `MemTimestampStash` |
| `memory+postgres://…[?stash=NAME&window_ms=N]` | `MemoryOracle` | `PostgresTimestampStash` |
| `postgres://…`, `postgresql://…` | `PostgresOracle` | the `timestamp_oracle` table |
| `modeled://` | `ModeledOracle` (virtual mode's Postgres oracle) | in-memory rows, modeled round trips |

Postgres URLs also take `pool_size`, `isolation=serializable|read-committed`
(default serializable, as CockroachDB) and the libpq parameters of
`sim.runtime.urls.PG_PASSTHROUGH` (`password`, `application_name`,
`connect_timeout`, the TLS ones, …). Unknown parameters are `InvalidUsage`. asyncpg is
imported only for Postgres URLs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

import anyio

from oracle.api import REALTIME_TIMELINE, TimestampOracle, check_timeline
from oracle.batching import BatchingOracle
from oracle.memory import DEFAULT_WINDOW_MS, MemoryOracle
from oracle.modeled import ModeledOracle, ModeledOracleRows
from oracle.stash import MemTimestampStash
from sim.runtime.errors import InvalidUsage
from sim.runtime.pg import ISOLATION_PARAM, isolation_of, with_isolation
from sim.runtime.tasks import AsyncExitStack
from sim.runtime.urls import PG_PASSTHROUGH, ParsedUrl, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from oracle.pgclient import PostgresClient
    from oracle.stash import TimestampStash
    from sim.runtime.core import Runtime

__all__ = ["OracleFactory", "open_oracle"]

_PG_SCHEMES: Final = ("postgres", "postgresql")
_MEMORY_PG_SCHEMES: Final = ("memory+postgres", "memory+postgresql")


@final
@dataclass(frozen=True)
class _Spec:
    kind: str  # "memory", "memory+postgres", "postgres" or "modeled"
    driver_url: str  # a postgresql:// URL with only driver parameters ("" for mem://)
    pool_size: int
    application_name: str
    window_ms: int
    stash_name: str


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


def _parse(url: str, application_name: str | None) -> _Spec:
    u = parse_url(url)
    if u.scheme == "mem":
        u.require_params(("window_ms",))
        if u.netloc or u.path not in ("", "/"):
            raise InvalidUsage(f"mem:// takes no name or path, got {redact_url(url)}")
        kind = "memory"
    elif u.scheme == "modeled":
        u.require_params(())
        if u.netloc or u.path not in ("", "/"):
            raise InvalidUsage(f"modeled:// takes no name or path, got {redact_url(url)}")
        kind = "modeled"
    elif u.scheme in _PG_SCHEMES:
        u.require_params(PG_PASSTHROUGH | {"pool_size", ISOLATION_PARAM})
        kind = "postgres"
    elif u.scheme in _MEMORY_PG_SCHEMES:
        u.require_params(PG_PASSTHROUGH | {"pool_size", "stash", "window_ms", ISOLATION_PARAM})
        kind = "memory+postgres"
    else:
        raise InvalidUsage(
            f"unknown oracle URL scheme {u.scheme!r} in {redact_url(url)}: "
            "expected mem://, memory+postgres://, postgres:// or modeled://"
        )
    # application_name is not left to the URL: the client sets it explicitly
    # (the `application_name` argument overrides the URL's).
    # The isolation level rides along in the driver's URL (the Postgres client parses it).
    dsn = (
        ""
        if kind in ("memory", "modeled")
        else with_isolation(driver_url(url, drop=("application_name",)), isolation_of(url))
    )
    stash_name = u.params.get("stash", "default")
    if not stash_name:
        raise InvalidUsage(f"parameter stash in {redact_url(url)} must not be empty")
    return _Spec(
        kind=kind,
        driver_url=dsn,
        pool_size=_int_param(u, "pool_size", 8),
        application_name=application_name or u.params.get("application_name", "coordsim-oracle"),
        window_ms=_int_param(u, "window_ms", DEFAULT_WINDOW_MS),
        stash_name=stash_name,
    )


async def open_oracle(
    url: str,
    timeline: str,
    rt: Runtime,
    *,
    batching: bool = False,
    known_bad_join_in_flight: bool = False,
    application_name: str | None = None,
) -> TimestampOracle:
    """Opens the oracle of `timeline` that `url` names; it owns its backend.

    Use it as `async with await open_oracle(url, "realtime", rt) as oracle:`
    (with `batching=True` the `async with` runs the batching worker). A memory
    oracle opened this way is its own process: it bumps the stash epoch.

    Args:
        batching: put a `BatchingOracle` in front.
        known_bad_join_in_flight: with `batching`, its known-bad variant
            (see `BatchingOracle`); anomaly tests only.
        application_name: overrides the URL's (Postgres sessions' name).
    """
    if known_bad_join_in_flight and not batching:
        raise InvalidUsage("known_bad_join_in_flight needs batching=True")
    check_timeline(timeline)
    spec = _parse(url, application_name)
    inner: TimestampOracle
    if spec.kind == "modeled":
        inner = ModeledOracle(ModeledOracleRows(), timeline, rt)
    elif spec.kind == "memory":
        inner = await MemoryOracle.open(
            MemTimestampStash(rt), timeline, rt, window_ms=spec.window_ms, owns_stash=True
        )
    elif spec.kind == "memory+postgres":
        from oracle.pgstash import PostgresTimestampStash

        stash = await PostgresTimestampStash.connect(
            spec.driver_url,
            rt,
            name=spec.stash_name,
            pool_size=spec.pool_size,
            application_name=spec.application_name,
        )
        try:
            inner = await MemoryOracle.open(
                stash, timeline, rt, window_ms=spec.window_ms, owns_stash=True
            )
        except BaseException:
            await stash.close()
            raise
    else:
        from oracle.postgres import PostgresOracle

        inner = await PostgresOracle.open(
            spec.driver_url,
            timeline,
            rt,
            pool_size=spec.pool_size,
            application_name=spec.application_name,
        )
    if not batching:
        return inner
    return BatchingOracle(inner, rt, known_bad_join_in_flight=known_bad_join_in_flight)


@final
class OracleFactory:
    """Opens (once) the oracle of each timeline, sharing one backend: one pool for
    Postgres oracles; one stash and one epoch for memory oracles (the factory is
    one process).

    Use as `async with OracleFactory(url, rt) as f: o = await f.timeline("catalog")`.
    The factory owns what it opened (pool, stash, batching workers, in its task
    group) and closes it on exit.
    """

    def __init__(
        self,
        url: str,
        rt: Runtime,
        *,
        batching: bool = False,
        known_bad_join_in_flight: bool = False,
        application_name: str | None = None,
    ) -> None:
        """See `open_oracle` for the arguments."""
        if known_bad_join_in_flight and not batching:
            raise InvalidUsage("known_bad_join_in_flight needs batching=True")
        self._spec = _parse(url, application_name)
        self._rt = rt
        self._batching = batching
        self._known_bad_join_in_flight = known_bad_join_in_flight
        self._oracles: dict[str, TimestampOracle] = {}
        self._lock = anyio.Lock()
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._client: PostgresClient | None = None
        self._stash: TimestampStash | None = None
        self._epoch: int | None = None
        self._rows: ModeledOracleRows | None = None

    @property
    def kind(self) -> str:
        """`memory`, `memory+postgres` or `postgres`."""
        return self._spec.kind

    @property
    def epoch(self) -> int | None:
        """This process's stash epoch (memory oracles), once open."""
        return self._epoch

    async def __aenter__(self) -> OracleFactory:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            await self._open_backend(stack)
            # Runs first on exit: closes the oracles, which stops the batching
            # workers, so the task group can finish.
            stack.push_async_callback(self._close_oracles)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _open_backend(self, stack: AsyncExitStack) -> None:
        spec = self._spec
        if spec.kind == "modeled":
            self._rows = ModeledOracleRows()
        elif spec.kind == "memory":
            self._stash = MemTimestampStash(self._rt)
        else:
            from oracle.pgclient import PostgresClient

            self._client = await PostgresClient.connect(
                spec.driver_url,
                self._rt,
                pool_size=spec.pool_size,
                application_name=spec.application_name,
            )
            stack.push_async_callback(self._client.close)
            if spec.kind == "memory+postgres":
                from oracle.pgstash import PostgresTimestampStash

                self._stash = await PostgresTimestampStash.on(self._client, spec.stash_name)
        if self._stash is not None:
            self._epoch = await self._stash.open()

    async def _close_oracles(self) -> None:
        oracles = list(self._oracles.values())
        self._oracles.clear()
        for oracle in oracles:
            await oracle.close()

    async def timeline(self, name: str = REALTIME_TIMELINE) -> TimestampOracle:
        """The oracle of timeline `name`, opened on first use."""
        check_timeline(name)
        if self._stack is None:
            raise InvalidUsage("OracleFactory is not open: use `async with OracleFactory(...)`")
        async with self._lock:
            oracle = self._oracles.get(name)
            if oracle is None:
                oracle = await self._open(name)
                self._oracles[name] = oracle
        return oracle

    async def _open(self, name: str) -> TimestampOracle:
        inner: TimestampOracle
        if self._rows is not None:
            inner = ModeledOracle(self._rows, name, self._rt)
        elif self._stash is not None:
            assert self._epoch is not None
            inner = await MemoryOracle.open(
                self._stash, name, self._rt, epoch=self._epoch, window_ms=self._spec.window_ms
            )
        else:
            from oracle.postgres import PostgresOracle

            assert self._client is not None
            inner = await PostgresOracle.on(self._client, name, self._rt)
        if not self._batching:
            return inner
        batching = BatchingOracle(
            inner, self._rt, known_bad_join_in_flight=self._known_bad_join_in_flight
        )
        assert self._tg is not None
        await self._tg.start(batching.serve)
        return batching
