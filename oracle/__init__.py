"""oracle: the timestamp oracle of seed 000 — the in-memory, store-backed oracle
of today, the Postgres/CockroachDB oracle, and read_ts batching.

Import names from their defining modules (`oracle.api`, `oracle.memory`, …):
this file stays empty so that importing one module loads only what it uses,
and never asyncpg (issue 37).
"""
