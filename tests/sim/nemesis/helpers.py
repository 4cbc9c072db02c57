"""Running scenarios over seeds and reporting failures with their replay commands."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from sim.history.checker import CHECKERS, check_history
from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from coordinator.config import KnownBad
    from sim.history.checker.run import Report

@dataclass(frozen=True)
class ExpectedFinding:
    """An anomaly a correct design really produces (a finding about the design,
    not a bug of the simulator): `name`, with `text` in its explanation. The
    known-bad matrix asserts it is *found* (sim/nemesis/matrix.py,
    tests/sim/nemesis/test_matrix.py); a sweep passes over it and fails on any
    other anomaly, including a different one of the same name."""

    name: str
    text: str
    why: str


#: (scenario, config) -> the finding it shows.
EXPECTED_FINDINGS: Final[Mapping[tuple[str, str], ExpectedFinding]] = MappingProxyType({
    ("split-brain", "event-loop+pg-oracle"): ExpectedFinding(
        "not-strict-serializable", "catalog timeline",
        "without confirm_leadership the deposed coordinator keeps stamping its stale catalog_ts "
        "(tests/sim/nemesis/test_findings.py)",
    ),
    # Issue 38: clock-skew runs ddl-dml beside a second coordinator, so it
    # shows the same split-brain finding, whatever the clocks do.
    ("clock-skew", "event-loop+pg-oracle"): ExpectedFinding(
        "not-strict-serializable", "catalog timeline",
        "the split brain clock-skew needs: the deposed coordinator's stale catalog_ts, as in split-brain",
    ),
})


def unexpected_names(report: Report, finding: ExpectedFinding | None) -> list[str]:
    """`report`'s anomaly names, less the expected finding's — which counts as
    expected only if every anomaly of that name was kept and matches it."""
    names = set(report.names)
    if finding is not None and finding.name in names:
        of_name = [a for v in report.verdicts for a in v.anomalies if a.name == finding.name]
        total = sum(v.counts.get(finding.name, 0) for v in report.verdicts)
        if len(of_name) == total and all(finding.text in a.explanation for a in of_name):
            names.discard(finding.name)
    return sorted(names)


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
    chosen = checkers or CHECKERS
    expected = EXPECTED_FINDINGS.get((scenario, config)) if known_bad is None else None
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
        names = unexpected_names(report, expected) + (["internal-error"] if internal else [])
        if names:
            first = next((a.explanation for v in report.verdicts for a in v.anomalies), "")
            if internal and not first:
                first = f"op {internal[0].op_id}: XX000 {internal[0].error}"
            out.append(Finding(seed, names, spec.command(), first[:300]))
            print(out[-1])
            if stop_on is not None and stop_on & set(names):
                break
    return out
