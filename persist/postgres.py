"""Consensus on PostgreSQL (or CockroachDB, with the same SQL) through asyncpg.

One table holds every key's log; `compare_and_set` is a single statement that
inserts the new entry only if the key's head is at the expected seqno. Because
of the gap-free rule (`new.seqno == expected + 1`), every writer racing for one
seqno inserts the same primary key: the database lets exactly one of them in and
`ON CONFLICT DO NOTHING` turns the others into "0 rows", i.e.
EXPECTATION_MISMATCH, even under READ COMMITTED. Under SERIALIZABLE (CockroachDB,
and these sessions' default: `?isolation=read-committed` chooses the other) a
loser may instead get SQLSTATE 40001, a `Determinate` error its caller retries.
With a run's `BackendStats` installed, each statement's round trip and each
failure (which persist's callers retry) is recorded by kind (`consensus.cas`, …).

Known limit under READ COMMITTED: a CaS statement's snapshot is taken when the
statement starts; if, before it reaches its insert, other sessions commit two
newer entries *and* truncate away the one it is about to insert, the insert
finds no conflict and lands below the head. That needs a whole CaS + truncate
round to fit inside one statement's execution; SERIALIZABLE closes it.

Errors: reads fail `Determinate`; writes fail `Determinate` only for the
allow-list in `classify_failure`, else `Indeterminate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar, final

from persist.location import (
    CaSResult,
    Consensus,
    SeqNo,
    VersionedData,
    check_cas_seqnos,
    check_consensus_key,
    check_scan_limit,
)
from sim.runtime.backend_stats import current_backend_stats
from sim.runtime.errors import Determinate, ExternalError, InvalidUsage
from sim.runtime.patches import get_running_loop
from sim.runtime.pg import Isolation, classify_failure, describe_failure, split_connect_timeout
from sim.runtime.pgclient import PostgresPool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.runtime.pgclient import Conn

__all__ = ["PostgresConsensus", "classify_failure"]

T = TypeVar("T")

_BIGINT_MAX: Final = 2**63 - 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS consensus (
    shard text NOT NULL,
    sequence_number bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (shard, sequence_number)
)"""

_HEAD: Final = """
SELECT sequence_number, data FROM consensus
WHERE shard = $1 ORDER BY sequence_number DESC LIMIT 1"""

_CAS: Final = """
INSERT INTO consensus (shard, sequence_number, data)
SELECT $1, $2, $3
WHERE (SELECT sequence_number FROM consensus
       WHERE shard = $1 ORDER BY sequence_number DESC LIMIT 1) = $4
ON CONFLICT DO NOTHING
RETURNING sequence_number"""

_CAS_FIRST: Final = """
INSERT INTO consensus (shard, sequence_number, data)
SELECT $1, $2, $3
WHERE NOT EXISTS (SELECT 1 FROM consensus WHERE shard = $1)
ON CONFLICT DO NOTHING
RETURNING sequence_number"""

_SCAN: Final = """
SELECT sequence_number, data FROM consensus
WHERE shard = $1 AND sequence_number >= $2
ORDER BY sequence_number ASC LIMIT $3"""

# The head is read in the same statement (same snapshot) as the delete, so the
# refusal and the delete agree; the head can only have grown since, so the
# delete never reaches it.
_TRUNCATE: Final = """
WITH head AS (
    SELECT sequence_number FROM consensus
    WHERE shard = $1 ORDER BY sequence_number DESC LIMIT 1
), deleted AS (
    DELETE FROM consensus
    WHERE shard = $1 AND sequence_number < $2
      AND $2 <= (SELECT sequence_number FROM head)
    RETURNING sequence_number
)
SELECT (SELECT sequence_number FROM head) AS head, (SELECT count(*) FROM deleted) AS deleted"""



