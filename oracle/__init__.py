"""oracle: the timestamp oracle of seed 000 — the in-memory, stash-backed oracle
of today, the Postgres/CockroachDB oracle, and read_ts batching.

The Postgres pieces (`oracle.postgres.PostgresOracle`,
`oracle.pgstash.PostgresTimestampStash`, `oracle.pgclient.PostgresClient`) live in
their modules, so importing `oracle` does not import asyncpg.
"""

from oracle.api import (
    CATALOG_TIMELINE,
    MAX_TIMESTAMP,
    REALTIME_TIMELINE,
    TimestampOracle,
    WriteTimestamp,
)
from oracle.batching import BatchingOracle
from oracle.factory import OracleFactory, open_oracle
from oracle.memory import MemoryOracle
from oracle.metrics import OpStatistics, OracleStatistics
from oracle.stash import Fenced, MemTimestampStash, TimestampStash

__all__ = [
    "CATALOG_TIMELINE",
    "MAX_TIMESTAMP",
    "REALTIME_TIMELINE",
    "BatchingOracle",
    "Fenced",
    "MemTimestampStash",
    "MemoryOracle",
    "OpStatistics",
    "OracleFactory",
    "OracleStatistics",
    "TimestampOracle",
    "TimestampStash",
    "WriteTimestamp",
    "open_oracle",
]
