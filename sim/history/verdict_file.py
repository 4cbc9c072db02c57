"""`verdict.json`: a checked history's verdict as a machine-readable document,
the analogue of Jepsen's `results.edn`, so scripts need not parse the report.

One builder serves `coordsim check`, `coordsim anomalies run` and `sweep`, so
the three write the same schema. A file is replaced only if coordsim recorded
writing it (`sim.runtime.owned_files.write_owned`): never one it did not write.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from sim.history.checker.verdict import Outcome
from sim.runtime.owned_files import write_owned

if TYPE_CHECKING:
    from pathlib import Path

    from sim.history.checker.run import Report
    from sim.history.checker.verdict import Verdict

__all__ = [
    "VERDICT_FILE",
    "VERDICT_SIGNATURE",
    "outcome_json",
    "verdict_document",
    "verdict_text",
    "write_verdict",
]

VERDICT_FILE: Final = "verdict.json"
#: The first key of every document, as `json.dumps(indent=2)` writes it (a
#: mark for readers: it proves nothing about who wrote a file).
VERDICT_SIGNATURE: Final = '"generator": "coordsim"'


def outcome_json(outcome: Outcome) -> bool | str:
    """Jepsen's convention for `:valid?`: true, false, or "unknown"."""
    if outcome is Outcome.VALID:
        return True
    if outcome is Outcome.INVALID:
        return False
    return "unknown"


def _checker(v: Verdict) -> dict[str, Any]:
    return {
        "name": v.checker,
        "seconds": v.seconds,
        "valid": outcome_json(v.outcome),
        # A skipped checker judged nothing; the overall verdict leaves it out.
        "skipped": v.skipped,
        "reason": v.reason,
        # Anomalies per name, including those past the kept `MAX_REPORTED`.
        "counts": dict(v.counts),
    }


def verdict_document(report: Report, *, trace: str | None, ops: int) -> dict[str, Any]:
    """The verdict of `report` as a JSON-ready dict.

    Keys: `valid` (true, false or "unknown"), `anomalies` (each kept anomaly:
    `name`, `checker`, `op_ids`, `explanation`), `checkers` (each run: `name`,
    `seconds`, `valid`, `skipped`, `reason`, `counts`), `anomaly_counts` (per
    name over all checkers, including anomalies not kept), `trace` (the checked
    trace or history, as the user named it; None if it was not written) and
    `ops` (operations in the history), and `coverage` (per table: the
    operations to judge, those judged and by which checker, and why the rest
    were not: issue 34; every writer of verdict.json carries it).
    """
    counts: dict[str, int] = {}
    for v in report.verdicts:
        for name, n in v.counts.items():
            counts[name] = counts.get(name, 0) + n
    return {
        "generator": "coordsim",
        "valid": outcome_json(report.outcome),
        "anomalies": [
            {
                "name": a.name,
                "checker": a.checker,
                "op_ids": list(a.ops),
                "explanation": a.explanation,
            }
            for v in report.verdicts
            for a in v.anomalies
        ],
        "checkers": [_checker(v) for v in report.verdicts],
        "anomaly_counts": dict(sorted(counts.items())),
        "trace": trace,
        "ops": ops,
        "coverage": report.coverage_json(),
    }


def verdict_text(doc: dict[str, Any]) -> str:
    """The document as written to disk and by `check --json` (one form, so
    the two can be compared byte for byte)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write_verdict(path: Path, doc: dict[str, Any]) -> None:
    """Writes `doc` to `path` atomically, and records it as coordsim's.

    Raises:
        InvalidUsage: `path` exists and is not provably a file coordsim wrote,
            or its output directory is being written by another run.
        OSError: the write failed.
    """
    text = verdict_text(doc)
    write_owned(path, lambda p: p.write_text(text, encoding="utf-8"))
