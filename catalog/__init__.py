"""catalog: the durable catalog of seed 004 (persist, stash and shadow
implementations, epoch fencing, migrations, debug tool) and the catalog pTVC of
seed 001 (`compare_and_append`, `snapshot_at`, `subscribe_at` in the `catalog`
timeline).

Import names from their defining modules (`catalog.api`, `catalog.open`, …):
this file stays empty so that importing one module loads only what it uses,
and never asyncpg (issue 37).
"""
