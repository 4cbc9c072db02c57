"""Benchmark of start-up (issue 37): the CPU time of `coordsim --help` and of
`coordsim CMD --help` for every top-level command, and how many project modules
`import coordinator.config` loads. Each run is a fresh interpreter; CPU time
(user + system of the child) is used, not wall time, so a busy machine inflates
it less. The targets are 0.3 CPU-s per help and 15 modules.

    uv run python bench/startup.py [--quick] [--runs N]

Last line: `RESULT help_cpu_s=… help_cpu_min_s=… help_cpu_max_s=… cmd_help_cpu_max_s=… worst_cmd=… config_modules=… runs=…`
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys

from sim.cli.main import LAZY_COMMANDS

PROJECT = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim")
COUNT = (
    "import sys, coordinator.config; "
    f"print(sum(1 for m in sys.modules if m.split('.')[0] in {set(PROJECT)!r}))"
)


def cpu_s(argv: list[str]) -> float:
    """User + system CPU seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "80"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 runs of `coordsim --help`, 1 of each command's")
    parser.add_argument("--runs", type=int, default=None, help="runs of `coordsim --help` (default 15, 3 with --quick)")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 15)
    cmd_runs = 1 if args.quick else 3
    exe = shutil.which("coordsim") or os.path.join(os.path.dirname(sys.executable), "coordsim")

    top = [cpu_s([exe, "--help"]) for _ in range(runs)]
    print(f"coordsim --help: median {statistics.median(top):.3f} CPU-s, min {min(top):.3f}, max {max(top):.3f} (n={runs})")
    names = [c.name for c in LAZY_COMMANDS] + ["doctor", "location", "postgres"]
    per_cmd: dict[str, float] = {}
    for name in names:
        samples = [cpu_s([exe, name, "--help"]) for _ in range(cmd_runs)]
        per_cmd[name] = statistics.median(samples)
        print(f"coordsim {name} --help: median {per_cmd[name]:.3f} CPU-s (n={cmd_runs})")
    worst = max(per_cmd, key=lambda n: per_cmd[n])
    out = subprocess.run([sys.executable, "-c", COUNT], check=True, capture_output=True, text=True)
    modules = int(out.stdout.strip())
    print(f"import coordinator.config: {modules} project modules")
    print(
        f"RESULT help_cpu_s={statistics.median(top):.3f} help_cpu_min_s={min(top):.3f} "
        f"help_cpu_max_s={max(top):.3f} cmd_help_cpu_max_s={per_cmd[worst]:.3f} worst_cmd={worst} "
        f"config_modules={modules} runs={runs}"
    )


if __name__ == "__main__":
    main()
