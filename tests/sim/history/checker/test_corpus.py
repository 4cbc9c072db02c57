"""The hand-written corpus: each EDN file under tests/data/histories states the
verdict every checker must reach in a `;; expect:` line (omitted = valid)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.history.checker.run import check_history
from sim.history.edn import loads_all
from sim.history.export import history_to_edn
from sim.history.import_edn import history_from_edn, read_edn
from sim.history.model import HistoryError

DATA = Path(__file__).resolve().parents[3] / "data" / "histories"
CASES = sorted(DATA.glob("*.edn"))
MALFORMED = sorted((DATA / "malformed").glob("*.edn"))


def _expected(path: Path) -> dict[str, str]:
    for line in path.read_text().splitlines():
        if line.startswith(";; expect:"):
            words = line.removeprefix(";; expect:").split()
            return dict(w.split("=", 1) for w in words if "=" in w)
    raise AssertionError(f"{path.name} has no ';; expect:' line")


def _actual(path: Path) -> dict[str, str]:
    h, events = read_edn(path)
    report = check_history(h, events)
    out = {}
    for v in report.verdicts:
        if v.skipped:
            out[v.checker] = "valid"  # nothing to judge (no timestamps, no events): see its coverage
        elif v.checker == "named":
            out[v.checker] = ",".join(v.names) or "valid"
        else:
            out[v.checker] = v.outcome.value
    return out


def test_corpus_is_not_empty() -> None:
    assert len(CASES) >= 20
    assert len(MALFORMED) >= 4


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_verdicts(path: Path) -> None:
    expected = _expected(path)
    actual = _actual(path)
    want = {c: expected.get(c, "valid") for c in actual}
    assert actual == want


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_is_judged_in_full(path: Path) -> None:
    """Every operation of the corpus is judged by some checker, so a history
    is invalid iff a checker is expected to find an anomaly, and else valid
    (never unknown)."""
    h, events = read_edn(path)
    report = check_history(h, events)
    assert report.complete, report.coverage_lines()
    anomalous = any(v == "invalid" or k == "named" for k, v in _expected(path).items())
    assert report.outcome.value == ("invalid" if anomalous else "valid")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_edn_round_trip_keeps_the_history(path: Path) -> None:
    h, _ = read_edn(path)
    again, _ = history_from_edn(loads_all(history_to_edn(h)))
    assert list(again.ops()) == list(h.ops())


@pytest.mark.parametrize("path", MALFORMED, ids=[p.stem for p in MALFORMED])
def test_malformed_histories_are_rejected_with_a_clear_error(path: Path) -> None:
    def load_and_check() -> None:
        h, events = read_edn(path)
        check_history(h, events)

    with pytest.raises(HistoryError) as err:
        load_and_check()
    assert "\n" not in str(err.value)
    assert str(path.name) in str(err.value) or "op " in str(err.value)


def test_anomalies_explain_themselves_in_words() -> None:
    h, events = read_edn(DATA / "seed001-stale-read.edn")
    report = check_history(h, events)
    named = next(v for v in report.verdicts if v.checker == "named")
    (a,) = named.anomalies
    assert a.name == "stale-read"
    assert a.ops == (1, 2)
    assert "misses {1}" in a.explanation
    assert "acknowledged at" in a.explanation
    bb = next(v for v in report.verdicts if v.checker == "blackbox")
    assert "cycle" in bb.anomalies[0].explanation
