"""Same seed ⇒ byte-identical event log, whatever PYTHONHASHSEED and memory layout are.

`determinism_program` runs a few hundred tasks in nested anyio task groups
(sleeps, events, queues, semaphores, modeled CPU, timeouts, cancelled task groups,
iterated sets of tasks and futures) and prints a hash of its event log; here it
runs in separate interpreters, since address- and hash-dependent orders only
differ between processes.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sim.runtime import determinism_program

REPO = Path(__file__).resolve().parents[3]
MIN_EVENTS = 3000


@dataclass(frozen=True)
class Outcome:
    sha256: str
    events: int
    log: Path


def _run_all(runs: list[tuple[int, str, int]], tmp_path: Path) -> list[Outcome]:
    """Runs the program once per `(seed, PYTHONHASHSEED, perturb)`, all at once."""
    procs: list[tuple[Path, list[str], subprocess.Popen[str]]] = []
    for n, (seed, hashseed, perturb) in enumerate(runs):
        log = tmp_path / f"run{n}-seed{seed}-hash{hashseed}.log"
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "tests.sim.runtime.determinism_program"]
        cmd += ["--seed", str(seed), "--perturb", str(perturb), "--dump", str(log)]
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        procs.append((log, cmd, proc))
    outcomes = []
    for log, cmd, proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{err}"
        fields = dict(kv.split("=", 1) for kv in out.split())
        outcomes.append(Outcome(fields["sha256"], int(fields["events"]), log))
    return outcomes


def _first_difference(a: Path, b: Path) -> str:
    diff = difflib.unified_diff(
        a.read_text().splitlines(), b.read_text().splitlines(), str(a), str(b), n=2, lineterm=""
    )
    return "\n".join(list(diff)[:40])


def test_same_seed_same_log_across_processes(tmp_path: Path) -> None:
    # The perturbation shifts every later allocation, so address-based hashes differ.
    same_a, same_b, other = _run_all([(11, "1", 0), (11, "12345", 3000), (12, "1", 0)], tmp_path)

    assert same_a.events > MIN_EVENTS
    assert same_a.sha256 == same_b.sha256, "seed 11 gave two logs:\n" + _first_difference(
        same_a.log, same_b.log
    )
    assert same_a.events == same_b.events
    assert other.sha256 != same_a.sha256
    assert other.events > MIN_EVENTS


@pytest.fixture(scope="module")
def log11() -> list[str]:
    return determinism_program.program(11)


def test_same_seed_same_log_in_one_process(log11: list[str]) -> None:
    # Process-wide state (anyio's task registry, asyncio's task-name counter, the
    # loop's sequence numbers) must not leak from one run into the next.
    assert determinism_program.program(11) == log11


def test_workload_exercises_what_it_claims(log11: list[str]) -> None:
    # A determinism check is only as good as the interleavings the workload makes.
    log = log11
    for what in (
        " sub-cancelled",  # a scoped leaf reached through anyio's child scopes
        " cancel-group",  # a whole task group cancelled from inside
        " caught Boom",  # a failure cancelling its siblings, caught by the parent
        " cancelled",
        "timed_out=True",  # move_on_after expiring
        " fail_after ",
        " asyncio-timeout ",
        " pending=",  # sets of futures and tasks iterated
        " got ",  # the queue
        " sem-in ",
        " cpu ",
    ):
        assert any(what in line for line in log), f"no {what.strip()!r} event"
    workers = sum(line.endswith(" start") for line in log)
    assert workers >= 150
