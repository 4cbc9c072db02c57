"""Instructions per simulated operation: a speed measure the machine's noise cannot move.

Wall-clock rates on these shared 2-core machines vary by 5-10 % from run to
run (`simspeed.py`'s spreads), so a change worth 2 % cannot be seen in them.
This bench counts the machine instructions a pair executes per simulated
operation, under valgrind's cachegrind (no cache simulation), which counts
the same whatever else the machine does (repeat counts of one revision
differ by 0.03-0.1 % for most pairs and by up to 1 % for update on
decoupled: objects hashed by address still vary with where the allocator
puts them). It runs the pair at two sizes in fresh processes (with `PYTHONHASHSEED=0`)
and divides the difference of the counts by the difference of the operations,
so interpreter start-up, imports and set-up cancel out. Instructions are not
time (a cache miss costs more than an add), so this complements
`simspeed.py`; it does not replace it.

`--against REV` counts a git revision beside this tree (checked out into a
temporary worktree, removed afterwards) and prints the ratio base / this:
above 1, this tree executes fewer instructions per operation.

Usage: uv run python bench/instructions.py [--quick] [--against REV] [--rounds N]
Last line: `RESULT instr_per_op_<pair>=… [base_instr_per_op_<pair>=… instr_ratio_<pair>=…]`
(instructions per simulated operation, means over rounds).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.simspeed import PAIRS, _worktree

ROOT = Path(__file__).resolve().parents[1]
#: Operations per level (at concurrency 1; 64 clients run more) of the small
#: and the large run, by pair: the slow pairs get fewer, so that a full run
#: under valgrind (about 50 times slower than native) takes minutes.
SIZES = {"select_one_dec": (100, 400), "select_one_el": (100, 400), "insert_dec": (100, 400),
         "insert_el": (20, 60), "update_dec": (20, 60), "update_el": (20, 60)}
QUICK_SIZES = (50, 150)

# A pass of `workload` under `config` at 64 clients, as simspeed.py measures
# it; prints the operations simulated (warm-ups are the same at both sizes).
_RUN = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from sim.compare.runner import run_pair
from sim.load.run_config import RunConfig
workload, config, ops = sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = RunConfig(mode="virtual", configurations=(config,), workloads=(workload,), concurrency=(64, 64),
             ops_per_level=ops, warmup_ops=20, repeat=1)
with tempfile.TemporaryDirectory() as tmp:
    out = run_pair(cfg, config, workload, Path(tmp) / "trace")
print(json.dumps(sum(r.ops for r in out.rows)))
"""
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _count(root: Path, workload: str, config: str, ops: int) -> tuple[int, int]:
    """(operations, instructions) of one run on the tree at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-c", _RUN, str(root), workload, config, str(ops)],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )
    refs = _REFS.search(done.stderr)
    if done.returncode != 0 or refs is None:
        raise SystemExit(f"instructions: {workload}/{config} on {root} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), int(refs.group(1).replace(",", ""))


def _per_op(pool: concurrent.futures.Executor, root: Path, workload: str, config: str, sizes: tuple[int, int]) -> float:
    small, large = (pool.submit(_count, root, workload, config, n) for n in sizes)
    (ops_a, refs_a), (ops_b, refs_b) = small.result(), large.result()
    if ops_b <= ops_a:
        raise SystemExit(f"instructions: {workload}/{config}: the large run simulated no more operations")
    return (refs_b - refs_a) / (ops_b - ops_a)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="select-one on decoupled only, smaller runs")
    p.add_argument("--against", metavar="REV", help="a git revision to count beside this tree")
    p.add_argument("--rounds", type=int, default=1, help="counts per pair and tree (repeats differ by 0.03-1 %%)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if shutil.which("valgrind") is None:
        print("instructions: needs valgrind on PATH (Debian's package valgrind)", file=sys.stderr)
        raise SystemExit(2)
    pairs = PAIRS[:1] if args.quick else PAIRS
    result: list[str] = []
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        trees = {"this": ROOT}
        if args.against:
            trees["base"] = stack.enter_context(_worktree(args.against))
        for workload, config, key in pairs:
            sizes = QUICK_SIZES if args.quick else SIZES[key]
            counts = {name: [_per_op(pool, root, workload, config, sizes) for _ in range(args.rounds)]
                      for name, root in trees.items()}
            this = statistics.fmean(counts["this"])
            spread = f" ± {statistics.stdev(counts['this']) / 1e3:,.1f} k" if args.rounds > 1 else ""
            line = f"{workload:<10} {config:<10} c=64: {this / 1e6:.4f} M instructions/op{spread} (n={args.rounds})"
            result.append(f"instr_per_op_{key}={this:.0f}")
            if "base" in counts:
                base = statistics.fmean(counts["base"])
                line += f"; base {base / 1e6:.4f} M, base/this {base / this:.3f}"
                result += [f"base_instr_per_op_{key}={base:.0f}", f"instr_ratio_{key}={base / this:.3f}"]
            print(line, flush=True)
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
