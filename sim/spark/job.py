"""The replay job: verify and measure any number of traces with Spark, writing
an anomalies table, per-run verdicts and a comparison of the configurations.

The same code runs from `coordsim replay` and, without the coordsim CLI, as a
plain script for a cluster:

    spark-submit --py-files coordsim.zip sim/spark/job.py --out OUT TRACE…

Output (`--out`): `anomalies.parquet`, `checks.parquet` (which checker ran
on which run, and its outcome), `verdicts.parquet` (per run: the verdict, the
anomaly counts and the coverage: operations to judge and judged, and the
tables not fully judged with why), `metrics.parquet`, `windows.parquet`
(Spark directories), `report.md`, and PNG plots. Only small aggregates
(verdicts, metrics) reach the driver, for the report.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = ["ReplayResult", "main", "replay", "write_report"]

#: Table partitions per this many operations, when the session does not set
#: `spark.sql.shuffle.partitions` (never fewer than the cores).
OPS_PER_PARTITION: Final = 500_000
#: Below this many operations in all, Spark runs the replay interpreted
#: (no whole-stage code generation): compiling the checks' code takes longer
#: than running it on small inputs (the tests' and most sweeps').
SMALL_OPS: Final = 50_000
#: SQL settings for the duration of a replay. The checks are planned around
#: one partitioning by (run, object): joins on (run, object, …) must reuse it
#: rather than reshuffle, and nothing is broadcast unless a check asks (size
#: estimates of checkpointed frames are guesses; a wrong guess exhausts the
#: driver). Adaptive execution only adds planning rounds here: the plans have
#: few shuffles, their partition counts are chosen (`_partitions`) and their
#: join strategies fixed by hints. Runtime bloom filters would add a pass
#: over one side of a join to spare the other a shuffle it does not have.
REPLAY_CONF: Final = {
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
}
#: Anomaly rows shown in report.md (the Parquet table has all of them).
REPORT_ROWS: Final = 50


@final
@dataclass(frozen=True)
class ReplayResult:
    """What one replay found, for the CLI's summary and its exit code."""

    runs: int
    invalid_runs: int
    anomalies: int
    seconds: float
    out: Path | None
    #: Runs without anomalies that were not fully judged: some operation to
    #: judge no checker judged (no timestamps, over a bound, out of time, an
    #: unsupported kind), or a checker that judges no operation undecided.
    unknown_runs: int = 0


