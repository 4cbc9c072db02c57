"""Shrinking a failing scenario: fewer clients, fewer operations, fewer faults,
while the same anomaly still appears (in the spirit of QuickCheck's and
Hypothesis's shrinkers, greedily, over the scenario's own parameters).

The seed stays fixed: every candidate is a deterministic run, so the smallest
reproduction printed is replayable with its `Spec.command()`.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import anyio

from sim.history.checker import check_history
from sim.history.recorder import HistoryRecorder
from sim.load.deployment import switchable_latency
from sim.load.driver import Step, drive
from sim.load.limits import STUCK_AFTER_S
from sim.load.scenarios.builtin import PROGRAMS
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_scenarios import SCENARIOS, latency_model
from sim.nemesis.anomaly_spec import coordinator_config
from sim.nemesis.nemesis import Nemesis
from sim.nemesis.plan import FaultPlan
from sim.runtime.core import run
from sim.runtime.errors import InvalidUsage
from sim.runtime.latency import LogNormal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from sim.history.checker.run import Report
    from sim.history.model import Event, History
    from sim.load.driver import Sim
    from sim.load.scenarios.builtin import Program
    from sim.nemesis.anomaly_spec import Spec
    from sim.nemesis.plan import Fault
    from sim.runtime.core import Runtime

__all__ = [
    "Script",
    "Shrunk",
    "ShrunkScript",
    "ddmin",
    "primary_anomaly",
    "record_script",
    "run_program",
    "run_script",
    "shrink",
    "shrink_ops",
]

#: The general anomalies rank after the named ones: a shrink keeps the most
#: specific name the original run showed.
_GENERAL: Final = ("not-strict-serializable", "not-linearizable", "timestamp-regression")


def primary_anomaly(names: list[str]) -> str | None:
    """The most specific anomaly name among `names` (named before general)."""
    named = sorted(n for n in names if n not in _GENERAL)
    if named:
        return named[0]
    general = [n for n in _GENERAL if n in names]
    return general[0] if general else None


@final
@dataclass(frozen=True)
class Shrunk:
    """The smallest spec found, its history and report, and how many runs it took."""

    anomaly: str
    original: Spec
    spec: Spec
    history: History
    report: Report
    runs: int
    #: Operations of the original run.
    original_ops: int = 0


def _candidates(spec: Spec) -> Iterator[Spec]:
    """Smaller specs, most aggressive first."""
    for i in range(len(spec.faults)):
        yield replace(spec, faults=spec.faults.without(i))
    if spec.clients > 1:
        for c in sorted({1, 2, spec.clients // 2, spec.clients - 1}):
            if 1 <= c < spec.clients:
                yield replace(spec, clients=c)
    if spec.size > 1:
        for s in sorted({1, spec.size // 2, spec.size - 1}):
            if 1 <= s < spec.size:
                yield replace(spec, size=s)


def shrink(
    spec: Spec,
    *,
    anomaly: str | None = None,
    max_runs: int = 200,
    progress: Callable[[str], None] | None = None,
    postgres_url: str | None = None,
) -> Shrunk | None:
    """Greedily shrinks `spec` while `anomaly` (default: the original run's
    most specific one) still appears. Returns None if the original run shows
    no anomaly (or not the one asked for).

    Args:
        max_runs: a bound on scenario runs (each is a full simulation).
        progress: called with a line per accepted step.
        postgres_url: real mode: the server every run uses (`run_spec`), so
            that candidates do not each start a cluster.
    """
    history, events = run_spec(spec, postgres_url=postgres_url)
    report = check_history(history, events)
    runs = 1
    target = anomaly or primary_anomaly(report.names)
    if target is None or target not in report.names:
        return None
    best, best_h, best_r = spec, history, report
    improved = True
    while improved and runs < max_runs:
        improved = False
        for cand in _candidates(best):
            if runs >= max_runs:
                break
            h, ev = run_spec(cand, postgres_url=postgres_url)
            runs += 1
            r = check_history(h, ev)
            if target in r.names:
                best, best_h, best_r, improved = cand, h, r, True
                if progress is not None:
                    progress(
                        f"still {target} with clients={cand.clients} size={cand.size} "
                        f"faults={cand.faults} ({h.n} ops)"
                    )
                break
    return Shrunk(target, spec, best, best_h, best_r, runs, history.n)


# --- Operation-level shrinking: delta debugging over a scripted replay ------------------
#
# The greedy pass above only turns the scenario's knobs. Below, the (already
# smaller) run is turned into a script — every statement with its client and
# start time, recorded by the driver — and ddmin (Zeller and Hildebrandt,
# "Simplifying and isolating failure-inducing input", TSE 2002) removes fault
# events, whole clients, single statements and background readers, re-running
# the script after each cut. A cut is kept iff the same anomaly name appears.


@final
@dataclass(frozen=True)
class Script:
    """A scripted scenario and the run it reproduces under: `spec` gives the
    base scenario's settings (its latency profile), configuration, seed,
    known-bad variants and fault plan (its clients and size are unused);
    `steps` are the statements (`Sim.play`), `background` the unrecorded
    readers busy-reads keeps running."""

    spec: Spec
    schedule: str
    steps: tuple[Step, ...]
    background: int = 0

    @property
    def clients(self) -> list[tuple[str, int]]:
        """The clients with a step, in order of their first step."""
        return list(dict.fromkeys((s.client, s.index) for s in self.steps))


@final
@dataclass(frozen=True)
class ShrunkScript:
    """The outcome of `shrink_ops`: the minimal script, the history of its
    last run and how many scenario runs it took (coarse pass included)."""

    anomaly: str
    original: Spec
    original_ops: int
    coarse: Spec
    script: Script
    history: History
    report: Report
    runs: int


def run_program(
    spec: Spec,
    program: Program,
    *,
    schedule: str = "fifo",
    transcript: list[Step] | None = None,
) -> tuple[History, list[Event]]:
    """Runs `program` as `sim.nemesis.anomalies.run_spec` runs the scenario's
    own (virtual mode: same deployment, latencies, nemesis and stuck limit;
    tests/sim/nemesis/test_shrink.py checks both give the same history), with
    the statements appended to `transcript` if given.

    Raises:
        InvalidUsage: a spec not in virtual mode, or without clients or size.
    """
    if spec.mode != "virtual":
        raise InvalidUsage("a scripted scenario runs in virtual mode only")
    if spec.clients < 1 or spec.size < 1:
        raise InvalidUsage(f"a scenario needs clients >= 1 and size >= 1: {spec}")
    sc = SCENARIOS[spec.scenario]
    cfg = coordinator_config(spec.config).with_overrides(known_bad=spec.known_bad)
    base = latency_model()
    if sc.oracle_spread is not None:
        base = base.with_overrides({"oracle.pg": LogNormal(0.0008, sc.oracle_spread)})
    latency, switch = switchable_latency(base)

    async def main(rt: Runtime) -> HistoryRecorder:
        rec = HistoryRecorder(rt.now)
        with anyio.fail_after(STUCK_AFTER_S):
            sims = drive(rt, cfg, rec, switch=switch, n_clients=spec.clients, size=spec.size,
                         transcript=transcript)
            async with sims as sim, anyio.create_task_group() as tg:
                tg.start_soon(Nemesis(sim.dep, spec.faults).run)
                await program(sim)
        return rec

    rec = run(main, seed=spec.seed, latency=latency, schedule=schedule)
    return rec.history(), rec.events()


def script_program(script: Script) -> Program:
    """The program playing `script`."""

    async def program(sim: Sim) -> None:
        await sim.play(script.steps, background=script.background)

    return program


def run_script(script: Script) -> tuple[History, list[Event]]:
    """Runs `script` (virtual mode, under its scheduling policy)."""
    return run_program(script.spec, script_program(script), schedule=script.schedule)


def record_script(spec: Spec, *, schedule: str = "fifo") -> tuple[Script, History, list[Event]]:
    """Runs `spec`'s scenario, recording its statements as a script."""
    steps: list[Step] = []
    program = PROGRAMS[SCENARIOS[spec.scenario].program]
    history, events = run_program(spec, program, schedule=schedule, transcript=steps)
    background = _background(spec)
    return Script(spec, schedule, tuple(steps), background), history, events


