"""Does virtual mode predict real mode from a profile measured in the same run?
(Issue 35, "one profile, two predictions".) End to end: a real `coordsim
compare` (select-one, insert, update; event-loop and decoupled; a few levels),
its profile by `coordsim calibrate --from`, then the same compare in virtual
mode on that profile. Per cell it prints virtual and real throughput and p50
with their 95 % intervals (over passes) and virtual/real; then whether every
pair real mode calls significantly different (its Conclusions, faster or
slower) goes the same way in virtual (the paired ratio of the same passes'
samples, `sim.compare.conclusions.paired_ratio`).

A cell qualifies when real mode may conclude from it (steady, not host-bound)
and the virtual cell is steady. `max_ratio` is the largest max(v/r, r/v) of
throughput over the qualifying cells; `peak_max_ratio` (printed above) the same
over each (workload, configuration)'s peak level only.

`--overhead` instead measures what recording per-handler CPU costs: one real
cell run alternately with and without it (same process, same Postgres),
paired by order, and prints the throughput ratio.

Usage: uv run python bench/virtual_vs_real.py [--quick] [--force] [--keep DIR] [--overhead] [--real DIR]
Last line: `RESULT max_ratio=… sign_agreement=… cells=…` (exit 1 when fewer than
6 cells qualify). `--quick` (3 levels, 3 passes) takes up to 10 minutes: it runs
a real compare. On a busy host it stops with the reason unless `--force`, and
a forced run says so in every line it prints.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.compare.conclusions import paired_ratio
from sim.compare.stats import estimate
from sim.model.calibrate import check_host

WORKLOADS = "select-one,insert,update"
CONFIGS = "event-loop,decoupled"
#: Fewer qualifying cells than this and the RESULT says nothing: exit 1.
MIN_CELLS = 6

Cell = dict[str, Any]


def _coordsim(*args: str) -> subprocess.CompletedProcess[str]:
    coordsim = Path(sys.executable).with_name("coordsim")
    return subprocess.run([str(coordsim), *args], capture_output=True, text=True, check=False)


def _run(label: str, *args: str) -> None:
    t0 = time.perf_counter()
    proc = _coordsim(*args)
    print(f"{label}: exit {proc.returncode} in {time.perf_counter() - t0:.0f} s", flush=True)
    # compare exits 1 when a cell erred beyond the threshold or a checker found
    # an anomaly: its numbers are still written; anything else is a failure.
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        raise SystemExit(f"{label} failed (exit {proc.returncode}): coordsim {' '.join(args)}")


def _cells(out: Path) -> tuple[dict[tuple[str, str, int], Cell], dict[str, Any]]:
    doc = json.loads((out / "summary.json").read_text())
    return {(c["workload"], c["config"], int(c["concurrency"])): c for c in doc["cells"]}, doc


def _est(samples: list[float]) -> str:
    xs = [x for x in samples if x is not None and math.isfinite(x)]
    if not xs:
        return "—"
    e = estimate(xs)
    return f"{e.mean:.4g}" + (f"±{e.half:.2g}" if e.half is not None else "")


def _qualifies(real: Cell, virtual: Cell | None) -> str:
    """'' if the pair qualifies, else why not."""
    if virtual is None:
        return "no virtual cell"
    why = []
    if not real["steady"]:
        why.append(f"real not steady ({real['steady_note']})")
    if real["host_bound"]:
        why.append(f"real host-bound ({real['host_bound']})")
    if not virtual["steady"]:
        why.append(f"virtual not steady ({virtual['steady_note']})")
    return "; ".join(why)


def _ratio(v: float, r: float) -> float:
    return max(v / r, r / v) if v > 0 and r > 0 else math.inf


_COLUMN = {"throughput": "throughput_samples", "p50": "p50_samples_ms", "p99": "p99_samples_ms"}


def _signs(real_doc: dict[str, Any], virtual: dict[tuple[str, str, int], Cell]) -> tuple[int, int, list[str]]:
    """(agreeing, significant, lines): each ratio real mode labelled faster or
    slower, against virtual's paired ratio of the same cells' samples."""
    concl = real_doc.get("conclusions") or {}
    ref = concl.get("reference", "event-loop")
    agree, total, lines = 0, 0, []
    for r in concl.get("ratios", []):
        if r["label"] not in ("faster", "slower"):
            continue
        total += 1
        key, col = (r["workload"], r["config"], int(r["concurrency"])), _COLUMN[r["measure"]]
        mine, theirs = virtual.get(key), virtual.get((r["workload"], ref, int(r["concurrency"])))
        v = None
        if mine and theirs and mine[col] and theirs[col]:
            n = min(len(mine[col]), len(theirs[col]))
            if all(x and x > 0 for x in (*mine[col][:n], *theirs[col][:n])):
                v = paired_ratio(mine[col][:n], theirs[col][:n]).ratio
        ok = v is not None and (v > 1) == (r["ratio"] > 1)
        agree += ok
        shown = "—" if v is None else f"{v:.3g}x"
        lines.append(f"  {r['workload']} c={r['concurrency']} {r['config']}/{ref} {r['measure']}: real "
                     f"{r['ratio']:.3g}x {r['label']}, virtual {shown}: {'same sign' if ok else 'DIFFERENT'}")
    return agree, total, lines


def compare(args: argparse.Namespace, tmp: Path, forced: str) -> None:
    levels = "1,4,16" if args.quick else "1,4,16,64"
    repeat = "3" if args.quick else "5"
    common = ["--workloads", WORKLOADS, "--configs", CONFIGS, "--concurrency", levels, "--repeat", repeat,
              "--seed", "1", "--allow-errors"]
    real, virtual, profile = tmp / "real", tmp / "virtual", tmp / "this-host.toml"
    if args.real is not None:  # a kept real run: predict it again (no new real run)
        real = args.real
        doc = json.loads((real / "summary.json").read_text())
        common = ["--workloads", ",".join(doc["workloads"]), "--configs", ",".join(doc["configurations"]),
                  "--concurrency", ",".join(str(c) for c in sorted({int(c["concurrency"]) for c in doc["cells"]})), "--repeat", str(doc["passes"]),
                  "--seed", str(doc.get("seed", 1)), "--allow-errors"]
        print(f"predicting the kept real run {real} (no new real run)", flush=True)
    else:
        _run("real compare", "compare", "--mode", "real", *common, "-o", str(real))
    _run("calibrate --from", "calibrate", "--from", str(real), "-o", str(profile))
    _run("virtual compare", "compare", "--mode", "virtual", *common, "--latency-profile", str(profile),
         "-o", str(virtual))
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for src in (real, virtual):
            if src != args.real:
                shutil.copytree(src, args.keep / src.name, dirs_exist_ok=True)
        shutil.copyfile(profile, args.keep / profile.name)
    rc, real_doc = _cells(real)
    vc, _ = _cells(virtual)
    prov = real_doc.get("provenance") or {}
    print(f"real run's host: load {prov.get('load_avg_1m_start')} -> {prov.get('load_avg_1m_end')}, other "
          f"processes {prov.get('other_cpu_cores')} cores of {prov.get('usable_cores')}; busy: "
          f"{prov.get('busy_reason') or 'no'}{forced}")
    print(f"{'workload':<11}{'config':<11}{'c':>4}  {'real ops/s':>14}{'virtual ops/s':>16}{'v/r':>7}"
          f"  {'real p50 ms':>13}{'virtual p50':>13}{'v/r':>7}  qualifies")
    ratios: list[float] = []
    every: list[float] = []  # unqualified too: shown, never the RESULT
    peaks: dict[tuple[str, str], tuple[float, float]] = {}
    for key, r in rc.items():
        v = vc.get(key)
        why = _qualifies(r, v)
        if v is not None:
            every.append(_ratio(v["throughput_ops_s"], r["throughput_ops_s"]))
        tr = v["throughput_ops_s"] / r["throughput_ops_s"] if v and r["throughput_ops_s"] else math.nan
        p50r = (v["p50_ms"] / r["p50_ms"]) if v and v["p50_ms"] and r["p50_ms"] else math.nan
        vt = _est(v["throughput_samples"]) if v else "—"
        vp = _est(v["p50_samples_ms"]) if v else "—"
        print(f"{key[0]:<11}{key[1]:<11}{key[2]:>4}  {_est(r['throughput_samples']):>14}{vt:>16}{tr:>7.2f}"
              f"  {_est(r['p50_samples_ms']):>13}{vp:>13}{p50r:>7.2f}  {why or 'yes'}")
        if not why and v is not None:
            ratios.append(_ratio(v["throughput_ops_s"], r["throughput_ops_s"]))
            best = peaks.get(key[:2])
            if best is None or r["throughput_ops_s"] > best[1]:
                peaks[key[:2]] = (v["throughput_ops_s"], r["throughput_ops_s"])
    peak = max((_ratio(v, r) for v, r in peaks.values()), default=math.nan)
    print(f"peak_max_ratio={peak:.3g} over {len(peaks)} (workload, configuration) peaks; over every cell, "
          f"qualifying or not (not a result): {max(every, default=math.nan):.3g}")
    agree, total, lines = _signs(real_doc, vc)
    print(f"significant real pairs (Holm, family-wise 5 %): {total}")
    print("\n".join(lines))
    sign = agree / total if total else math.nan
    worst = max(ratios, default=math.nan)
    print(f"RESULT max_ratio={worst:.3g} sign_agreement={sign:.3g} cells={len(ratios)}{forced}")
    if len(ratios) < MIN_CELLS:
        raise SystemExit(1)


def overhead(args: argparse.Namespace, tmp: Path, forced: str) -> None:
    """One real cell alternately with and without per-handler CPU recording."""
    import contextlib
    from unittest import mock

    from sim.cli.pg import postgres_for
    from sim.compare.runner import run_pair
    from sim.load.run_config import RunConfig

    pairs = 3 if args.quick else 6
    cells = [("select-one", "event-loop", 16), ("insert", "decoupled", 16)]
    with postgres_for(RunConfig(mode="real")) as cfg0:
        for wl, config, c in cells:
            cfg = cfg0.with_overrides(workloads=[wl], configurations=[config], concurrency=[c], repeat=1,
                                      duration_s=1.0, warmup_s=0.5, seed=1)
            on: list[float] = []
            off: list[float] = []
            for i in range(pairs):
                for record in (True, False) if i % 2 == 0 else (False, True):
                    # Without: the coordinator finds no recorder (round trips are still recorded).
                    off_switch = mock.patch("coordinator.running.current_backend_stats", return_value=None)
                    with contextlib.nullcontext() if record else off_switch:
                        row = run_pair(cfg, config, wl, tmp / f"ovh-{wl}-{config}-{i}-{record}").rows[0]
                    (on if record else off).append(row.throughput_ops_s)
            pr = paired_ratio(on, off)
            ci = f" (95 % CI {pr.lo:.3f}-{pr.hi:.3f})" if pr.lo is not None and pr.hi is not None else ""
            print(f"{wl} {config} c={c}: with recording {_est(on)} ops/s, without {_est(off)} ops/s; "
                  f"with/without {pr.ratio:.3f}{ci}, {pairs} pairs{forced}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 levels x 3 passes (up to 10 minutes: a real compare)")
    p.add_argument("--force", action="store_true", help="run even on a busy host (every line says so)")
    p.add_argument("--keep", type=Path, help="copy both runs and the profile to KEEP/")
    p.add_argument("--overhead", action="store_true", help="measure the per-handler CPU recording's overhead")
    p.add_argument("--real", type=Path, help="predict this kept real run (a --keep DIR's real/) instead of "
                   "running a new one: the profile and the virtual run only, any host")
    args = p.parse_args()
    if args.real is not None:
        with tempfile.TemporaryDirectory(prefix="coordsim-vvr-") as tmp:
            compare(args, Path(tmp), "")
        return
    host = check_host()
    forced = ""
    if host.busy:
        if not args.force:
            raise SystemExit(f"the host is busy ({host.busy_reason}): real-mode numbers now would carry its "
                             "load; run on a quiet machine, or pass --force")
        forced = f" [FORCED ON A BUSY HOST: {host.busy_reason}]"
        print(f"--force on a busy host: {host.busy_reason}", flush=True)
    with tempfile.TemporaryDirectory(prefix="coordsim-vvr-") as tmp:
        (overhead if args.overhead else compare)(args, Path(tmp), forced)


if __name__ == "__main__":
    main()
