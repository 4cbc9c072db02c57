"""One OS process hammering an oracle timeline, for the two-process test.

    python -m tests.oracle.proc_worker URL TIMELINE OUT --client NAME [--batching]

Opens the oracle, prints `ready`, waits for a line on stdin (the parent's start
barrier), runs the random workload and writes its history (JSON lines) to OUT.
Times are `rt.now_ns()`: on the stock loop that is `time.monotonic()`, one
clock for every process on the machine, so histories merge.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import anyio

from oracle.testing import OpRecord, RecordingOracle, open_timeline, run_random_workload
from sim.runtime.core import Runtime, run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("timeline")
    parser.add_argument("out")
    parser.add_argument("--client", required=True)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    async def go(rt: Runtime) -> list[OpRecord]:
        # The shared-clock premise of the merged check: the loop's clock is the
        # system-wide monotonic clock.
        assert abs(asyncio.get_running_loop().time() - time.monotonic()) < 0.05
        async with await open_timeline(args.url, args.timeline, rt, batching=args.batching) as o:
            rec = RecordingOracle(o, rt, client=args.client)
            await rec.read_ts()  # connected and warm
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            await run_random_workload(rec, rt, tasks=args.tasks, ops_per_task=args.ops)
            stats = o.statistics()
        print(f"done {len(rec.history)} ops, batches {stats.batches_count}", flush=True)
        return rec.history

    history = run(go, seed=args.seed, virtual=False)
    with open(args.out, "w") as f:
        for r in history:
            f.write(r.to_json() + "\n")


if __name__ == "__main__":
    main()