def _background(spec: Spec) -> int:
    """busy-reads (and read-after-ack) runs clients - 2 unrecorded readers
    beside its writer and reader."""
    busy = SCENARIOS[spec.scenario].program in ("busy-reads", "read-after-ack")
    return max(0, spec.clients - 2) if busy else 0


_Item = TypeVar("_Item")


def ddmin(items: Sequence[_Item], fails: Callable[[list[_Item]], bool]) -> list[_Item]:
    """Zeller's ddmin: a 1-minimal sublist of `items` (order kept) for which
    `fails` holds, given that it holds for `items` (removing any single
    element of the result makes it pass, unless `fails` ran out of budget).
    The empty list is tried first: often nothing of a kind is needed."""
    current = list(items)
    if not current:
        return current
    if fails([]):
        return []
    n = 2
    while len(current) >= 2:
        size = len(current)
        bounds = [size * i // n for i in range(n + 1)]
        chunks = [current[bounds[i] : bounds[i + 1]] for i in range(n)]
        for chunk in chunks:
            if chunk and fails(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(n):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if rest and len(rest) < size and fails(rest):
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= size:
                    break
                n = min(size, 2 * n)
    return current


class _Budget(Exception):
    """The shrink's run budget is spent: keep the best found so far."""


def shrink_ops(
    spec: Spec,
    *,
    schedule: str = "fifo",
    anomaly: str | None = None,
    max_runs: int = 400,
    progress: Callable[[str], None] | None = None,
) -> ShrunkScript | None:
    """Shrinks `spec` to a minimal script still showing `anomaly` (default:
    the original run's most specific one): first the greedy pass over its
    clients, size and faults (`shrink`), then ddmin over fault events,
    clients, statements and background readers, until a whole round removes
    nothing or `max_runs` scenario runs are spent. None if the original run
    shows no such anomaly.

    Raises:
        InvalidUsage: the spec is not virtual mode; the scripted replay of the
            coarse result no longer shows the anomaly (reported, not hidden).
    """
    if spec.mode != "virtual":
        raise InvalidUsage("operation-level shrinking needs virtual mode (a deterministic replay)")
    spec = replace(spec, schedule=schedule)
    policy = spec.schedule
    coarse = shrink(spec, anomaly=anomaly, max_runs=max(1, max_runs // 4), progress=progress)
    if coarse is None:
        return None
    target = coarse.anomaly
    runs = coarse.runs
    # The coarse spec's script first; if its timing-only replay loses the
    # anomaly (the program's own waits are gone), the original run's.
    scripts = [coarse.spec] if coarse.spec == spec else [coarse.spec, spec]
    tried: dict[Script, tuple[History, Report] | None] = {}

    def fails(candidate: Script) -> bool:
        nonlocal runs
        if candidate in tried:
            return tried[candidate] is not None
        if runs >= max_runs:
            raise _Budget
        runs += 1
        try:
            h, ev = run_script(candidate)
        except Exception:  # a candidate the system cannot run does not reproduce it
            tried[candidate] = None
            return False
        r = check_history(h, ev)
        tried[candidate] = (h, r) if target in r.names else None
        if tried[candidate] is not None and progress is not None:
            progress(f"still {target} with {len(candidate.steps)} statements, "
                     f"{len(candidate.clients)} clients, faults={candidate.spec.faults}, "
                     f"background={candidate.background} ({h.n} ops)")
        return tried[candidate] is not None

    for source in scripts:
        script, _, _ = record_script(source, schedule=policy)
        runs += 1
        if fails(script):
            break
    else:
        raise InvalidUsage(
            f"the scripted replay of {spec.command()} no longer shows {target}: "
            "cannot shrink it by operations"
        )
    cur = script
    with contextlib.suppress(_Budget):
        before = None
        while cur != before:
            before = cur
            for items_of, build in _DIMENSIONS:
                kept = ddmin(items_of(cur), functools.partial(_still_fails, fails, build, cur))
                cur = build(cur, kept)
    found = tried[cur]
    assert found is not None  # every `cur` is a candidate `fails` accepted
    return ShrunkScript(target, spec, coarse.original_ops, coarse.spec, cur, found[0], found[1], runs)


def _still_fails(
    fails: Callable[[Script], bool], build: Callable[[Script, list[Any]], Script], base: Script, kept: list[Any]
) -> bool:
    return fails(build(base, kept))


def _with_faults(script: Script, faults: Sequence[Fault]) -> Script:
    return replace(script, spec=replace(script.spec, faults=FaultPlan(tuple(faults))))


def _only_clients(script: Script, clients: Sequence[tuple[str, int]]) -> Script:
    keep = set(clients)
    return replace(script, steps=tuple(s for s in script.steps if (s.client, s.index) in keep))


def _with_steps(script: Script, steps: Sequence[Step]) -> Script:
    return replace(script, steps=tuple(steps))


def _with_readers(script: Script, readers: Sequence[int]) -> Script:
    return replace(script, background=len(readers))


#: What ddmin cuts, in order: fault events, whole clients, single statements,
#: background readers; each as (the items of a script, the script keeping some).
_DIMENSIONS: Final[tuple[tuple[Callable[[Script], Sequence[Any]], Callable[[Script, list[Any]], Script]], ...]] = (
    (lambda s: s.spec.faults.faults, _with_faults),
    (lambda s: s.clients, _only_clients),
    (lambda s: s.steps, _with_steps),
    (lambda s: range(s.background), _with_readers),
)


# --- Scenario files: what `shrink_ops` writes and `coordsim anomalies run --scenario` reads


def script_file(result: ShrunkScript, *, rerun: str) -> str:
    """The text of a scenario file reproducing `result`: a program playing its
    steps (`coordsim run` and `coordsim anomalies run --scenario` load it as
    any `async def scenario(sim)` file), and `RUN`, the settings it
    reproduces under, which `anomalies run` takes as its defaults."""
    s = result.script
    spec = s.spec
    run_settings = {
        "scenario": spec.scenario,
        "config": spec.config,
        "seed": spec.seed,
        "known_bad": [k.replace("_", "-") for k in spec.known_bad.enabled()],
        "faults": str(spec.faults),
        "schedule": s.schedule,
    }
    lines = [
        f'"""A minimal reproduction of {result.anomaly}: {len(s.steps)} statements by '
        f"{len(s.clients)} clients ({result.history.n} operations, from {result.original_ops}),",
        "found by `coordsim anomalies shrink` (delta debugging over statements, clients",
        "and fault events) from:",
        "",
        f"    {result.original.command()}",
        "",
        "Rerun:",
        "",
        f"    {rerun}",
        '"""',
        "",
        "from sim.load.driver import Step",
        "",
        "#: The run it reproduces under (`coordsim anomalies run` options override these).",
        f"RUN = {run_settings!r}",
        "",
        "#: (client, client index, start no earlier than this many s into the run, SQL).",
        "STEPS = (",
        *(f"    Step({st.client!r}, {st.index}, {st.at_s!r}, {st.sql!r})," for st in s.steps),
        ")",
        "#: Unrecorded readers on the newest coordinator while the steps run (busy-reads).",
        f"BACKGROUND = {s.background}",
        "",
        "",
        "async def scenario(sim):",
        "    await sim.play(STEPS, background=BACKGROUND)",
        "",
    ]
    return "\n".join(lines)


#: The keys of a scenario file's `RUN`, and the types they must have.
RUN_KEYS: Final = {"scenario": str, "config": str, "seed": int, "known_bad": list,
                   "faults": str, "schedule": str}


def load_scenario_file(path: Path) -> tuple[Program, dict[str, Any]]:
    """The program of a `.py` scenario file and its `RUN` settings ({} if it
    has none), as `sim.load.scenarios.load` loads it.

    Raises:
        InvalidUsage: not a `.py` file, no `async def scenario(sim)`, or a
            malformed `RUN`.
    """
    from sim.load.scenarios import PythonScenario, load

    if not path.is_file():
        raise InvalidUsage(f"no scenario file {path}")
    if path.suffix != ".py":
        raise InvalidUsage(
            f"{path}: an anomaly run takes a .py scenario (`async def scenario(sim)`); "
            "TOML scenarios are load workloads for `coordsim run`"
        )
    loaded = load(str(path))
    assert isinstance(loaded, PythonScenario)
    settings = getattr(loaded.main, "__globals__", {}).get("RUN", {})
    if not isinstance(settings, dict):
        raise InvalidUsage(f"{path}: RUN must be a dict")
    for key, value in settings.items():
        kind = RUN_KEYS.get(key)
        if kind is None:
            raise InvalidUsage(f"{path}: unknown RUN key {key!r}; known: {', '.join(RUN_KEYS)}")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidUsage(f"{path}: RUN[{key!r}] must be a {kind.__name__}, got {value!r}")
    return loaded.main, dict(settings)
