"""Running scenarios over seeds and reporting failures with their replay commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from sim.history.checker import CHECKERS, check_history
from sim.nemesis.anomalies import default_spec, run_spec

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from coordinator.config import KnownBad

#: Checkers left out for a (scenario, config), each for a reported issue that a
#: pinned test in test_pinned.py reproduces; the other checkers still run.
EXCLUDED: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    # A finding, not a bug: without confirm_leadership the deposed coordinator
    # keeps stamping its stale catalog_ts (tests/anomalies/test_findings.py).
    ("split-brain", "event-loop+pg-oracle"): ("replay",),
}


#: Seeds that crash the simulated system for a reported reason, each reproduced
#: by the pinned test named here; sweeps pass over them.
KNOWN_CRASHES: Final[dict[tuple[str, str, int], str]] = {}


@dataclass(frozen=True)
class Finding:
    seed: int
    names: list[str]
    command: str
    first: str

    def __str__(self) -> str:
        return f"seed {self.seed}: {', '.join(self.names)}\n    {self.first}\n    replay: {self.command}"


def sweep(
    scenario: str,
    config: str,
    seeds: Iterable[int],
    *,
    known_bad: KnownBad | None = None,
    checkers: Sequence[str] | None = None,
    stop_on: frozenset[str] | None = None,
) -> list[Finding]:
    """Runs `scenario` for each seed; returns the seeds with anomalies (all of
    them, or up to the first showing one of `stop_on`)."""
    chosen = checkers or [c for c in CHECKERS if c not in EXCLUDED.get((scenario, config), ())]
    out: list[Finding] = []
    for seed in seeds:
        if (scenario, config, seed) in KNOWN_CRASHES and known_bad is None:
            continue
        spec = default_spec(scenario, config, seed, known_bad=known_bad)
        try:
            history, events = run_spec(spec)
        except Exception as exc:
            # A crash of the simulated system is a finding too: say how to replay it.
            raise AssertionError(
                f"seed {seed} crashed: {exc!r}\n    replay: {spec.command()}"
            ) from exc
        report = check_history(history, events, checkers=chosen)
        # An internal error (XX000) is allowed by every checker — a failed
        # statement reveals nothing — but it is always a bug of the system.
        internal = [o for o in (history.op(i) for i in range(history.n)) if o.error_code == "XX000"]
        names = report.names + (["internal-error"] if internal else [])
        if names:
            first = next((a.explanation for v in report.verdicts for a in v.anomalies), "")
            if internal and not first:
                first = f"op {internal[0].op_id}: XX000 {internal[0].error}"
            out.append(Finding(seed, names, spec.command(), first[:300]))
            print(out[-1])
            if stop_on is not None and stop_on & set(names):
                break
    return out