def replay(
    spark: Any,
    traces: Sequence[str],
    out: Path | str | None,
    *,
    with_metrics: bool = True,
    native: bool | None = None,
    group_ops: int | None = None,
) -> ReplayResult:
    """Replays `traces` (trace directories) on `spark`, writing the outputs
    under `out` (nothing written when None: only the counts are computed).
    `native`: decide checkers 1 (join-shaped) and 3 with the native Spark
    plans rather than per run in-process (default `verify.NATIVE_FORM`).
    `group_ops`: runs above it are checked in groups of independent segments
    of about that many operations (`segments.GROUP_OPS`).

    Raises:
        HistoryError: a path holds no trace, or one of another schema version.
    """
    from sim.spark.frames import Kept, expand_traces, load, load_windows
    from sim.spark.metrics import metrics
    from sim.spark.segments import GROUP_OPS
    from sim.spark.verify import NATIVE_FORM, anomalies, verdicts

    group_ops = GROUP_OPS if group_ops is None else group_ops

    t0 = time.perf_counter()
    dirs = expand_traces(traces)
    ops, events, meta, runs, run_ops, places = load(spark, dirs)
    n_ops = sum(run_ops.values())
    keep = Kept(spark)
    partitions = _partitions(spark, n_ops)
    conf = {**REPLAY_CONF, "spark.sql.shuffle.partitions": str(partitions)}
    if n_ops < SMALL_OPS:
        conf["spark.sql.codegen.wholeStage"] = "false"
    with _sql_conf(spark, conf):
        try:
            an, checks, coverage = anomalies(ops, runs, keep, partitions, places, run_ops=run_ops,
                                             group_ops=group_ops, native=NATIVE_FORM if native is None else native)
            if out is None:
                an = keep(an)
                n = an.count()
                v_rows = [r.asDict() for r in verdicts(ops, an, meta, checks, coverage).select("verdict").collect()]
                return ReplayResult(len(v_rows), sum(r["verdict"] == "invalid" for r in v_rows), n,
                                    time.perf_counter() - t0, None, sum(r["verdict"] == "unknown" for r in v_rows))
            base = str(out).rstrip("/")
            # One sorted file: the anomalies are few. (A global orderBy would
            # compute every check twice: once to sample the range bounds.)
            an.repartition(1).sortWithinPartitions("run", "anomaly", "op_id").write.mode("overwrite").parquet(
                f"{base}/anomalies.parquet"
            )
            checks.repartition(1).sortWithinPartitions("run", "checker").write.mode("overwrite").parquet(
                f"{base}/checks.parquet"
            )
        finally:
            keep.release()
        o = Path(out) if "://" not in str(out) else None
        an = spark.read.parquet(f"{base}/anomalies.parquet")
        v = verdicts(ops, an, meta, spark.read.parquet(f"{base}/checks.parquet"), coverage)
        v.write.mode("overwrite").parquet(f"{base}/verdicts.parquet")
        v_rows = [r.asDict() for r in spark.read.parquet(f"{base}/verdicts.parquet").orderBy("run").collect()]
        m_rows: list[dict[str, Any]] = []
        w_rows: list[dict[str, Any]] = []
        if with_metrics:
            comp, windows = metrics(ops, events, meta, level_windows=load_windows(spark, dirs))
            comp.write.mode("overwrite").parquet(f"{base}/metrics.parquet")
            windows.write.mode("overwrite").parquet(f"{base}/windows.parquet")
            m_rows = [r.asDict() for r in spark.read.parquet(f"{base}/metrics.parquet").collect()]
            w_rows = [r.asDict() for r in spark.read.parquet(f"{base}/windows.parquet").collect()]
        shown = [r.asDict() for r in an.orderBy("run", "anomaly", "op_id").limit(REPORT_ROWS).collect()]
        total = sum(r["anomalies"] for r in v_rows)
    if o is not None:
        write_report(o, v_rows, shown, total, m_rows, w_rows)
    invalid = sum(1 for r in v_rows if r["verdict"] == "invalid")
    unknown = sum(1 for r in v_rows if r["verdict"] == "unknown")
    return ReplayResult(len(v_rows), invalid, total, time.perf_counter() - t0, o, unknown)


def _partitions(spark: Any, n_ops: int) -> int:
    """How many partitions the table ops are hashed into: the session's
    `spark.sql.shuffle.partitions` if it was set, else about one per
    `OPS_PER_PARTITION` operations (Spark's default of 200 would make a small
    replay schedule hundreds of near-empty tasks per stage)."""
    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return int(spark.conf.get("spark.sql.shuffle.partitions"))
    return max(int(spark.sparkContext.defaultParallelism), n_ops // OPS_PER_PARTITION)


@contextmanager
def _sql_conf(spark: Any, conf: Mapping[str, str]) -> Iterator[None]:
    """`conf` set on the session while the block runs, then restored."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


#: Columns that name things (ids, seeds): printed as they are, not as measures.
_NAMES: Final = frozenset({"run", "config", "seed", "workload", "concurrency", "op_id", "verdict"})


def number(v: Any) -> str:
    """The report's one number format (compare's): thousands separated, two
    decimals for a measured fraction, none for a count; never an exponent."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _md_table(rows: Sequence[dict[str, Any]], cols: Sequence[str]) -> list[str]:
    def cell(c: str, v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, list):
            return ", ".join(str(x) for x in v)
        if c in _NAMES:
            return str(v).replace("|", "\\|")
        return number(v).replace("|", "\\|")

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(c, r.get(c)) for c in cols) + " |" for r in rows]
    return out


