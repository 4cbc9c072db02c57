"""The known-bad variant this model cannot turn into an anomaly, and why —
a finding about the event loop, measured (printed with `-s`).

`fifo_event_loop`: every handler finishes the work a client depends on before
it replies (a DDL's controller commands, a write's group commit and
`apply_write`, a peek's confirm_leadership), and a reply is sent only after the
internal messages it depends on were queued. A client's next command therefore
arrives after them, so arrival order already is dependency order: priorities
decide who waits (latency under load), not what anyone sees. Seed 001 credits
the priorities with preventing its anomalies; in this model the credit belongs
to "reply last". A variant that replied first would be a different bug.

`peeks_skip_read_holds` (issue 21): every replica checks a read's `as_of`
against its since and answers "below since" rather than reading compacted
data, and the coordinator then peeks again at that since and linearizes — so
a peek that compaction overtook costs a retry, never an answer. The
`slow-reads` scenario keeps peeks in flight past the compaction window; the
test shows the retries happen (answers come later) and every checker stays valid.

`skip_epoch_fencing` on `decoupled` used to be here: every table and the
catalog are compare-and-append on persist, so the two coordinators' writes
stay in one order, but the deposed one still answers DDL from its stale
catalog (a DROP of a table created meanwhile fails 42P01), which the
timestamp-free table checker of issue 34 names; it is in the matrix now.

`coordinator_joins_read_ts` on `busy-reads` (caught on `read-after-ack`, see
the matrix): the joined read_ts *is* stale — a read's read_ts below the
write_ts of the insert acknowledged just before it, in every seed — but
busy-reads invokes the read at the very virtual instant the insert is
acknowledged, so the history cannot order the two, and a sound checker must
treat them as concurrent. read-after-ack starts the read 1 µs later and every
checker names it.

The test shows the variant is live (the histories' timing differs from the
correct configuration on the same seeds) and anomaly-free on those seeds, so a
change that makes it observable shows up here first (then it moves to
test_known_bad.py). `apply_write_before_append` used to be here too; checker 4
now catches it by the oracle's contract (tests/sim/nemesis/test_known_bad.py).
"""

from __future__ import annotations

import statistics

import pytest

from coordinator.config import KnownBad
from sim.history.checker import check_history
from sim.history.model import Kind, Op, Status
from sim.nemesis.anomalies import run_scenario
from sim.nemesis.anomaly_spec import parse_known_bad
from sim.nemesis.matrix import MATRIX
from tests.sim.nemesis.helpers import sweep

pytestmark = pytest.mark.virtual

SEEDS = range(3)


def _latencies(
    scenario: str, config: str, known_bad: KnownBad
) -> tuple[list[float], list[float], list[str]]:
    """Read and add latencies (ms) of ok operations over SEEDS, and any anomalies."""
    reads: list[float] = []
    adds: list[float] = []
    names: list[str] = []
    for seed in SEEDS:
        h, events = run_scenario(scenario, config, seed, known_bad=known_bad)
        names += check_history(h, events).names
        for i in range(h.n):
            o = h.op(i)
            if o.status is Status.OK and o.complete_ns is not None:
                ms = (o.complete_ns - o.invoke_ns) / 1e6
                if o.kind is Kind.READ:
                    reads.append(ms)
                elif o.kind is Kind.ADD:
                    adds.append(ms)
    return reads, adds, names


def _summary(xs: list[float]) -> str:
    p99 = sorted(xs)[min(len(xs) - 1, int(len(xs) * 0.99))]
    return f"mean {statistics.mean(xs):.3f} ms, p99 {p99:.3f} ms (n={len(xs)})"


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("fifo_event_loop", "event-loop"),
        ("fifo_event_loop", "event-loop+pg-oracle"),
    ],
)
@pytest.mark.parametrize(
    "scenario", ["busy-reads", pytest.param("ddl-dml", marks=pytest.mark.slow)]
)
def test_variant_changes_timing_but_not_results(variant: str, config: str, scenario: str) -> None:
    base_r, base_a, base_names = _latencies(scenario, config, KnownBad())
    bad_r, bad_a, bad_names = _latencies(scenario, config, parse_known_bad([variant]))
    print(
        f"\n{variant} on {config}, {scenario}, seeds {list(SEEDS)}:\n"
        f"  reads: correct {_summary(base_r)} | variant {_summary(bad_r)}\n"
        f"  adds:  correct {_summary(base_a)} | variant {_summary(bad_a)}"
    )
    assert not base_names, base_names
    assert not bad_names, f"{variant} produced {bad_names}: move it to test_known_bad.py"
    assert (base_r, base_a) != (bad_r, bad_a), f"{variant} had no effect at all on {config}"


