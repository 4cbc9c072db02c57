"""Virtual-mode simulation speed: simulated operations per wall-second of the
select-one workload on the decoupled configuration with 64 clients.

Usage: uv run python bench/simspeed.py [--quick]; last line `RESULT sim_ops_per_wall_s=…`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.compare.runner import run_pair
from sim.load.config import Config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer operations")
    args = p.parse_args()
    ops = 40 if args.quick else 250  # at concurrency 1; 64 clients measure 8x as many
    cfg = Config(
        mode="virtual", configurations=("decoupled",), workloads=("select-one",), concurrency=(64, 64),
        ops_per_level=ops, warmup_ops=20, repeat=1,
    )
    # The first level of 64 clients is a second warm-up; the wall time of the
    # second one (between the two level callbacks) is the measurement.
    marks: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = run_pair(
            cfg, "decoupled", "select-one", Path(tmp) / "trace", on_level=lambda r: marks.append(time.perf_counter())
        )
    wall = marks[1] - marks[0]
    row = out.rows[1]
    print(
        f"select-one decoupled c=64 virtual: {row.ops} ops in {row.window_s * row.repeats:.3f} simulated s "
        f"({row.throughput_ops_s:,.0f} ops/s simulated), {wall:.2f} wall s"
    )
    print(f"RESULT sim_ops_per_wall_s={row.ops / wall:.0f}")


if __name__ == "__main__":
    main()