def write_report(
    out: Path,
    verdict_rows: Sequence[dict[str, Any]],
    anomaly_rows: Sequence[dict[str, Any]],
    anomalies_total: int,
    metric_rows: Sequence[dict[str, Any]],
    window_rows: Sequence[dict[str, Any]],
) -> None:
    """report.md and the PNG plots (`plots`; matplotlib's Agg backend)."""
    from sim.history.checker.verdict import ANOMALY_NAMES
    from sim.spark.metrics import WINDOW_MS
    from sim.spark.plots import concurrency_key, plot

    out.mkdir(parents=True, exist_ok=True)
    order = sorted(verdict_rows, key=lambda r: (str(r.get("config")), str(r.get("workload")),
                                                concurrency_key(r.get("concurrency")), str(r["run"])))
    lines = ["# Trace replay", "", "## Verdicts", ""]
    lines += _md_table(order, ["run", "config", "seed", "workload", "concurrency", "ops", "ops_to_judge",
                               "ops_judged", "verdict", "anomalies", *ANOMALY_NAMES, "whitebox_skipped"])
    lines += coverage_section(order)
    lines += ["", f"## Anomalies ({anomalies_total:,}; first {min(anomalies_total, REPORT_ROWS)} shown)", ""]
    lines += _md_table(anomaly_rows, ["run", "anomaly", "checker", "op_id", "ops", "detail"])
    if metric_rows:
        cols = [c for c in metric_rows[0] if c not in ("duration_s",)]
        lines += ["", "## Comparison (per configuration x workload x concurrency)", ""]
        metric_rows = sorted(metric_rows, key=lambda r: (r["workload"], r["config"], concurrency_key(r["concurrency"])))
        lines += _md_table(metric_rows, cols)
        lines += ["", "Every column is defined in docs/metrics.md (the names `coordsim compare` uses where "
                  "the two measure the same thing).", ""]
        lines += [f"![{p.stem}]({p.name})" for p in plot(out, metric_rows, window_rows, WINDOW_MS)]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def coverage_section(verdict_rows: Sequence[dict[str, Any]]) -> list[str]:
    """report.md's lines on the runs not fully judged (none if every run
    was): per run, its operations judged and, per table not fully judged
    (the first `SHOWN_TABLES` verdicts.parquet keeps), how many were not
    and every reason given, as `coordsim check` prints them."""
    gaps = [r for r in verdict_rows if not r.get("coverage_complete")]
    if not gaps:
        return []
    lines = ["", f"## Coverage ({len(gaps):,} of {len(verdict_rows):,} runs not fully judged)", ""]
    for r in gaps:
        if r.get("ops_to_judge") is None:
            lines.append(f"- {r['run']}: no coverage (only the native plans ran): at best unknown")
            continue
        partial = r.get("tables_not_fully_judged") or 0
        lines.append(f"- {r['run']} ({r['verdict']}): {number(r['ops_judged'])} of {number(r['ops_to_judge'])} "
                     f"operations judged; {number(partial)} of {number(r['tables'])} tables not fully")
        shown = r.get("not_judged") or []
        for t in shown:
            t = t if isinstance(t, dict) else t.asDict()
            eg = ", ".join(map(str, (t["op_ids"] or [])[:8]))
            lines.append(f"  - {t['table']}: {number(t['ops'] - t['judged'])} of {number(t['ops'])} operations "
                         f"not judged (e.g. ops {eg})")
            lines += [f"    - {reason}" for reason in t["reasons"] or ()]
        if partial > len(shown):
            lines.append(f"  - … and {number(partial - len(shown))} more tables not fully judged")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point. Exit code: 0 all runs valid, 1 some invalid,
    3 none invalid but some unknown (not fully judged), 2 bad input."""
    from sim.runtime.errors import CoordsimError
    from sim.spark.session import spark_session

    ap = argparse.ArgumentParser(description="Replay coordsim traces with Spark: anomalies, verdicts, metrics.")
    ap.add_argument("traces", nargs="+", help="trace directories (or folders of them)")
    ap.add_argument("--out", default="replay-out", help="output directory (any Spark-writable URL)")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's, or local[*])")
    ap.add_argument("--shuffle-partitions", type=int, default=None)
    ap.add_argument("--verbose", action="store_true", help="Spark's INFO logs")
    args = ap.parse_args(argv)
    try:
        spark = spark_session(args.master, verbose=args.verbose, shuffle_partitions=args.shuffle_partitions)
        res = replay(spark, args.traces, args.out)
    except CoordsimError as exc:
        print(f"coordsim replay: {exc}", file=sys.stderr)  # noqa: T201 - the script's error channel
        return 2
    print(  # noqa: T201 - the script's report
        f"{res.runs} runs, {res.invalid_runs} invalid, {res.unknown_runs} unknown, {res.anomalies} anomalies, "
        f"{res.seconds:.1f}s; output in {args.out}"
    )
    return 1 if res.invalid_runs else 3 if res.unknown_runs else 0


if __name__ == "__main__":
    # Run as a file by spark-submit: make the package importable from a checkout.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
