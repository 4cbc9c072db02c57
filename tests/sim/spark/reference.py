"""docs/metrics.md's replay metrics recomputed from trace files with pyarrow
and plain Python, one trace at a time: the reference `sim.spark.metrics` must
equal. Written from the definitions, not from the Spark plan, so that the two
share no mistake."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from sim.spark.metrics import WINDOW_MS

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

Group = tuple[str, str, str]
_LEVEL: Final = re.compile(r"^L(\d+)/")


@dataclass
class _Acc:
    """One group's measurements, summed over its runs (or levels)."""

    runs: int = 0
    ops: int = 0
    ok_ops: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    duration_s: float = 0.0
    done: int = 0
    windows: list[int] = field(default_factory=list)
    oracle: int = 0
    batches: list[int] = field(default_factory=list)


def _measure(acc: _Acc, measured: Sequence[dict[str, Any]], done: Sequence[int], origin: int) -> None:
    """Adds one run (or level): its `measured` ops, the ok ops `done` in it
    (completion times) and the start of its first 100-ms window."""
    acc.runs += 1
    acc.ops += len(measured)
    acc.errors += sum(r["status"] == "fail" for r in measured)
    ok = [r for r in measured if r["status"] == "ok"]
    acc.ok_ops += len(ok)
    acc.latencies += [(r["complete_ns"] - r["invoke_ns"]) / 1e6 for r in ok]
    acc.done += len(done)
    acc.windows += list(Counter((c - origin) // (WINDOW_MS * 1_000_000) for c in done).values())


def _events(acc: _Acc, events: Sequence[dict[str, Any]], spans: Sequence[tuple[int, int]] | None) -> None:
    """Adds the events that started in one of `spans` (inclusive ns; None: all)."""
    for e in events:
        if spans is None or any(lo <= e["start_ns"] <= hi for lo, hi in spans):
            acc.oracle += e["kind"].startswith("oracle.")
            if e["kind"] == "group-commit" and e["batch_size"] is not None:
                acc.batches.append(e["batch_size"])


def _read(t: Path, name: str, cols: Sequence[str]) -> list[dict[str, Any]]:
    """A trace file's rows, its dictionary columns (kind, status) as strings."""
    table = pq.read_table(t / name).select(list(cols))
    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type):
            table = table.set_column(i, f.name, table[f.name].cast(pa.string()))
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def reference_metrics(traces: Sequence[Path]) -> dict[Group, dict[str, Any]]:
    """metrics.parquet's rows (by config, workload, concurrency) of `traces`,
    with the level windows of their meta.json applied."""
    accs: dict[Group, _Acc] = {}
    for t in traces:
        meta = json.loads((t / "meta.json").read_text())
        ops = _read(t, "ops.parquet", ["client", "invoke_ns", "complete_ns", "status"])
        events = _read(t, "events.parquet", ["kind", "start_ns", "batch_size"])
        config, workload, conc = str(meta["config"]), str(meta.get("workload") or meta["run"]), meta.get("concurrency")
        if not isinstance(conc, list):  # one run, all of it
            if not ops:
                continue  # Spark has no row for a group without ops
            acc = accs.setdefault((config, workload, "-" if conc is None else str(conc)), _Acc())
            start = min(r["invoke_ns"] for r in ops)
            _measure(acc, ops, _ok_completions(ops), start)
            acc.duration_s += (max(r["complete_ns"] for r in ops if r["complete_ns"] is not None) - start) / 1e9
            _events(acc, events, None)
            continue
        by_level: dict[str, list[dict[str, Any]]] = {}
        for r in ops:
            m = _LEVEL.match(r["client"] or "")
            if m is not None:
                by_level.setdefault(m.group(1), []).append(r)
        windows: dict[str, list[tuple[int, int]]] = {}
        for w in meta.get("windows") or ():
            windows.setdefault(str(w["concurrency"]), []).append((round(w["start_s"] * 1e9), round(w["end_s"] * 1e9)))
        for n, rows in by_level.items():
            acc = accs.setdefault((config, workload, n), _Acc())
            ws = windows.get(n)
            if ws is None:  # a level without windows: its span
                start = min(r["invoke_ns"] for r in rows)
                end = max(r["complete_ns"] for r in rows if r["complete_ns"] is not None)
                _measure(acc, rows, _ok_completions(rows), start)
                acc.duration_s += (end - start) / 1e9
                _events(acc, events, [(start, end)])
                continue
            # The ops a window starts; the ok ops completing in one (its end
            # included: a fixed-operations window ends at a completion).
            measured = [r for r in rows if any(lo <= r["invoke_ns"] < hi for lo, hi in ws)]
            done = [c for c in _ok_completions(rows) if any(lo <= c <= hi for lo, hi in ws)]
            _measure(acc, measured, done, min(lo for lo, _ in ws))
            acc.duration_s += sum(hi - lo for lo, hi in ws) / 1e9
            _events(acc, events, [(lo, hi - 1) for lo, hi in ws])
    return {g: _row(a) for g, a in accs.items()}


def _ok_completions(rows: Sequence[dict[str, Any]]) -> list[int]:
    return [r["complete_ns"] for r in rows if r["status"] == "ok"]


def _row(a: _Acc) -> dict[str, Any]:
    lat = sorted(a.latencies)
    n = len(lat)

    def at(q: float) -> float | None:
        # percentile_approx (exact below a million values): the smallest
        # value with at least q of the values at or below it.
        return lat[max(0, math.ceil(q * n) - 1)] if n else None

    return {
        "runs": a.runs, "ops": a.ops, "ok_ops": a.ok_ops, "errors": a.errors, "duration_s": a.duration_s,
        "throughput_ops_s": a.done / a.duration_s,
        "p50_ms": at(0.5), "p99_ms": at(0.99), "p999_ms": at(0.999),
        "latency_mean_ms": sum(lat) / n if n else None, "latency_max_ms": lat[-1] if n else None,
        "window_ops_min": min(a.windows, default=None), "window_ops_max": max(a.windows, default=None),
        "window_ops_mean": sum(a.windows) / len(a.windows) if a.windows else None,
        "oracle_api_calls_per_op": a.oracle / a.ops,
        "group_commits": len(a.batches),
        "group_commit_batch_mean": sum(a.batches) / len(a.batches) if a.batches else None,
        "group_commit_batch_max": max(a.batches, default=None),
    }


def assert_rows_equal(spark_rows: Sequence[dict[str, Any]], want: dict[Group, dict[str, Any]]) -> None:
    """Every metrics.parquet row equals the reference's for its group (floats
    to a relative 1e-9), and the groups are the same."""
    import pytest

    got = {(r["config"], r["workload"], str(r["concurrency"])): r for r in spark_rows}
    assert set(got) == set(want)
    for g, ref in want.items():
        for k, v in ref.items():
            assert got[g][k] == (v if v is None else pytest.approx(v, rel=1e-9)), (g, k)
