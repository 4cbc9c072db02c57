"""Benchmark of the history checkers: operations checked per second by the
named-anomaly checker (1), the black-box strict-serializability checker (2) and
the whitebox checker (3, replaying the system's timestamps) on one generated history, and peak memory.

The history comes from `sim.history.checker.generate` (valid by construction: every
checker must say `valid`), with 10 processes, 4 live tables at a time, ~50
operations per table, 40% reads, 2% indeterminate operations. Each checker is
timed on its own, including the per-table indexing it does; peak memory is
the process's peak RSS while the checkers run (the history included; on Linux
the peak mark is reset after generating the history). The checkers are
single-threaded, so their CPU time (`time.process_time`) is their time on one
core; it is what RESULT reports, because wall time on a shared machine also
counts other processes. Both are printed.

    uv run python bench/checker.py [--quick] [--ops N] [--seed S]

Last line: `RESULT ops=… blackbox_s=… whitebox_s=… named_s=… peak_mb=…`
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

# Run as a file, this directory comes first on sys.path, and bench/oracle.py
# would shadow the `oracle` package the checkers import.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from sim.history.checker.blackbox import check_blackbox  # noqa: E402
from sim.history.checker.generate import GenConfig, generate  # noqa: E402
from sim.history.checker.named import check_named  # noqa: E402
from sim.history.checker.verdict import Outcome  # noqa: E402
from sim.history.checker.whitebox import check_whitebox  # noqa: E402
from sim.history.model import READ, validate  # noqa: E402


def _reset_peak_rss() -> bool:
    """Resets the kernel's peak-RSS mark (Linux), so the peak measured next is
    the checkers', not the generator's; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="100,000 operations")
    parser.add_argument(
        "--ops", type=int, default=None, help="default 1,000,000 (100,000 with --quick)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    n = args.ops if args.ops is not None else (100_000 if args.quick else 1_000_000)
    if n < 1:
        parser.error("--ops must be >= 1")

    started = time.perf_counter()
    h = generate(GenConfig(ops=n, processes=10, window=4, ops_per_table=50, p_read=0.4,
                           p_info=0.02, seed=args.seed))
    gen_s = time.perf_counter() - started
    started = time.perf_counter()
    validate(h)
    validate_s = time.perf_counter() - started
    reads = sum(1 for k in h.kind if k == READ)
    print(f"{n:,} operations ({reads:,} reads, {len(h.res):,} elements read), seed {args.seed}; "
          f"generated in {gen_s:.1f}s, validated in {validate_s:.1f}s")

    gc.collect()
    hwm_reset = _reset_peak_rss()
    times: dict[str, float] = {}
    print(f"{'checker':<10} {'cpu s':>8} {'wall s':>8} {'ops/cpu-s':>12}  verdict")
    for name, check in (("named", check_named), ("blackbox", check_blackbox), ("whitebox", check_whitebox)):
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        v = check(h)
        times[name] = time.process_time() - c0
        wall = time.perf_counter() - w0
        print(f"{name:<10} {times[name]:>8.2f} {wall:>8.2f} {n / times[name]:>12,.0f}  {v.outcome.value}")
        assert v.outcome == Outcome.VALID, (name, v.anomalies[:1])
    peak_mb = _peak_rss_mb()
    total = sum(times.values())
    scope = "while checking (history included)" if hwm_reset else "of the whole process"
    print(f"checkers 1-3 together: {total:.2f} cpu-s ({n / total:,.0f} ops/s); "
          f"peak RSS {scope} {peak_mb:.0f} MB")
    print(
        f"RESULT ops={n} blackbox_s={times['blackbox']:.2f} whitebox_s={times['whitebox']:.2f} "
        f"named_s={times['named']:.2f} peak_mb={peak_mb:.0f}"
    )


if __name__ == "__main__":
    main()
