"""Shrinking a failing scenario: fewer clients, fewer operations, fewer faults,
while the same anomaly still appears (in the spirit of QuickCheck's and
Hypothesis's shrinkers, greedily, over the scenario's own parameters).

The seed stays fixed: every candidate is a deterministic run, so the smallest
reproduction printed is replayable with its `Spec.command()`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, final

from sim.history.checker import check_history
from sim.nemesis.anomalies import run_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sim.history.checker.run import Report
    from sim.history.model import History
    from sim.nemesis.anomalies import Spec

__all__ = ["Shrunk", "primary_anomaly", "shrink"]

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
    return Shrunk(target, spec, best, best_h, best_r, runs)
