"""Is `coordsim compare --baseline` quiet on unchanged code? Runs the default
comparison N times in a row and checks each later run against the first with
the same test `--baseline` uses (`sim.compare.report.compare_baseline`: Welch per
cell, Holm over the run at family-wise 5 %), and whether consecutive runs'
peak-throughput cells agree within their 95 % intervals (over each run's
`--repeat` interleaved passes, `sim.compare.runner`).

Usage: uv run python bench/compare_noise.py [--quick] [--runs N] [--mode real|virtual]
Last line: `RESULT runs=… baseline_passes=… peak_cells_overlapping=… seconds_per_run=…`.
`--quick`: 3 short virtual runs (under a minute).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.compare.report import compare_baseline, read_results


def _peaks(rows: list[dict[str, str]]) -> dict[tuple[str, str], tuple[float, float]]:
    """(workload, config) -> (mean, half-width) of its peak-throughput level."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for r in rows:
        key = (r["workload"], r["config"])
        mean, half = float(r["throughput_ops_s"]), float(r["throughput_ci95"] or 0.0)
        if key not in out or mean > out[key][0]:
            out[key] = (mean, half)
    return out


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] - a[1] <= b[0] + b[1] and b[0] - b[1] <= a[0] + a[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 short virtual runs")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--mode", default="real")
    p.add_argument("--keep", type=Path, help="copy each run's report.md and results.csv to KEEP/run<i>/")
    args = p.parse_args()
    runs, extra = args.runs, ["--mode", args.mode]
    if args.quick:
        runs, extra = 3, ["--mode", "virtual", "--quick", "--seed", "1"]
    coordsim = Path(sys.executable).with_name("coordsim")
    with tempfile.TemporaryDirectory(prefix="coordsim-noise-") as tmp:
        outs, took = [], []
        for i in range(runs):
            out = Path(tmp) / f"run{i}"
            t0 = time.perf_counter()
            # The default command as users run it (checkers included);
            # --allow-errors: this measures noise, errors are reported apart.
            proc = subprocess.run([str(coordsim), "compare", *extra, "--allow-errors", "-o", str(out)],
                                  capture_output=True, text=True, check=False)
            took.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-2000:])
                raise SystemExit(f"run {i} exited {proc.returncode}")
            rows = read_results(out)
            outs.append(rows)
            if args.keep is not None:
                kept = args.keep / f"run{i}"
                kept.mkdir(parents=True, exist_ok=True)
                for name in ("report.md", "results.csv"):
                    shutil.copyfile(out / name, kept / name)
                (kept / "stdout.txt").write_text(proc.stdout)
            # A row's samples are its passes', one per fresh deployment.
            npasses = sorted({r["repeats"] for r in rows})
            print(f"run {i}: {took[-1]:.0f} s, {'/'.join(npasses)} passes per row", flush=True)
        passes, overlapping, cells = 0, 0, 0
        first = outs[0]
        for i, rows in enumerate(outs[1:], start=1):
            # compare_baseline takes LevelRow-like objects: rebuild the fields it reads.
            checked = compare_baseline(cast("Any", [_Row(r) for r in rows]), first)
            ok = not checked.regressions
            passes += ok
            print(f"run {i} vs run 0: {'pass' if ok else 'FAIL'}: {checked.line()}"
                  + "".join(f"\n  {x}" for x in checked.regressions))
        for a, b in itertools.pairwise(outs):
            pa, pb = _peaks(a), _peaks(b)
            for key in pa:
                cells += 1
                ok = _overlap(pa[key], pb[key])
                overlapping += ok
                if not ok:
                    print(f"  peak {key[0]} {key[1]}: {pa[key][0]:.0f}±{pa[key][1]:.0f} vs {pb[key][0]:.0f}±{pb[key][1]:.0f}")
    print(f"RESULT runs={runs} baseline_passes={passes}/{runs - 1} peak_cells_overlapping={overlapping}/{cells} "
          f"seconds_per_run={sum(took) / len(took):.0f}")


class _Row:
    """The fields of a `LevelRow` that `compare_baseline` reads, from a CSV row."""

    def __init__(self, r: dict[str, str]) -> None:
        self.workload, self.config = r["workload"], r["config"]
        self.concurrency, self.repeats = int(r["concurrency"]), int(r["repeats"])
        self.latency_samples = int(r["latency_samples"])
        self.throughput_samples = tuple(float(x) for x in r["throughput_samples"].split(";") if x)
        self.p50_samples_ms = tuple(float(x) for x in r["p50_samples_ms"].split(";") if x)
        self.p99_samples_ms = tuple(float(x) for x in r["p99_samples_ms"].split(";") if x)


if __name__ == "__main__":
    main()
