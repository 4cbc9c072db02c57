"""Benchmark of the durable catalog: the latency of one catalog transaction (a
CREATE TABLE or DROP TABLE committed through `commit_transaction`) and of
`confirm_leadership`, on each implementation against Postgres (the embedded
server, fsync on, unless COORDSIM_POSTGRES_URL is set):

- persist: Postgres Consensus + file Blob (fsync on), cache fed by a listen;
- stash: the Postgres stash tables, epoch row checked in the transaction;
- shadow: both, one after the other.

    uv run python bench/catalog.py [--quick]

Last line: `RESULT persist_txn_p50_ms=… stash_txn_p50_ms=… shadow_txn_p50_ms=… …`
"""

# ruff: noqa: E402 - the project's imports must follow the sys.path fix below.
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's directory is first on sys.path, so `import catalog`
# would import this very file. Drop it (as bench/oracle.py does).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from hdrh.histogram import HdrHistogram

from catalog.api import Appended
from catalog.objects import Column
from catalog.open import open_catalog
from sim.runtime.core import Runtime, run
from sim.services.postgres import postgres_server


@dataclass
class Stat:
    ops: int
    hist: HdrHistogram

    def pct_ms(self, p: float) -> float:
        return float(self.hist.get_value_at_percentile(p)) / 1000.0

    def mean_ms(self) -> float:
        return float(self.hist.get_mean_value()) / 1000.0


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # microseconds


def catalog_url(pg_url: str, kind: str, tmp: str) -> str:
    tag = uuid.uuid4().hex[:10]
    params = {
        "persist": f"blob=file://{tmp}/blob-{tag}&shard=bench-{tag}",
        "stash": f"env=bench-{tag}",
        "shadow": f"blob=file://{tmp}/blob-{tag}&shard=bench-{tag}&env=bench-{tag}",
    }[kind]
    _scheme, rest = pg_url.split("://", 1)
    sep = "&" if "?" in rest else "?"
    return f"{kind}+postgres://{rest}{sep}{params}"


async def bench(rt: Runtime, url: str, n: int) -> tuple[Stat, Stat]:
    txn, confirm = _hist(), _hist()
    async with open_catalog(url, rt) as catalog:
        await catalog.open()
        for i in range(n):
            start = rt.now()
            tx = catalog.transaction()
            if i % 2 == 0:
                tx.create_table(1, f"t{i}", [Column("a", "int"), Column("b", "text")])
            else:
                found = tx.find_item(1, f"t{i - 1}")
                assert found is not None
                tx.drop_item(found.id)
            result = await catalog.commit_transaction(tx)
            assert isinstance(result, Appended), result
            txn.record_value(max(1, round((rt.now() - start) * 1e6)))
            start = rt.now()
            await catalog.confirm_leadership()
            confirm.record_value(max(1, round((rt.now() - start) * 1e6)))
    return Stat(n, txn), Stat(n, confirm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer transactions (< 1 minute)")
    args = parser.parse_args()
    n = 60 if args.quick else 400
    result: dict[str, float] = {}
    with postgres_server(fsync=True) as pg_url, tempfile.TemporaryDirectory(prefix="coordsim-bench-") as tmp:
        print(f"{'catalog':<10}{'txns':>6}{'txn p50 ms':>12}{'p99 ms':>10}{'mean ms':>10}{'confirm p50':>13}")
        for kind in ("persist", "stash", "shadow"):
            url = catalog_url(pg_url, kind, tmp)

            async def go(rt: Runtime, url: str = url) -> tuple[Stat, Stat]:
                return await bench(rt, url, n)

            txn, confirm = run(go, virtual=False, seed=int.from_bytes(os.urandom(8), "big"))
            print(
                f"{kind:<10}{txn.ops:>6}{txn.pct_ms(50):>12.3f}{txn.pct_ms(99):>10.3f}"
                f"{txn.mean_ms():>10.3f}{confirm.pct_ms(50):>13.3f}"
            )
            result[f"{kind}_txn_p50_ms"] = txn.pct_ms(50)
            result[f"{kind}_txn_p99_ms"] = txn.pct_ms(99)
            result[f"{kind}_confirm_p50_ms"] = confirm.pct_ms(50)
    print("RESULT " + " ".join(f"{k}={v:.3f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
