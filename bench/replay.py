"""Benchmark of the Spark replay job against the in-process checkers on one
large synthetic trace (`coordsim synth-trace`: valid by construction, with a
few planted stale reads).

Times, on the same trace: every in-process checker (`check_history`, after
reading the trace; the Spark job runs them all),
and the Spark job's verification (anomalies + verdicts, no metrics) on
`local[2]` and on `local[1]` — the scaling from one core to two. The trace
is one run: the job cuts it into independent segments (`sim.spark.segments`,
one Spark job over a few columns) and checks each group of them as a task
that reads its own row groups of the trace (`sim.spark.inproc`: no shuffle,
no JVM-to-Python transfer of the ops). Both run
in one JVM, one Spark context after the other, after an untimed warm-up
replay of a tiny trace: a fresh JVM spends tens of seconds compiling the
job's code, which would dwarf a `--quick` run and flatter whichever master
ran second. A time includes reading the Parquet, not
starting the context. Both must find the same anomalies as the in-process
checkers (checked, by name and op ids).

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
from typing import TYPE_CHECKING, Final

# Run as a file, this directory comes first on sys.path, and bench/oracle.py
# would shadow the `oracle` package the checkers import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import pyarrow.parquet as pq  # noqa: E402

from sim.history.checker.run import check_history  # noqa: E402
from sim.history.traces import read_trace  # noqa: E402
from sim.spark.job import replay  # noqa: E402
from sim.spark.session import spark_session  # noqa: E402
from sim.spark.synth import synth_trace  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Table partitions of the replay (the job's `--shuffle-partitions`), the
#: same on one core and two, so both run the same plan. `--quick` uses
#: `QUICK_PARTITIONS`: at its size each task is a few milliseconds of work,
#: and scheduling four times as many is most of the run.
PARTITIONS: Final = 8
QUICK_PARTITIONS: Final = 2
QUICK_OPS: Final = 20_000
#: The warm-up trace's size: the warm-up is about compiling the job's code,
#: which takes the same time whatever the input.
WARMUP_OPS: Final = 200
#: Above this many operations the driver (= the executor, in local mode) gets
#: more than the session's default 4 GB: the checkpointed table ops of ten
#: million operations take a few GB.
BIG_OPS: Final = 2_000_000

Rows = set[tuple[str, tuple[int, ...]]]


def _dir(master: str) -> str:
    """An output directory name for a master (Spark globs `[…]` in paths)."""
    return "out-" + "".join(c for c in master if c.isalnum())


def _spark_worker(masters: str, trace: str, warmup: str, work: str, n_ops: int, partitions: int) -> None:
    """Per master (comma-separated), in this process's one JVM: the timed
    replay of `trace` into a directory of `work`, the first after a warm-up
    replay of `warmup`; prints one JSON line per master. (A separate process keeps the JVM's
    memory out of the in-process measurement's.)"""
    conf = {"spark.driver.memory": "8g"} if n_ops > BIG_OPS else None
    for i, master in enumerate(masters.split(",")):
        t0 = time.perf_counter()
        spark = spark_session(master, app_name=f"bench-{master}", shuffle_partitions=partitions, conf=conf)
        try:
            if i == 0:
                replay(spark, [warmup], None, with_metrics=False)
                print(f"warm-up: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            res = replay(spark, [trace], Path(work, _dir(master)), with_metrics=False)
            secs = time.perf_counter() - t0
        finally:
            spark.stop()
        print(json.dumps({"master": master, "seconds": secs, "anomalies": res.anomalies}), flush=True)


def _spark(
    trace: Path, warmup: Path, masters: Sequence[str], work: Path, n_ops: int, partitions: int
) -> dict[str, tuple[float, Rows, int]]:
    """master -> (seconds, anomaly rows, anomaly count)."""
    cmd = [sys.executable, __file__, "--spark-worker", ",".join(masters), str(trace), str(warmup), str(work),
           str(n_ops), str(partitions)]
    proc = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows = pq.read_table(work / _dir(r["master"]) / "anomalies.parquet").to_pylist()
            out[r["master"]] = (float(r["seconds"]), {(a["anomaly"], tuple(a["ops"])) for a in rows},
                                int(r["anomalies"]))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_OPS:,} operations, {QUICK_PARTITIONS} partitions")
    ap.add_argument("--ops", type=int, default=None, help="operations (default 10,000,000)")
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    ap.add_argument("--partitions", type=int, default=None, help=f"table partitions (default {PARTITIONS})")
    ap.add_argument("--spark-worker", nargs=6, metavar=("MASTERS", "TRACE", "WARMUP", "WORK", "OPS", "PARTS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.spark_worker:
        masters, trace_dir, warmup_dir, work_dir, ops, parts = args.spark_worker
        _spark_worker(masters, trace_dir, warmup_dir, work_dir, int(ops), int(parts))
        return
    n = args.ops or (QUICK_OPS if args.quick else 10_000_000)
    partitions = args.partitions or (QUICK_PARTITIONS if args.quick else PARTITIONS)
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    trace = args.keep or work / "trace"
    try:
        t0 = time.perf_counter()
        if not (trace / "meta.json").exists():
            synth_trace(trace, n, seed=1)
        warmup = synth_trace(work / "warmup", WARMUP_OPS, seed=2)
        print(f"synth-trace: {n} ops in {time.perf_counter() - t0:.1f}s ({trace})", flush=True)

        t0 = time.perf_counter()
        tr = read_trace(trace)
        read_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        # Every checker, as the Spark job runs them all (issue 22's parity).
        verdicts = check_history(tr.history, tr.events).verdicts
        check_s = time.perf_counter() - t1
        inproc_s = read_s + check_s
        counts = {f"{v.checker}:{k}": c for v in verdicts for k, c in v.counts.items()}
        kept = {(a.name, a.ops) for v in verdicts for a in v.anomalies}
        del tr, verdicts
        print(f"in-process: read {read_s:.1f}s + check {check_s:.1f}s = {inproc_s:.1f}s "
              f"({n / inproc_s:,.0f} ops/s); anomalies {counts}", flush=True)

        got = _spark(trace, warmup, ("local[2]", "local[1]"), work, n, partitions)
        (s2, rows2, total2), (s1, rows1, total1) = got["local[2]"], got["local[1]"]
        print(f"spark local[2]: {s2:.1f}s ({n / s2:,.0f} ops/s); {total2} anomalies")
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
