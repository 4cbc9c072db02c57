"""Catalog implementations for the tests: each gives fresh, empty locations,
whose handles open their catalog through `catalog.open.open_catalog`.

`persist-mem`, `stash-mem` and `shadow-mem` run on the virtual-time loop; the
`-postgres` ones use the session's Postgres (persist: Postgres Consensus + a
file Blob; stash: the Postgres stash tables), each location under fresh names,
at SERIALIZABLE (the clients' default, as CockroachDB) and, as
`-postgres-read-committed`, at READ COMMITTED (`?isolation=read-committed`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, final
from urllib.parse import urlencode

import pytest

from catalog.open import CatalogFlavor, CatalogSpec, open_catalog
from catalog.stash_catalog import MemStashStore
from persist.client import PersistClient
from persist.open import Location, open_location
from sim.runtime.pg import Isolation, with_isolation
from sim.runtime.urls import with_query_param

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from catalog.api import DurableCatalog
    from catalog.testing import NewLocation, OpenCatalog
    from oracle.api import TimestampOracle
    from sim.runtime.core import Runtime


@final
@dataclass(frozen=True)
class Services:
    pg_url: str | None
    tmp: Path
    s3_blob: str | None = None  # s3://bucket?endpoint=…: persist's Blob in S3 instead of files


def _fresh(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}"


def _location(
    rt: Runtime, services: Services, flavor: CatalogFlavor, *, postgres: bool, oracle: TimestampOracle | None
) -> OpenCatalog:
    """A fresh location of `flavor`: each handle opens its catalog through
    `catalog.open.open_catalog`, as the coordinators do. In memory the stores
    outlive the handles (each handle is a process on them); on Postgres each
    handle connects anew."""
    shard, env = _fresh("catalog"), _fresh("env")
    if not postgres:
        store = MemStashStore(rt) if flavor.on_stash else None
        shared: list[Location] = []

        @contextlib.asynccontextmanager
        async def in_memory() -> AsyncIterator[DurableCatalog]:
            spec = CatalogSpec(flavor, shard=shard, store=store)
            if not flavor.on_persist:
                async with open_catalog(spec, rt, oracle=oracle) as catalog:
                    yield catalog
                return
            if not shared:
                shared.append(await open_location())
            async with PersistClient(*shared[0], rt) as client, open_catalog(
                spec, rt, oracle=oracle, persist=client
            ) as catalog:
                yield catalog

        return in_memory
    assert services.pg_url is not None
    blob = f"file://{services.tmp / _fresh('blob')}"
    if services.s3_blob is not None:
        bucket, _, query = services.s3_blob.partition("?")
        blob = f"{bucket}/{_fresh('catalog')}?{query}"
    spec = CatalogSpec(
        flavor, shard=shard, blob=blob, consensus=with_query_param(services.pg_url, "pool_size", "2"),
        stash=services.pg_url, stash_env=env, stash_pool_size=2,
    )

    def on_postgres() -> contextlib.AbstractAsyncContextManager[DurableCatalog]:
        return open_catalog(spec, rt, oracle=oracle)

    return on_postgres


def persist_location(
    rt: Runtime, services: Services, *, postgres: bool, oracle: TimestampOracle | None = None
) -> OpenCatalog:
    return _location(rt, services, CatalogFlavor.PERSIST, postgres=postgres, oracle=oracle)


def stash_location(
    rt: Runtime, services: Services, *, postgres: bool, oracle: TimestampOracle | None = None
) -> OpenCatalog:
    return _location(rt, services, CatalogFlavor.STASH, postgres=postgres, oracle=oracle)


def shadow_location(
    rt: Runtime, services: Services, *, postgres: bool, oracle: TimestampOracle | None = None
) -> OpenCatalog:
    return _location(rt, services, CatalogFlavor.SHADOW, postgres=postgres, oracle=oracle)


LOCATIONS: dict[str, Callable[..., OpenCatalog]] = {
    "persist": persist_location,
    "stash": stash_location,
    "shadow": shadow_location,
}


@final
@dataclass(frozen=True)
class CatalogImpl:
    name: str
    kind: str
    postgres: bool
    services: Services

    def new_location(self, rt: Runtime, *, oracle: TimestampOracle | None = None) -> NewLocation:
        def new() -> OpenCatalog:
            return LOCATIONS[self.kind](rt, self.services, postgres=self.postgres, oracle=oracle)

        return new


_RC = Isolation.READ_COMMITTED
_PARAMS = [
    pytest.param(("persist", False), id="persist-mem", marks=pytest.mark.virtual),
    pytest.param(("stash", False), id="stash-mem", marks=pytest.mark.virtual),
    pytest.param(("shadow", False), id="shadow-mem", marks=pytest.mark.virtual),
    pytest.param(("persist", True), id="persist-postgres", marks=pytest.mark.postgres),
    pytest.param(("stash", True), id="stash-postgres", marks=pytest.mark.postgres),
    pytest.param(("shadow", True), id="shadow-postgres", marks=pytest.mark.postgres),
    pytest.param(("persist-s3", True), id="persist-postgres-s3", marks=[pytest.mark.postgres, pytest.mark.s3, pytest.mark.slow]),
    pytest.param(("persist", _RC), id="persist-postgres-read-committed", marks=pytest.mark.postgres),
    pytest.param(("stash", _RC), id="stash-postgres-read-committed", marks=pytest.mark.postgres),
    pytest.param(("shadow", _RC), id="shadow-postgres-read-committed", marks=pytest.mark.postgres),
]
#: The Postgres ones, at both levels (not S3).
_PG_PARAMS = [*_PARAMS[3:6], *_PARAMS[7:]]


def _pg_url(request: pytest.FixtureRequest, level: bool | Isolation) -> str:
    """The session's Postgres, at `level` (True: the clients' default, SERIALIZABLE)."""
    url: str = request.getfixturevalue("pg_url")
    return with_isolation(url, level) if isinstance(level, Isolation) else url


@pytest.fixture(params=_PARAMS)
def catalog_impl(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogImpl:
    """Every implementation: in memory (virtual time) and on Postgres at both levels."""
    kind, level = request.param
    postgres = bool(level)
    pg_url = _pg_url(request, level) if postgres else None
    name = f"{kind}-{'postgres' if postgres else 'mem'}" + ("-read-committed" if level is _RC else "")
    s3_blob = None
    if kind == "persist-s3":
        kind, name = "persist", "persist-postgres-s3"
        endpoint: str = request.getfixturevalue("s3_endpoint")
        bucket: str = request.getfixturevalue("s3_bucket")
        s3_blob = f"s3://{bucket}?{urlencode({'endpoint': endpoint})}"
    return CatalogImpl(name, kind, postgres, Services(pg_url, tmp_path, s3_blob))


@pytest.fixture(params=_PARAMS[:3])
def mem_catalog_impl(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogImpl:
    """The in-memory implementations (virtual time)."""
    kind, _ = request.param
    return CatalogImpl(f"{kind}-mem", kind, False, Services(None, tmp_path))


@pytest.fixture(params=_PG_PARAMS)
def pg_catalog_impl(request: pytest.FixtureRequest, tmp_path: Path) -> CatalogImpl:
    """The Postgres implementations, at both levels."""
    kind, level = request.param
    suffix = "-read-committed" if level is _RC else ""
    return CatalogImpl(f"{kind}-postgres{suffix}", kind, True, Services(_pg_url(request, level), tmp_path))
