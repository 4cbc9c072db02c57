"""The known-bad matrix (issue 21): every `KnownBad` variant on the scenario
and configuration that expose it, run seed by seed until a checker names one of
its anomalies, plus the findings the correct designs show on their own.

Each entry states what it expects — caught within its measured bound, or not
caught (a variant no sound checker can name; its evidence is in
tests/sim/nemesis/test_uncaught_variants.py) — so `coordsim anomalies matrix`
can say whether the suite still has its teeth. Seeds run through the sweep's
`run_seed` on its process pool; the result is a function of the seeds alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, final

from coordinator.config import KnownBad
from sim.history.checker.verdict import Outcome
from sim.nemesis.sweep import CRASHED, SeedResult, SeedTask, sweep
from sim.runtime.errors import InvalidUsage
from sim.runtime.schedule import parse_schedule

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = [
    "HARNESS",
    "MATRIX",
    "MATRIX_JSON",
    "MATRIX_MD",
    "Entry",
    "EntryResult",
    "markdown",
    "run_entry",
    "run_matrix",
    "to_json",
]

MATRIX_MD: Final = "matrix.md"
MATRIX_JSON: Final = "matrix.json"
#: Who names what no checker does: a statement failed with XX000 (every
#: checker allows a failed statement, but it is a bug of the system), or the
#: run crashed or got stuck (`STUCK_AFTER_S`).
HARNESS: Final = "harness"
INTERNAL: Final = "internal-error"
STUCK: Final = "crashed"
#: Any of these counts as catching a variant that lets a reader see the past.
_STALE: Final = frozenset({"stale-read", "not-strict-serializable", "timestamp-regression"})
_UNKNOWN_TABLE: Final = frozenset({"insert-unknown-table", "select-unknown-table"})

Expect = Literal["caught", "not-caught"]


@final
@dataclass(frozen=True)
class Entry:
    """One row: `variant` (a `KnownBad` field; None for a finding of a correct
    design) on `scenario` x `config`. `bound` is the measured number of seeds
    to first detection (seeds 0 … bound-1), the claim tests hold it to;
    `expected` the names any of which counts. Bounds are `coordsim anomalies
    matrix --seeds 100 --jobs 2` measurements (issue 21's closing note;
    re-measured after issue 35's staged loop messages moved the schedule)."""

    variant: str | None
    scenario: str
    config: str
    expected: frozenset[str]
    bound: int
    expect: Expect = "caught"
    why: str = ""

    @property
    def label(self) -> str:
        if self.variant:
            return self.variant.replace("_", "-")
        return "(none: finding)" if self.expect == "caught" else "(none: clean)"

    def task(self, seed: int, *, schedule: str = "fifo") -> SeedTask:
        bad = (self.variant,) if self.variant else ()
        return SeedTask(self.scenario, self.config, seed, bad, parse_schedule(schedule))


def _caught(variant: str | None, scenario: str, config: str, expected: frozenset[str], bound: int,
            why: str) -> Entry:
    return Entry(variant, scenario, config, expected, bound, "caught", why)


#: A write acknowledged and then missing: every checker that can see it.
_LOST: Final = frozenset({"lost-write", "not-strict-serializable", "not-linearizable", "stale-read"})

#: Issue 36: the cross-adapter variants, the single-process variants whose
#: rule also spans adapters, and the correct design with 2 and 4 adapters
#: under every fault kind that acts in virtual mode (ddl-dml draws the
#: replica, oracle and store faults; the others are one kind each).
_ADAPTER_ROWS: Final[tuple[Entry, ...]] = (
    *(
        _caught("ack_lost_race", "ddl-dml", c, _LOST, bound,
                "a write whose append another adapter's commit beat is acknowledged, never written")
        for c, bound in (("decoupled-2-adapters", 2), ("decoupled-4-adapters", 2))
    ),
    *(
        _caught("stale_adapter_catalog", "seed001", c, _UNKNOWN_TABLE, bound,
                "c2's adapter plans the INSERT on a cache without the table c1's adapter created")
        for c, bound in (("decoupled-2-adapters", 1), ("decoupled-4-adapters", 1))
    ),
    _caught("apply_write_before_append", "seed001", "decoupled-2-adapters", frozenset({"timestamp-regression"}), 1,
            "a peek on one adapter is given a read_ts whose append from another is not yet durable"),
    _caught("no_write_lock", "update-race", "decoupled-2-adapters", frozenset({"not-strict-serializable"}), 1,
            "two adapters' UPDATEs read the same row and both retract it: a lost update"),
    _caught("blind_catalog_append", "ddl-dml", "decoupled-2-adapters",
            _UNKNOWN_TABLE | {"dropped-object-visible", "not-strict-serializable", "not-linearizable"}, 2,
            "a DDL planned on one adapter's stale cache silently undoes one committed on another"),
    *(
        Entry(None, sc, c, frozenset(), 0, "not-caught", f"the correct design with several adapters under {what}")
        for sc, what in (
            ("ddl-dml", "replica-slow, oracle-slow, replica-crash and store-errors"),
            ("crash-restart", "crash-restart of the whole deployment"),
            ("split-brain", "a second deployment started beside the first"),
            ("adapter-crash", "adapter-crash"),
            ("adapter-partition", "adapter-partition"),
            ("adapter-pause", "adapter-pause"),
        )
        for c in ("decoupled-2-adapters", "decoupled-4-adapters")
    ),
)

_REGRESSION: Final = frozenset({"timestamp-regression"})

#: Issue 38: the faults of time. The known-bad oracle that takes the caller's
#: clock without `GREATEST`'s floor is caught by checker 4 (timestamps never
#: regress) under each fault; the correct design stays clean under each, on
#: every configuration (but clock-skew on event-loop+pg-oracle, whose split
#: brain shows that configuration's finding below whatever the clocks do). A
#: step past persist's lease expires the process's own writers and readers;
#: each is reopened (a new id on the re-read state, as Materialize
#: re-registers an expired handle) and its operation retried, so that row is
#: clean too (it was a finding, a crash, until the reopen).
_TIME_ROWS: Final[tuple[Entry, ...]] = (
    *(
        _caught("unguarded_wall_clock", sc, c, _REGRESSION, bound, why)
        for sc, why, bounds in (
            ("clock-jump", "a clock stepped back (or back from a step forward) allocates below write_ts",
             (("event-loop", 2), ("event-loop+pg-oracle", 2), ("decoupled", 1))),
            ("clock-skew", "the process whose clock is behind allocates below the other's timestamps",
             (("event-loop", 2), ("event-loop+pg-oracle", 2), ("decoupled", 2), ("decoupled-2-adapters", 1))),
            ("clock-stall", "a stopped or slow clock repeats or undercuts the timestamps it just allocated",
             (("event-loop", 1), ("event-loop+pg-oracle", 4), ("decoupled", 1), ("decoupled-2-adapters", 1))),
        )
        for c, bound in bounds
    ),
    *(
        Entry(None, sc, c, frozenset(), 0, "not-caught", f"the correct design under {sc}: write_ts = GREATEST(write_ts + 1, clock)")
        for sc, configs in (
            ("clock-jump", ("event-loop", "event-loop+pg-oracle", "decoupled", "decoupled-2-adapters")),
            ("clock-skew", ("event-loop", "decoupled", "decoupled-2-adapters")),
            ("clock-stall", ("event-loop", "event-loop+pg-oracle", "decoupled", "decoupled-2-adapters")),
        )
        for c in configs
    ),
    *(
        Entry(None, "clock-jump-past-lease", c, frozenset(), 0, "not-caught",
              "the correct design after a 90 s step: persist's leases run on the process's clock, so its next "
              "state transition expires its own writers and readers; each is reopened and its operation "
              "retried (one refused as expired was not applied)")
        for c in ("event-loop", "event-loop+pg-oracle", "decoupled")
    ),
)

#: Issue 36, item 6: seed 000's live oracle switch-over on the
#: single-coordinator configurations (`coordinator.oracle_switch`). The correct
#: switch (the old oracle's calls drained, the new one fast-forwarded to its
#: timestamps before it serves, confirm_leadership kept; a successor started
#: above both implementations) stays clean, also across crash-restarts; the
#: switch that neither drains nor fast-forwards hands out timestamps below
#: those already handed out, and reads that miss acknowledged writes.
_SWITCH_ROWS: Final[tuple[Entry, ...]] = (
    *(
        _caught("unsynced_oracle_switch", "oracle-switch", c, _STALE | {"not-linearizable"}, bound,
                "the new oracle serves from its own state (the distributed oracle's row where the last switch "
                "left it, or 0; the in-memory one's persisted upper) while the old one's calls finish there")
        for c, bound in (("event-loop", 1), ("event-loop+pg-oracle", 1))
    ),
    *(
        Entry(None, sc, c, frozenset(), 0, "not-caught", f"the correct switch under {sc}: old calls drained, "
              "the new oracle fast-forwarded to the old one's read_ts and write_ts before it serves")
        for sc in ("oracle-switch", "oracle-switch-restart")
        for c in ("event-loop", "event-loop+pg-oracle")
    ),
)

MATRIX: Final[tuple[Entry, ...]] = (
    *(
        _caught("peeks_ignore_catalog_ts", sc, "decoupled", _UNKNOWN_TABLE, bound,
                "controllers serve a peek before their catalog reaches its catalog_ts")
        for sc, bound in (("seed001", 1), ("seed001-index", 19))
    ),
    _caught("skip_confirm_leadership", "split-brain", "event-loop", _STALE, 4,
            "the deposed coordinator answers reads without the durable check"),
    *(
        _caught("batching_joins_in_flight", "busy-reads", c, _STALE, bound,
                "a read_ts request joins a backing call that started before a write was applied")
        for c, bound in (("event-loop+pg-oracle", 2), ("decoupled", 2))
    ),
    *(
        _caught("apply_write_before_append", "seed001", c, frozenset({"timestamp-regression"}), 1,
                "apply_write(ts) starts before the append at ts is durable (oracle contract)")
        for c in ("event-loop", "event-loop+pg-oracle", "decoupled")
    ),
    *(
        Entry("fifo_event_loop", "busy-reads", c, frozenset(), 0, "not-caught",
              "replies follow the work they depend on, so arrival order is dependency order")
        for c in ("event-loop", "event-loop+pg-oracle")
    ),
    *(
        # The whitebox checker finds the row the second UPDATE read gone when its write
        # applies (a lost update); the double retraction also makes later
        # reads fail XX000 (harness: internal-error), which no checker counts.
        _caught("no_write_lock", "update-race", c, frozenset({"not-strict-serializable"}), 1,
                "two UPDATEs read the same row and both retract it: a lost update")
        for c in ("event-loop", "event-loop+pg-oracle", "decoupled")
    ),
    *(
        # Checker 4 over the table-append events: an append starting after a
        # later-timestamped one of the same coordinator completed. Only
        # overlapping write_ts calls reorder them, hence several seeds.
        _caught("unbounded_group_commits", "ddl-dml", c, frozenset({"timestamp-regression"}), bound,
                "overlapping commits' appends reach storage out of write_ts order")
        for c, bound in (("event-loop+pg-oracle", 1), ("decoupled", 1))
    ),
    _caught("skip_epoch_fencing", "split-brain", "event-loop", _STALE, 2,
            "two in-memory oracles hand out timestamps at once"),
    # Caught since issue 34's timestamp-free table checker: before it, no
    # checker modeled a failed DDL, and every table write is still ordered by
    # compare-and-append (seed 44: a DROP begun after its CREATE completed
    # fails 42P01 on the deposed coordinator's stale catalog).
    _caught("skip_epoch_fencing", "split-brain", "decoupled", frozenset({"not-linearizable"}), 45,
            "the deposed coordinator's stale catalog says a table created meanwhile does not exist"),
    _caught("blind_catalog_append", "ddl-dml", "decoupled",
            _UNKNOWN_TABLE | {"dropped-object-visible", "not-strict-serializable"}, 2,
            "a DDL planned on a stale catalog silently undoes one committed meanwhile"),
    *(
        # On busy-reads the stale answers happen too (a read's read_ts below
        # the write_ts of the insert acknowledged just before it, in every
        # seed), but the read is invoked at the very virtual instant the
        # insert is acknowledged, so no history can order the two and every
        # checker rightly stays silent. read-after-ack starts it 1 µs later.
        _caught("coordinator_joins_read_ts", "read-after-ack", c, _STALE, bound,
                "a read just after an acknowledged insert joins a read_ts answered before its apply_write")
        for c, bound in (("event-loop+pg-oracle", 2), ("decoupled", 2))
    ),
    *(
        Entry("peeks_skip_read_holds", "slow-reads", c, frozenset(), 0, "not-caught",
              "replicas check the since on every read: a peek compacted past is retried later")
        for c in ("event-loop+pg-oracle", "decoupled")
    ),
    _caught(None, "split-brain", "event-loop+pg-oracle", frozenset({"not-strict-serializable"}), 4,
            "without confirm_leadership the deposed coordinator stamps a stale catalog_ts"),
    *_ADAPTER_ROWS,
    *_TIME_ROWS,
    *_SWITCH_ROWS,
)


@final
@dataclass(frozen=True)
class EntryResult:
    """What the matrix measured for one entry: `first` the least seed whose run
    showed an expected name (None: none in `seeds`), and the anomalies named
    over the seeds run, per checker (`HARNESS` for XX000 and crashes).

    Coverage (issue 34): `unknown` seeds are those whose checkers left an
    operation unjudged; `to_judge`/`judged` sum the operations over the seeds.
    A not-caught claim holds only where everything was judged, so an entry
    expected not caught with an unknown seed is not as expected."""

    entry: Entry
    seeds: int
    first: int | None
    ops: int
    by_checker: dict[str, dict[str, int]] = field(default_factory=dict)
    unknown: tuple[int, ...] = ()
    to_judge: int = 0
    judged: int = 0

    @property
    def short(self) -> bool:
        """Fewer seeds ran than the entry's measured bound: "not caught" then
        says nothing against it (`--seeds 10` on a row caught at seed 44)."""
        return self.entry.expect == "caught" and self.first is None and self.seeds < self.entry.bound

    @property
    def as_expected(self) -> bool:
        if self.entry.expect == "caught":
            return self.first is not None or self.short
        return not self.by_checker and not self.unknown

    def coverage(self) -> str:
        """`judged/to-judge ops judged`, then which seeds were unknown."""
        text = f"{self.judged:,}/{self.to_judge:,} ops judged"
        if not self.unknown:
            return text
        shown = ", ".join(map(str, self.unknown[:10])) + (" …" if len(self.unknown) > 10 else "")
        return f"{text}; {len(self.unknown)} of {self.seeds} seeds unknown (seeds {shown})"

    def detection(self) -> str:
        if self.short:
            return f"not reached: {self.seeds} seeds run, caught at seed {self.entry.bound - 1}"
        if self.first is None:
            return f"not caught in {self.seeds}"
        return f"{self.first + 1} (seed {self.first})"

    def anomalies(self) -> str:
        parts = [f"{c}: " + ", ".join(f"{n} x{k}" for n, k in names.items())
                 for c, names in self.by_checker.items()]
        return "; ".join(parts) or "none"


def _names(r: SeedResult) -> dict[str, dict[str, int]]:
    """Anomaly counts per checker of one seed (the report is there for a
    failing seed, which is the only kind that has any)."""
    out: dict[str, dict[str, int]] = {}
    if r.report is not None:
        for v in r.report.verdicts:
            for name, n in v.counts.items():
                out.setdefault(v.checker, {})[name] = n
    if r.internal_errors:
        out.setdefault(HARNESS, {})[INTERNAL] = r.internal_errors
    if r.outcome == CRASHED:
        out.setdefault(HARNESS, {})[STUCK] = 1
    return out


def run_entry(
    entry: Entry,
    *,
    seeds: int,
    jobs: int,
    schedule: str = "fifo",
    on_seed: Callable[[SeedResult], None] | None = None,
) -> EntryResult:
    """Runs `entry` on seeds 0, 1, … (`jobs` at a time, in growing chunks) and
    stops after the chunk holding its first detection; a not-caught entry runs
    all `seeds`. `schedule` is the virtual loop's policy
    (`sim.runtime.schedule`: fifo, random, pct), drawn from each seed.

    Raises:
        InvalidUsage: `seeds` < 1 or an unknown variant, scenario, config or
            scheduling policy.
    """
    if seeds < 1:
        raise InvalidUsage(f"--seeds must be >= 1, got {seeds}")
    entry.task(0, schedule=schedule).spec()  # unknown names fail here, with the known ones
    by_checker: dict[str, dict[str, int]] = {}
    hits: list[int] = []
    ops = done = to_judge = judged = 0
    unknown: list[int] = []
    chunk = max(1, jobs)

    def seen(r: SeedResult) -> None:
        nonlocal to_judge, judged
        if on_seed is not None:
            on_seed(r)
        if r.outcome == Outcome.UNKNOWN.value:
            unknown.append(r.seed)
        to_judge += r.ops_to_judge
        judged += r.ops_judged
        names = _names(r)
        for checker, counts in names.items():
            acc = by_checker.setdefault(checker, {})
            for n, k in counts.items():
                acc[n] = acc.get(n, 0) + k
        if entry.expected & {n for counts in names.values() for n in counts}:
            hits.append(r.seed)

    while done < seeds and not (hits and entry.expect == "caught"):
        work = [entry.task(s, schedule=schedule) for s in range(done, min(seeds, done + chunk))]
        ops += sum(r.ops for r in sweep(work, jobs=jobs, on_result=seen))
        done += len(work)
        chunk *= 2
    return EntryResult(entry, done, min(hits) if hits else None, ops,
                       {c: dict(sorted(n.items())) for c, n in sorted(by_checker.items())},
                       tuple(sorted(unknown)), to_judge, judged)


def run_matrix(
    entries: Sequence[Entry] = MATRIX,
    *,
    seeds: int,
    jobs: int,
    schedule: str = "fifo",
    on_entry: Callable[[EntryResult], None] | None = None,
) -> list[EntryResult]:
    """Every entry in order (see `run_entry`)."""
    out = []
    for e in entries:
        out.append(run_entry(e, seeds=seeds, jobs=jobs, schedule=schedule))
        if on_entry is not None:
            on_entry(out[-1])
    return out


def _check_variants() -> None:
    """Every `KnownBad` toggle has a row: a new toggle without one fails here."""
    rows = {e.variant for e in MATRIX}
    missing = [f for f in KnownBad.__dataclass_fields__ if f not in rows]
    if missing:
        raise AssertionError(f"KnownBad toggles without a matrix entry: {', '.join(missing)}")


_check_variants()

COLUMNS: Final = ("variant", "scenario", "config", "expected", "seeds to first detection",
                  "anomalies by checker", "coverage")


def rows(results: Sequence[EntryResult]) -> list[tuple[str, ...]]:
    return [
        (r.entry.label, r.entry.scenario, r.entry.config,
         r.entry.expect if r.as_expected else f"{r.entry.expect} (NOT as expected)",
         r.detection(), r.anomalies(), r.coverage())
        for r in results
    ]


def markdown(results: Sequence[EntryResult], *, command: str) -> str:
    """matrix.md: the table, then why each entry's scenario exposes it."""
    lines = [f"# The known-bad matrix\n\n`{command}`\n",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows(results)]
    lines += ["", "Why each scenario exposes its variant:", ""]
    lines += [f"- {r.entry.label} / {r.entry.scenario} / {r.entry.config}: {r.entry.why}" for r in results]
    return "\n".join(lines) + "\n"


def to_json(results: Sequence[EntryResult], *, seeds: int, schedule: str = "fifo") -> dict[str, Any]:
    """matrix.json's document (no wall times: same seeds, same document)."""
    return {
        "seeds": seeds,
        "schedule": schedule,
        "as_expected": all(r.as_expected for r in results),
        "entries": [
            {
                "variant": r.entry.variant,
                "scenario": r.entry.scenario,
                "config": r.entry.config,
                "expect": r.entry.expect,
                "expected_names": sorted(r.entry.expected),
                "bound": r.entry.bound,
                "seeds_run": r.seeds,
                "first_detection_seed": r.first,
                "seeds_to_first_detection": None if r.first is None else r.first + 1,
                "ops": r.ops,
                "anomalies_by_checker": r.by_checker,
                "unknown_seeds": list(r.unknown),
                "ops_to_judge": r.to_judge,
                "ops_judged": r.judged,
                "as_expected": r.as_expected,
                "why": r.entry.why,
            }
            for r in results
        ],
    }


def write(
    directory: Path, results: Sequence[EntryResult], *, seeds: int, command: str, schedule: str = "fifo"
) -> None:
    """Writes matrix.md and matrix.json into `directory` (a staging directory)."""
    (directory / MATRIX_MD).write_text(markdown(results, command=command), encoding="utf-8")
    text = json.dumps(to_json(results, seeds=seeds, schedule=schedule), indent=2) + "\n"
    (directory / MATRIX_JSON).write_text(text, encoding="utf-8")
