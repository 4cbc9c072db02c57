"""oracle: the timestamp oracle of seed 000 — the in-memory, stash-backed oracle
of today, the Postgres/CockroachDB oracle, and read_ts batching.

Not built yet: see the oracle issue.
"""
