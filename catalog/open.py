"""Opening a durable catalog by URL (the debug tool's `--location`).

| URL | catalog |
|---|---|
| `persist+postgres://…?blob=URL[&shard=NAME]` | `PersistCatalog`: Postgres Consensus, Blob at `blob` (file://, s3://) |
| `stash+postgres://…[?env=NAME]` | `StashCatalog` on `PostgresStashStore` |
| `shadow+postgres://…?blob=URL[&shard=NAME&env=NAME]` | `ShadowCatalog(persist, stash)` on one database |
| `persist+mem://`, `stash+mem://`, `shadow+mem://` | the same in memory (fresh each time) |

`shard` defaults to `catalog`, `env` to `default`. Postgres URLs also take the
libpq parameters of `sim.runtime.urls.PG_PASSTHROUGH` (`password`, the TLS ones,
`connect_timeout`, …) and `isolation=serializable|read-committed` (default
serializable, as CockroachDB). Anything else is `InvalidUsage`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final

from sim.runtime.errors import InvalidUsage
from sim.runtime.pg import ISOLATION_PARAM, isolation_of, with_isolation
from sim.runtime.tasks import AsyncExitStack
from sim.runtime.urls import PG_PASSTHROUGH, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from catalog.api import DurableCatalog
    from catalog.persist_catalog import PersistCatalog
    from catalog.stash_catalog import StashCatalog
    from oracle.api import TimestampOracle
    from sim.runtime.core import Runtime

__all__ = ["open_catalog"]

_KINDS: Final = ("persist", "stash", "shadow")


@contextlib.asynccontextmanager
async def open_catalog(
    url: str, rt: Runtime, *, oracle: TimestampOracle | None = None
) -> AsyncIterator[DurableCatalog]:
    """The (unopened) catalog `url` names; closes it and its backends on exit."""
    u = parse_url(url)
    kind, plus, backend = u.scheme.partition("+")
    if not plus or kind not in _KINDS or backend not in ("mem", "postgres", "postgresql"):
        raise InvalidUsage(
            f"unknown catalog URL scheme {u.scheme!r} in {redact_url(url)}: expected "
            "persist+postgres://, stash+postgres://, shadow+postgres:// or persist+mem:// (stash+, shadow+)"
        )
    allowed = {"persist": {"blob", "shard"}, "stash": {"env"}, "shadow": {"blob", "shard", "env"}}[kind]
    if backend == "mem":
        u.require_params(())
        if u.netloc or u.path not in ("", "/"):
            raise InvalidUsage(f"{u.scheme}:// takes no name or path, got {redact_url(url)}")
    else:
        u.require_params(allowed | PG_PASSTHROUGH | {ISOLATION_PARAM})
        if kind != "stash" and not u.params.get("blob"):
            raise InvalidUsage(f"{redact_url(url)} needs ?blob=URL (file:///dir or s3://bucket/prefix)")
    shard = u.params.get("shard", "catalog")
    env = u.params.get("env", "default")
    if not shard or not env:
        raise InvalidUsage(f"shard and env in {redact_url(url)} must not be empty")
    inner_oracle = None if kind == "shadow" else oracle
    try:
        async with _open(u.params, kind, backend, url, shard, env, rt, oracle, inner_oracle) as catalog:
            yield catalog
    except BaseExceptionGroup as group:
        # PersistClient's task group wraps the body's exception; hand callers the
        # one error that happened (a CLI prints it as one line).
        lone = _lone(group)
        if lone is None:
            raise
        raise lone from None


def _lone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None


@contextlib.asynccontextmanager
async def _open(
    params: dict[str, str], kind: str, backend: str, url: str, shard: str, env: str, rt: Runtime,
    oracle: TimestampOracle | None, inner_oracle: TimestampOracle | None,
) -> AsyncIterator[DurableCatalog]:
    # The driver's URL keeps the isolation level (driver_url drops coordsim's parameters).
    dsn = with_isolation(driver_url(url), isolation_of(url)) if backend != "mem" else ""
    async with AsyncExitStack() as stack:
        persist_cat: PersistCatalog | None = None
        stash_cat: StashCatalog | None = None
        if kind in ("persist", "shadow"):
            from catalog.persist_catalog import PersistCatalog
            from persist.client import PersistClient
            from persist.open import open_blob, open_consensus

            if backend == "mem":
                blob, consensus = await open_blob("mem://"), await open_consensus("mem://")
            else:
                blob = await open_blob(params["blob"])
                stack.push_async_callback(blob.close)
                consensus = await open_consensus(dsn)
                stack.push_async_callback(consensus.close)
            client = await stack.enter_async_context(PersistClient(blob, consensus, rt))
            persist_cat = await PersistCatalog.connect(client, rt, shard_id=shard, oracle=inner_oracle)
            stack.push_async_callback(persist_cat.close)
        if kind in ("stash", "shadow"):
            from catalog.stash_catalog import MemStashStore, StashCatalog, StashStore

            store: StashStore
            if backend == "mem":
                store = MemStashStore(rt)
            else:
                from catalog.stash_postgres import PostgresStashStore

                store = await PostgresStashStore.connect(dsn, rt, env=env)
                stack.push_async_callback(store.close)
            stash_cat = StashCatalog(store, rt, oracle=inner_oracle)
        if persist_cat is not None and stash_cat is not None:
            from catalog.shadow import ShadowCatalog

            yield ShadowCatalog(persist_cat, stash_cat, oracle=oracle)
        elif persist_cat is not None:
            yield persist_cat
        else:
            assert stash_cat is not None
            yield stash_cat
