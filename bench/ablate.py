"""Ablation: how fast a pair would run if a component's Python cost were zero.

Issue 20 asks where pure Python stops. `simspeed.py` measures the loop floor
(what a pair's callbacks and timers cost with no model code at all); this
bench measures the other side: it switches off, in a fresh process, parts of
the model code that the simulation could in principle do without, and times
the pair again. Each result is an upper bound on what making that part free
would buy: nothing this bench turns off could really go.

- `record`: the history recorder's `invoke`/`ok`/`fail`/`info`/`event` do
  nothing (no history, so nothing for the checkers);
- `observe`: the oracle's observation wrapper and its metrics pass calls
  through (no oracle events in the trace, no `ts_oracle_*` metrics);
- `latency`: every latency and cost distribution returns its mean instead of
  drawing from the run's random stream (the schedule changes: batches form
  differently, so this is a rough bound);
- `all`: the three together.

Rounds run every variant in a fresh process, in rotating order; figures are
the mean ± sd over rounds and the ratio to `none` (nothing off) is per round.

Usage: uv run python bench/ablate.py [--quick] [--rounds N] [--ops N]
Last line: `RESULT <pair>_none=… <pair>_<variant>=… ratio_<pair>_<variant>=…`
(ops per wall-second, means over rounds; ratios are means of per-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.simspeed import PAIRS

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("none", "record", "observe", "latency", "all")
#: Operations per level by workload (the timed level is the second of two).
OPS = {"select-one": 1000, "insert": 1000, "update": 150}

# Run in a fresh interpreter: the switches are applied to the classes before
# the simulation is built, and must not leak into another variant's run.
_MEASURE = """
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
workload, config, ops, off = sys.argv[2], sys.argv[3], int(sys.argv[4]), set(sys.argv[5].split(","))
if off & {"record", "all"}:
    from sim.history.recorder import HistoryRecorder
    HistoryRecorder.invoke = lambda self, *a, **k: 0
    for name in ("ok", "fail", "info", "event"):
        setattr(HistoryRecorder, name, lambda self, *a, **k: None)
if off & {"observe", "all"}:
    from oracle.metrics import OracleMetrics
    from oracle.observed import ObservedOracle
    async def _observe(self, op, call, ts_of):
        return await call()
    async def observe(self, name, fn):
        return await fn()
    ObservedOracle._observe = _observe
    OracleMetrics.observe = observe
if off & {"latency", "all"}:
    from sim.runtime import latency
    for cls in (latency.Constant, latency.Uniform, latency.LogNormal, latency.Empirical):
        cls.sample = lambda self, rng: self.mean()
from sim.compare.runner import run_pair
from sim.load.run_config import RunConfig
cfg = RunConfig(mode="virtual", configurations=(config,), workloads=(workload,), concurrency=(64, 64),
             ops_per_level=ops, warmup_ops=20, repeat=1)
marks = []
with tempfile.TemporaryDirectory() as tmp:
    out = run_pair(cfg, config, workload, Path(tmp) / "trace", on_level=lambda r: marks.append(time.perf_counter()))
print(json.dumps(out.rows[1].ops / (marks[1] - marks[0])))
"""


def _measure(workload: str, config: str, ops: int, variant: str) -> float:
    """Ops per wall-second of the second level, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(ROOT), workload, config, str(ops), variant],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"ablate: {workload}/{config} with {variant} off failed:\n{done.stderr[-2000:]}")
    value: float = json.loads(done.stdout.strip().splitlines()[-1])
    return value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="select-one on decoupled only, fewer operations, one round")
    p.add_argument("--rounds", type=int, default=None, help="runs per variant (default 3, or 1 with --quick)")
    p.add_argument("--ops", type=int, default=None, help="operations per level for every pair")
    args = p.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    if rounds < 1:
        p.error("--rounds must be >= 1")
    pairs = PAIRS[:1] if args.quick else PAIRS
    result: list[str] = []
    for workload, config, key in pairs:
        ops = args.ops or (300 if args.quick else OPS[workload])
        runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for variant in order:
                runs[variant].append(_measure(workload, config, ops, variant))
        print(f"{workload} / {config}, 64 clients, {ops} ops per level, n = {rounds}:")
        base = runs["none"]
        for variant in VARIANTS:
            xs = runs[variant]
            mean = statistics.fmean(xs)
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            ratios = [x / b for x, b in zip(xs, base, strict=True)]
            print(
                f"  {variant:8s} off: {mean:9,.0f} ± {sd:6,.0f} ops/s   x{statistics.fmean(ratios):.2f}"
                f" ({min(ratios):.2f}-{max(ratios):.2f})"
            )
            result.append(f"{key}_{variant}={mean:.0f}")
            if variant != "none":
                result.append(f"ratio_{key}_{variant}={statistics.fmean(ratios):.2f}")
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