#: Scenario x configuration pairs where the correct design itself has a
#: matrix finding (split brain on event-loop+pg-oracle: the deposed
#: coordinator stamps a stale catalog_ts): the variant's history there shows
#: the finding's anomaly whatever the variant does, so it is no evidence
#: either way and the pair is left out — by name, see the test below.
#: The correct design's own findings (a row without a variant that is caught;
#: the adapters' clean rows are variant-free too, but expected not caught).
_FINDINGS: frozenset[tuple[str, str]] = frozenset(
    (e.scenario, e.config) for e in MATRIX if e.variant is None and e.expect == "caught"
)


def _fifo_params() -> list[object]:
    cases = [("seed001", range(12), False), ("seed001-index", range(12), False), ("ddl-dml", range(100), True),
             ("crash-restart", range(100), True), ("split-brain", range(100), True)]
    return [
        pytest.param(scenario, config, seeds, id=f"{scenario}-{config}",
                     marks=[pytest.mark.slow] if slow else [])
        for scenario, seeds, slow in cases
        for config in ("event-loop", "event-loop+pg-oracle")
        if (scenario, config) not in _FINDINGS
    ]


@pytest.mark.parametrize(("scenario", "config", "seeds"), _fifo_params())
def test_fifo_event_loop_stays_valid(scenario: str, config: str, seeds: range) -> None:
    """The evidence behind the docstring: every checker, many seeds."""
    found = sweep(scenario, config, seeds, known_bad=parse_known_bad(["fifo_event_loop"]))
    assert not found, "\n".join(str(f) for f in found)


def test_only_the_matrix_finding_is_left_out_of_the_fifo_evidence() -> None:
    """The one pair not swept above is the correct design's own finding (seed
    3 of split-brain on event-loop+pg-oracle is caught without any variant)."""
    assert {("split-brain", "event-loop+pg-oracle")} == _FINDINGS


@pytest.mark.parametrize(
    ("variant", "scenario", "config"),
    [
        ("peeks_skip_read_holds", "slow-reads", "event-loop+pg-oracle"),
        ("peeks_skip_read_holds", "slow-reads", "decoupled"),
    ],
)
def test_matrix_variant_is_live_but_valid(variant: str, scenario: str, config: str) -> None:
    """Issue 21's uncaught entries: the histories differ from the correct
    configuration's on the same seeds (the toggle does something), and no
    checker names an anomaly (the matrix runs many more seeds)."""
    base_r, base_a, base_names = _latencies(scenario, config, KnownBad())
    bad_r, bad_a, bad_names = _latencies(scenario, config, parse_known_bad([variant]))
    print(
        f"\n{variant} on {config}, {scenario}, seeds {list(SEEDS)}:\n"
        f"  reads: correct {_summary(base_r)} | variant {_summary(bad_r)}"
    )
    assert not base_names, base_names
    assert not bad_names, f"{variant} produced {bad_names}: it is caught, update the matrix"
    assert (base_r, base_a) != (bad_r, bad_a), f"{variant} had no effect at all on {config}"


@pytest.mark.parametrize("config", ["event-loop+pg-oracle", "decoupled"])
def test_joined_read_ts_is_stale_but_unordered_on_busy_reads(config: str) -> None:
    """The evidence for the paragraph above: on busy-reads some read gets a
    read_ts below the write_ts of the insert its client saw acknowledged,
    yet it began exactly when that insert completed, and no checker may (or
    does) call it stale; on read-after-ack the same join is named."""
    stale: list[tuple[int, int]] = []
    for seed in SEEDS:
        h, events = run_scenario("busy-reads", config, seed,
                                 known_bad=parse_known_bad(["coordinator_joins_read_ts"]))
        assert not check_history(h, events).names
        last: Op | None = None
        for o in h.ops():
            if o.kind is Kind.ADD and o.status is Status.OK:
                last = o
            elif (o.kind is Kind.READ and o.status is Status.OK and last is not None
                  and o.read_ts is not None and last.write_ts is not None
                  and o.read_ts < last.write_ts):
                assert o.invoke_ns == last.complete_ns, (seed, o, last)
                stale.append((seed, o.op_id))
    assert stale, f"no read joined a stale read_ts on {config}: the paragraph above is out of date"
    first = next(e for e in MATRIX if (e.variant, e.scenario, e.config)
                 == ("coordinator_joins_read_ts", "read-after-ack", config)).bound - 1
    h, events = run_scenario("read-after-ack", config, first,
                             known_bad=parse_known_bad(["coordinator_joins_read_ts"]))
    assert "stale-read" in check_history(h, events).names