@final
class PostgresConsensus(Consensus):
    """`Consensus` in the `consensus` table of a PostgreSQL or CockroachDB database.

    Open with `PostgresConsensus.open(url)`. Its sessions are the shared
    client's (`sim.runtime.pgclient.PostgresPool`: the pool, and the error
    tiers of DESIGN.md §9). No retries happen here: callers retry
    `Determinate` errors (DESIGN.md §9).
    """

    def __init__(self, pool: PostgresPool) -> None:
        """Use `open`."""
        self._pool = pool
        self._where = pool.where
        #: The level every statement runs at (each is its own transaction).
        self.isolation = pool.isolation
        self._stats = current_backend_stats()
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        pool_size: int = 8,
        statement_timeout_s: float = 30.0,
        isolation: Isolation | None = None,
    ) -> PostgresConsensus:
        """Connects to `url` and creates the `consensus` table if it is missing.

        Args:
            url: `postgres[ql]://user[:password]@host:port/db[?sslmode=…&connect_timeout=S&…]`;
                other query parameters are session settings (e.g. `application_name`).
            pool_size: the most connections held at once.
            statement_timeout_s: the server cancels a statement running longer
                (and the client gives up a second later, should the server hang).
            isolation: the sessions' level; None: the URL's `isolation`
                parameter, else SERIALIZABLE (as CockroachDB).

        Raises:
            InvalidUsage: a bad argument or a malformed URL.
            Determinate: the server is unreachable or refused us (one line,
                naming the URL without its password).
        """
        # `PostgresPool.open` checks the arguments and the URL.
        connect_s = split_connect_timeout(url)[1] or min(10.0, statement_timeout_s)
        pool = await PostgresPool.open(
            url,
            # The loop's clock (as `Runtime.now`), which times each round trip.
            now=get_running_loop().time,
            pool_size=pool_size,
            statement_timeout_s=statement_timeout_s,
            connect_timeout_s=connect_s,
            # A slot frees within a statement's time; a connection, within the
            # connect timeout: waiting longer for one means the server is gone.
            slot_timeout_s=statement_timeout_s + connect_s,
            isolation=isolation,
        )
        try:
            await pool.create_table(_SCHEMA, what="create the consensus table")
        except ExternalError as exc:
            pool.terminate()
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise Determinate(
                f"cannot create the consensus table at {pool.where}: {describe_failure(cause)}"
            ) from cause
        return cls(pool)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresConsensus({self._where})"

    # --- the Consensus interface

    async def head(self, key: str) -> VersionedData | None:
        check_consensus_key(key)
        row = await self._run(
            f"head({key!r})", write=False, call=lambda c: c.fetchrow(_HEAD, key), kind="consensus.head"
        )
        return None if row is None else VersionedData(SeqNo(row[0]), bytes(row[1]))

    async def compare_and_set(
        self, key: str, expected: SeqNo | None, new: VersionedData
    ) -> CaSResult:
        check_consensus_key(key)
        check_cas_seqnos(expected, new)
        if new.seqno.value > _BIGINT_MAX:
            raise InvalidUsage(f"compare_and_set: seqno {new.seqno} exceeds the bigint range")
        data = bytes(new.data)
        what = f"compare_and_set({key!r}, {expected}, {new.seqno})"
        if expected is None:
            inserted = await self._run(
                what,
                write=True,
                call=lambda c: c.fetchval(_CAS_FIRST, key, new.seqno.value, data),
                kind="consensus.cas",
            )
        else:
            inserted = await self._run(
                what,
                write=True,
                call=lambda c: c.fetchval(_CAS, key, new.seqno.value, data, expected.value),
                kind="consensus.cas",
            )
        return CaSResult.EXPECTATION_MISMATCH if inserted is None else CaSResult.COMMITTED

    async def scan(self, key: str, from_seqno: SeqNo, limit: int) -> list[VersionedData]:
        check_consensus_key(key)
        check_scan_limit(limit)
        if from_seqno.value > _BIGINT_MAX:
            return []  # no entry can be there
        rows = await self._run(
            f"scan({key!r}, {from_seqno}, {limit})",
            write=False,
            call=lambda c: c.fetch(_SCAN, key, from_seqno.value, min(limit, _BIGINT_MAX)),
            kind="consensus.scan",
        )
        return [VersionedData(SeqNo(row[0]), bytes(row[1])) for row in rows]

    async def truncate(self, key: str, seqno: SeqNo) -> int:
        check_consensus_key(key)
        what = f"truncate({key!r}, {seqno})"
        bound = min(seqno.value, _BIGINT_MAX)  # a bigger one is above any head: refused below
        row = await self._run(
            what, write=True, call=lambda c: c.fetchrow(_TRUNCATE, key, bound), kind="consensus.truncate"
        )
        head = None if row is None else row[0]
        if head is None:
            raise InvalidUsage(f"{what}: the key was never written")
        if seqno.value > head:
            raise InvalidUsage(f"{what}: above the head {SeqNo(head)}")
        deleted: int = row[1] if row is not None else 0
        return deleted

    # --- plumbing

    async def _run(
        self, what: str, *, write: bool, call: Callable[[Conn], Awaitable[T]], kind: str
    ) -> T:
        """Runs one statement once (`PostgresPool.attempt`: nothing sent ⇒
        `Determinate`, else `classify_failure`). `kind` names it in the run's
        `BackendStats`: its round trip, or its failure, which the caller retries."""
        if self._closed:
            raise InvalidUsage(f"{what}: {self!r} is closed")
        try:
            return await self._pool.attempt(what, call, write=write, kind=kind)
        except ExternalError as exc:
            if self._stats is not None:
                self._stats.retried(kind, getattr(exc.__cause__, "sqlstate", None))
            raise
