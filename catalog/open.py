"""The one way to open a durable catalog: `open_catalog(spec, rt)`, where the
spec is a `CatalogSpec` or the URL naming one (`catalog_spec`). Nothing else
constructs an implementation (tests/test_opening.py checks it), so the
coordinators, the debug tool and the conformance suite open catalogs alike.

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
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from sim.runtime.errors import InvalidUsage
from sim.runtime.tasks import AsyncExitStack
from sim.runtime.urls import PG_PASSTHROUGH, driver_url, parse_url, redact_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from catalog.api import DurableCatalog
    from catalog.persist_catalog import PersistCatalog
    from catalog.stash_catalog import StashCatalog, StashStore
    from oracle.api import TimestampOracle
    from persist.client import PersistClient
    from sim.runtime.core import Runtime

__all__ = ["CatalogFlavor", "CatalogSpec", "catalog_spec", "open_catalog"]

#: The persist shard of the catalog unless a spec names another.
DEFAULT_SHARD: Final = "catalog"


class CatalogFlavor(enum.StrEnum):
    """Which implementation: on a persist shard, on the stash, or both (shadow)."""

    PERSIST = "persist"
    STASH = "stash"
    SHADOW = "shadow"

    @property
    def on_persist(self) -> bool:
        return self is not CatalogFlavor.STASH

    @property
    def on_stash(self) -> bool:
        return self is not CatalogFlavor.PERSIST


@final
@dataclass(frozen=True)
class CatalogSpec:
    """A resolved catalog configuration: everything `open_catalog` needs.

    Args:
        flavor: which implementation.
        shard: the persist half's shard.
        blob, consensus: the persist half's location (`persist.open`), when
            `open_catalog` is given no `PersistClient` to run on.
        stash: the stash half's database: `mem://` (a fresh store in memory)
            or a Postgres URL.
        stash_env: the stash environment (one per deployment in a database).
        stash_pool_size: the stash's Postgres connections.
        store: the stash half's store when it is shared, not opened (virtual
            mode's in-memory store that outlives a deployment's processes, a
            test's); then `stash` is not used.
        fencing: False is the known-bad variant without the epoch check.
    """

    flavor: CatalogFlavor
    shard: str = DEFAULT_SHARD
    blob: str = "mem://"
    consensus: str = "mem://"
    stash: str = "mem://"
    stash_env: str = "default"
    stash_pool_size: int = 4
    store: StashStore | None = None
    fencing: bool = True

    def __post_init__(self) -> None:
        if not self.shard or not self.stash_env:
            raise InvalidUsage("a catalog's shard and stash environment must not be empty")
        if self.stash_pool_size < 1:
            raise InvalidUsage(f"stash_pool_size must be >= 1, got {self.stash_pool_size}")
        if self.store is not None and not self.flavor.on_stash:
            raise InvalidUsage(f"a {self.flavor} catalog has no stash store")


_FLAVORS: Final = tuple(f.value for f in CatalogFlavor)


def catalog_spec(url: str) -> CatalogSpec:
    """The `CatalogSpec` that `url` names (see the module docstring).

    Raises:
        InvalidUsage: an unknown scheme or parameter, or a missing `blob` (one line).
    """
    u = parse_url(url)
    kind, plus, backend = u.scheme.partition("+")
    if not plus or kind not in _FLAVORS or backend not in ("mem", "postgres", "postgresql"):
        raise InvalidUsage(
            f"unknown catalog URL scheme {u.scheme!r} in {redact_url(url)}: expected "
            "persist+postgres://, stash+postgres://, shadow+postgres:// or persist+mem:// (stash+, shadow+)"
        )
    flavor = CatalogFlavor(kind)
    allowed = {"persist": {"blob", "shard"}, "stash": {"env"}, "shadow": {"blob", "shard", "env"}}[kind]
    if backend == "mem":
        u.require_params(())
        if u.netloc or u.path not in ("", "/"):
            raise InvalidUsage(f"{u.scheme}:// takes no name or path, got {redact_url(url)}")
        return CatalogSpec(flavor)
    # asyncpg: only for Postgres
    from sim.runtime.pg import ISOLATION_PARAM, isolation_of, with_isolation

    u.require_params(allowed | PG_PASSTHROUGH | {ISOLATION_PARAM})
    if flavor.on_persist and not u.params.get("blob"):
        raise InvalidUsage(f"{redact_url(url)} needs ?blob=URL (file:///dir or s3://bucket/prefix)")
    shard = u.params.get("shard", DEFAULT_SHARD)
    env = u.params.get("env", "default")
    if not shard or not env:
        raise InvalidUsage(f"shard and env in {redact_url(url)} must not be empty")
    # The driver's URL keeps the isolation level (driver_url drops coordsim's parameters).
    dsn = with_isolation(driver_url(url), isolation_of(url))
    return CatalogSpec(
        flavor, shard=shard, blob=u.params.get("blob", "mem://"), consensus=dsn, stash=dsn, stash_env=env
    )


@contextlib.asynccontextmanager
async def open_catalog(
    spec: CatalogSpec | str,
    rt: Runtime,
    *,
    oracle: TimestampOracle | None = None,
    persist: PersistClient | None = None,
) -> AsyncIterator[DurableCatalog]:
    """The (unopened) catalog `spec` names; closes it, and what it opened for
    it, on exit.

    Args:
        spec: a `CatalogSpec`, or a URL naming one.
        oracle: the `catalog` timeline's oracle its commits call (seed 001);
            a shadow catalog calls it once per commit, its halves never.
        persist: the persist half runs on this client (which the caller
            keeps entered); None: on one opened on `spec.blob` and
            `spec.consensus`, closed with the catalog.

    Raises:
        InvalidUsage: a bad spec or URL.
        ExternalError: a backend cannot be reached (one line).
    """
    if isinstance(spec, str):
        spec = catalog_spec(spec)
    if persist is not None or not spec.flavor.on_persist:
        async with _open(spec, rt, oracle, persist) as catalog:
            yield catalog
        return
    try:
        async with _open(spec, rt, oracle, None) as catalog:
            yield catalog
    except BaseExceptionGroup as group:
        # The PersistClient opened here wraps the body's exception in its task
        # group; hand callers the one error that happened (a CLI prints it as
        # one line).
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
    spec: CatalogSpec, rt: Runtime, oracle: TimestampOracle | None, persist: PersistClient | None
) -> AsyncIterator[DurableCatalog]:
    # A shadow's halves have no oracle: the shadow picks commit timestamps and
    # calls `apply_write` once, itself.
    inner_oracle = None if spec.flavor is CatalogFlavor.SHADOW else oracle
    async with AsyncExitStack() as stack:
        persist_cat: PersistCatalog | None = None
        stash_cat: StashCatalog | None = None
        if spec.flavor.on_persist:
            from catalog.persist_catalog import PersistCatalog

            if persist is None:
                from persist.client import PersistClient
                from persist.open import open_location

                location = await open_location(blob=spec.blob, consensus=spec.consensus)
                stack.push_async_callback(location.close)
                persist = await stack.enter_async_context(PersistClient(*location, rt))
            persist_cat = await PersistCatalog.connect(
                persist, rt, shard_id=spec.shard, oracle=inner_oracle, fencing=spec.fencing
            )
        if spec.flavor.on_stash:
            from catalog.stash_catalog import StashCatalog

            try:
                store = await _store(spec, rt, stack)
            except BaseException:
                if persist_cat is not None:
                    await persist_cat.close()
                raise
            stash_cat = StashCatalog(store, rt, oracle=inner_oracle, fencing=spec.fencing)
        catalog: DurableCatalog
        if persist_cat is not None and stash_cat is not None:
            from catalog.shadow import ShadowCatalog

            catalog = ShadowCatalog(persist_cat, stash_cat, oracle=oracle)  # closing it closes both
        elif persist_cat is not None:
            catalog = persist_cat
        else:
            assert stash_cat is not None
            catalog = stash_cat
        stack.push_async_callback(catalog.close)
        yield catalog


async def _store(spec: CatalogSpec, rt: Runtime, stack: AsyncExitStack) -> StashStore:
    if spec.store is not None:
        return spec.store
    u = parse_url(spec.stash)
    if u.scheme == "mem":
        from catalog.stash_catalog import MemStashStore

        return MemStashStore(rt)
    from catalog.stash_postgres import PostgresStashStore

    store = await PostgresStashStore.connect(spec.stash, rt, env=spec.stash_env, pool_size=spec.stash_pool_size)
    stack.push_async_callback(store.close)
    return store
