"""The oracle implementations every suite runs on, as a parametrized fixture.

Each is named by how it is opened: a URL for `oracle.open.open_oracles` (through
`oracle.testing.open_timeline`, one timeline as a process of its own) plus
whether `BatchingOracle` sits in front and whether `ObservedOracle` wraps it all
(as coordinators that record traces use it). In-memory ones run on the
virtual-time loop (that is what they are for); Postgres ones on the stock loop
against the session's embedded server (or `$COORDSIM_POSTGRES_URL`), at
SERIALIZABLE (the client's default, as CockroachDB) and, as
`postgres-read-committed`, at READ COMMITTED.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

import pytest

from oracle.observed import ObservedOracle, OracleCall
from oracle.open import oracle_spec
from oracle.testing import open_timeline
from sim.runtime.pg import Isolation, with_isolation

if TYPE_CHECKING:
    from oracle.api import TimestampOracle
    from oracle.testing import MakeOracle
    from sim.runtime.core import Runtime


@final
@dataclass(frozen=True)
class OracleImpl:
    name: str
    url: str
    batching: bool
    observed: bool = False

    @property
    def on_postgres(self) -> bool:
        return self.url.startswith(("postgres", "memory+postgres"))

    def maker(self, rt: Runtime, *, application_name: str | None = None) -> MakeOracle:
        async def make(timeline: str) -> TimestampOracle:
            spec = oracle_spec(self.url, application_name=application_name)
            oracle = await open_timeline(spec, timeline, rt, batching=self.batching)
            if not self.observed:
                return oracle
            return ObservedOracle(oracle, rt, lambda call: _check_report(call, timeline))

        return make


_OPS = frozenset({"write_ts", "peek_write_ts", "read_ts", "apply_write"})


def _check_report(call: OracleCall, timeline: str) -> None:
    """What an `ObservedOracle` reports must be well formed: a failure here fails
    the oracle call that produced it, so every suite checks it on the way."""
    assert call.op in _OPS, call
    assert call.timeline == timeline, call
    assert call.start_s <= call.end_s, call
    assert (call.ts is not None) == call.ok, call


IMPLS = [
    pytest.param("memory-memstore", marks=pytest.mark.virtual),
    pytest.param("batching-memory", marks=pytest.mark.virtual),
    pytest.param("modeled", marks=pytest.mark.virtual),
    pytest.param("observed-batching-memory", marks=pytest.mark.virtual),
    pytest.param("memory-pgstore", marks=pytest.mark.postgres),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-read-committed", marks=pytest.mark.postgres),
    pytest.param("batching-postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=IMPLS)
def oracle_impl(request: pytest.FixtureRequest) -> OracleImpl:
    name: str = request.param
    if name == "memory-memstore":
        return OracleImpl(name, "mem://", batching=False)
    if name == "batching-memory":
        return OracleImpl(name, "mem://", batching=True)
    if name == "modeled":
        return OracleImpl(name, "modeled://", batching=False)
    if name == "observed-batching-memory":
        return OracleImpl(name, "mem://", batching=True, observed=True)
    url: str = request.getfixturevalue("pg_url")
    if name == "postgres-read-committed":
        return OracleImpl(name, with_isolation(url, Isolation.READ_COMMITTED), batching=False)
    if name == "memory-pgstore":
        store = f"test-{uuid.uuid4().hex[:12]}"
        scheme, rest = url.split("://", 1)
        sep = "&" if "?" in rest else "?"
        return OracleImpl(name, f"memory+{scheme}://{rest}{sep}stash={store}", batching=False)
    return OracleImpl(name, url, batching=name == "batching-postgres")
