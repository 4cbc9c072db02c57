"""Benchmark of the Spark replay job against the in-process checkers on one
large synthetic trace (`coordsim synth-trace`: valid by construction, with a
few planted stale reads).

Times, on the same trace: the in-process checkers the Spark job reproduces
(checker 1's named anomalies + checker 3's replay, after reading the trace),
and the Spark job's verification (anomalies + verdicts, no metrics) on
`local[2]` and on `local[1]` — the scaling from one core to two. Each Spark
run is a fresh process (a JVM warmed by the other run would flatter the
second), and its time includes reading the Parquet but not starting the
session. Both must find the same anomalies (checked, by name and op ids).

    uv run python bench/replay.py [--quick] [--ops N]

Last line: `RESULT ops=… local2_s=… local1_s=… inprocess_s=…`
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import pyarrow.parquet as pq

from sim.checker.named import check_named
from sim.checker.replay import check_replay
from sim.spark.job import replay
from sim.spark.session import spark_session
from sim.spark.synth import synth_trace
from sim.spark.verify import COVERED
from sim.traces import read_trace

#: Table partitions of the replay (the job's `--shuffle-partitions`).
PARTITIONS: Final = 8
#: Above this many operations the driver (= the executor, in local mode) gets
#: more than the session's default 4 GB: the checkpointed table ops of ten
#: million operations take a few GB.
BIG_OPS: Final = 2_000_000

Rows = set[tuple[str, tuple[int, ...]]]


def _spark_worker(master: str, trace: str, out: str, n_ops: int) -> None:
    """One timed replay in this process; prints its result as JSON."""
    conf = {"spark.driver.memory": "8g"} if n_ops > BIG_OPS else None
    spark = spark_session(master, app_name=f"bench-{master}", shuffle_partitions=PARTITIONS, conf=conf)
    try:
        t0 = time.perf_counter()
        res = replay(spark, [trace], Path(out), with_metrics=False)
        secs = time.perf_counter() - t0
    finally:
        spark.stop()
    print(json.dumps({"seconds": secs, "anomalies": res.anomalies}))


def _spark(trace: Path, master: str, out: Path, n_ops: int) -> tuple[float, Rows, int]:
    cmd = [sys.executable, __file__, "--spark-worker", master, str(trace), str(out), str(n_ops)]
    proc = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = pq.read_table(out / "anomalies.parquet").to_pylist()
    return float(res["seconds"]), {(r["anomaly"], tuple(r["ops"])) for r in rows}, int(res["anomalies"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="100,000 operations")
    ap.add_argument("--ops", type=int, default=None, help="operations (default 10,000,000)")
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    ap.add_argument("--spark-worker", nargs=4, metavar=("MASTER", "TRACE", "OUT", "OPS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.spark_worker:
        master, trace_dir, out_dir, ops = args.spark_worker
        _spark_worker(master, trace_dir, out_dir, int(ops))
        return
    n = args.ops or (100_000 if args.quick else 10_000_000)
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    trace = args.keep or work / "trace"
    try:
        t0 = time.perf_counter()
        if not (trace / "meta.json").exists():
            synth_trace(trace, n, seed=1)
        print(f"synth-trace: {n} ops in {time.perf_counter() - t0:.1f}s ({trace})", flush=True)

        t0 = time.perf_counter()
        tr = read_trace(trace)
        read_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        verdicts = (check_named(tr.history), check_replay(tr.history))
        check_s = time.perf_counter() - t1
        inproc_s = read_s + check_s
        counts = {k: c for v in verdicts for k, c in v.counts.items() if COVERED.get(k) == v.checker}
        kept = {(a.name, a.ops) for v in verdicts for a in v.anomalies if COVERED.get(a.name) == a.checker}
        del tr, verdicts
        print(f"in-process: read {read_s:.1f}s + check {check_s:.1f}s = {inproc_s:.1f}s "
              f"({n / inproc_s:,.0f} ops/s); anomalies {counts}", flush=True)  # fmt: skip

        s2, rows2, total2 = _spark(trace, "local[2]", work / "out2", n)
        print(f"spark local[2]: {s2:.1f}s ({n / s2:,.0f} ops/s); {total2} anomalies", flush=True)
        s1, rows1, total1 = _spark(trace, "local[1]", work / "out1", n)
        print(f"spark local[1]: {s1:.1f}s ({n / s1:,.0f} ops/s); scaling 1->2 cores: {s1 / s2:.2f}x", flush=True)
        same = total1 == total2 == sum(counts.values()) and kept <= rows2 and rows1 == rows2
        print(f"same anomalies as in-process: {same}")
        if not same:
            raise SystemExit(f"anomalies differ: in-process {sorted(kept)[:5]}…, spark {sorted(rows2)[:5]}…")
        print(f"RESULT ops={n} local2_s={s2:.1f} local1_s={s1:.1f} inprocess_s={inproc_s:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
