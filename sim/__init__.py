"""sim: the simulation harness — runtime (time, randomness, cost models), backends,
workloads, scenarios, the runner, histories, the checker, reports and the CLI.

Only `sim.runtime` may be imported from the other packages (DESIGN.md §3).
"""
