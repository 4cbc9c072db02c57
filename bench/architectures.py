"""One fixed workload on every configuration, virtual mode: the numbers the
coordinator issue asks for — throughput, the loop's busy fraction, oracle calls
per query, writes per group commit — for peeks, inserts and updates.

64 closed-loop clients (20 operations each; 10 for updates) on one table, seed 1,
the tests' latency model (tests/coordinator/harness.py): deterministic, so two
runs print the same numbers.

    uv run python bench/architectures.py [--quick] [--clients N]

Last line: `RESULT select_el=… select_pg=… select_dec=… insert_el=… insert_pg=…
insert_dec=… update_el=… update_pg=… update_dec=…` (simulated ops/s).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.config import named
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from sim.runtime.core import Runtime, run
from tests.coordinator.harness import latency_model

CONFIGS = {"event-loop": "el", "event-loop+pg-oracle": "pg", "decoupled": "dec"}
WORKLOADS = ("select", "insert", "update")


def statement(workload: str, client: int, k: int) -> str:
    if workload == "select":
        return "SELECT * FROM t WHERE a = 1"
    if workload == "insert":
        return f"INSERT INTO t VALUES ({client * 1000 + k + 2})"
    return "UPDATE t SET a = a + 0 WHERE a = 1"


def measure(name: str, workload: str, clients: int, ops: int) -> dict[str, float]:
    async def main(rt: Runtime) -> dict[str, float]:
        env = Environment(rt)
        async with build_coordinator(named(name), env, rt) as coord:
            s = coord.connect()
            assert (await s.execute("CREATE TABLE t (a int)")).ok
            assert (await s.execute("INSERT INTO t VALUES (1)")).ok
            before = coord.statistics()
            start = rt.now()
            errors: list[str] = []

            async def client(i: int) -> None:
                ss = coord.connect()
                for k in range(ops):
                    r = await ss.execute(statement(workload, i, k))
                    if not r.ok:
                        errors.append(str(r.code))

            async with anyio.create_task_group() as tg:
                for i in range(clients):
                    tg.start_soon(client, i)
            elapsed = rt.now() - start
            after = coord.statistics()
            assert not errors, errors[:3]
            n = clients * ops
            commits = after.group_commits - before.group_commits
            return {
                "ops_s": n / elapsed,
                "busy": (after.loop_busy_s - before.loop_busy_s) / elapsed / after.loop_cores,
                "oracle_per_op": (after.oracle_calls - before.oracle_calls) / n,
                "confirms": after.confirm_leadership_calls - before.confirm_leadership_calls,
                "writes_per_commit": (after.writes_group_committed - before.writes_group_committed)
                / max(1, commits),
            }

    return run(main, seed=1, latency=latency_model())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="16 clients, fewer operations")
    p.add_argument("--clients", type=int, default=None)
    args = p.parse_args()
    clients = args.clients or (16 if args.quick else 64)
    result: dict[str, float] = {}
    print(f"{'workload':8} {'config':22} {'ops/s':>9} {'busy':>6} {'oracle/op':>10} {'confirms':>9} {'w/commit':>9}")
    for workload in WORKLOADS:
        ops = (5 if args.quick else 10) if workload == "update" else (8 if args.quick else 20)
        for name, short in CONFIGS.items():
            m = measure(name, workload, clients, ops)
            result[f"{workload}_{short}"] = m["ops_s"]
            print(
                f"{workload:8} {name:22} {m['ops_s']:9.0f} {m['busy']:6.2f} {m['oracle_per_op']:10.2f} "
                f"{m['confirms']:9.0f} {m['writes_per_commit']:9.1f}"
            )
    print("RESULT " + " ".join(f"{k}={v:.0f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
