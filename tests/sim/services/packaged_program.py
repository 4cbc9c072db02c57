"""Starts one component with the packaged binaries and prints what it saw as JSON.

Run in a subprocess by `test_packaged_binaries.py`, whose environment hides the
system's PostgreSQL and Java (PATH stripped, JAVA_HOME unset); `--hide-pg-lib`
also hides Debian's `/usr/lib/postgresql`, which the search reads whatever PATH
says. A fresh interpreter, so nothing found before the environment changed
(the java version cache, a running JVM) can answer for the packaged binaries.

    python -m tests.sim.services.packaged_program postgres --hide-pg-lib DIR
    python -m tests.sim.services.packaged_program spark

Exit 0 with one JSON line on stdout; any failure is a traceback and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import asyncpg

from persist.open import open_consensus
from persist.testing import check_consensus
from sim.services import pg_bindir, postgres


def _postgres(hide_pg_lib: Path) -> dict[str, Any]:
    # The one search step PATH does not govern; like test_backends_postgres's
    # "no binaries anywhere", pointed at an empty directory.
    pg_bindir._PG_LIB_ROOT = hide_pg_lib  # type: ignore[misc]  # a test's monkeypatch
    start = time.monotonic()
    with postgres.open_postgres(fsync=False) as pg:
        started_s = time.monotonic() - start

        async def queries() -> dict[str, Any]:
            conn = await asyncpg.connect(pg.url)
            try:
                version = await conn.fetchval("select version()")
                total = await conn.fetchval("select sum(x)::int from generate_series(1, 100) as x")
                hba = await conn.fetch("select distinct auth_method from pg_hba_file_rules")
            finally:
                await conn.close()
            # The statements coordsim's persist Consensus runs, on this server
            # (as tests/persist runs them: default isolation).
            await check_consensus(lambda: open_consensus(pg.url))
            return {
                "version": version,
                "sum": total,
                "auth": sorted(r["auth_method"] for r in hba),
            }

        out = asyncio.run(queries())
        found = pg.binaries
        out |= {
            "origin": found.origin,
            "source": found.source,
            "bindir": str(found.path),
            "start_s": started_s,
        }
    return out


def _spark() -> dict[str, Any]:
    from sim.services.binaries import find_java
    from sim.spark.session import spark_session

    found = find_java()
    start = time.monotonic()
    spark = spark_session("local[1]", app_name="coordsim-packaged-java", shuffle_partitions=1)
    try:
        started_s = time.monotonic() - start
        df = spark.createDataFrame([(i, i % 3) for i in range(30)], "x long, k long")
        count = df.count()
        groups = sorted((r["k"], r["count"]) for r in df.groupBy("k").count().collect())
        jvm = spark.sparkContext._jvm
        java_home = str(jvm.System.getProperty("java.home"))
        java_version = str(jvm.System.getProperty("java.version"))
    finally:
        spark.stop()
    return {
        "origin": found.origin,
        "source": found.source,
        "java": str(found.path),
        "count": count,
        "groups": groups,
        "java_home": java_home,
        "java_version": java_version,
        "start_s": started_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("component", choices=["postgres", "spark"])
    ap.add_argument("--hide-pg-lib", type=Path, default=None)
    args = ap.parse_args()
    visible = {name: shutil.which(name) for name in ("java", "initdb", "pg_ctl", "pg_config")}
    if args.component == "postgres":
        if args.hide_pg_lib is None:
            ap.error("postgres needs --hide-pg-lib")
        out = _postgres(args.hide_pg_lib)
    else:
        out = _spark()
    print(json.dumps({**out, "visible": visible}))


if __name__ == "__main__":
    main()
