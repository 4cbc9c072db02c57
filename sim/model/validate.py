"""`coordsim validate`: the model held to what the seeds' system has published.

Each fact of `sim/model/facts.toml` names an experiment of `sim/model/experiments.py`
(virtual mode, fixed seeds, the shipped calibrated profile), the metric it
reads, the published value, and the two-sided band, derived from the source,
that counts as holding. Each fact is either a calibration fact (a constant
was set from it: it shows the calibration took) or a validation fact
(nothing was set from it: it tests the model), never both, and the two are
reported apart. A validation fact that does not hold is a finding about the
model, never a reason to move a constant: the table says so and the command
exits 1.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

from coordinator.config import named
from sim.load.latency_profile import with_profile_cores
from sim.load.run_config import DEFAULT_PROFILE, coerce_override
from sim.model import experiments as ex
from sim.model.facts import FACTS
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from coordinator.config import CoordinatorConfig

__all__ = ["EXPERIMENTS", "ROLES", "Fact", "Outcome", "band_text", "load_facts", "number_text", "run_fact", "table_lines"]

#: A fact's role, in the order reports list them.
ROLES: Final = ("calibration", "validation")


@final
@dataclass(frozen=True)
class Fact:
    """One published fact and how the model is checked against it."""

    id: str
    role: str  # one of ROLES
    claim: str
    source: str
    mechanism: str
    experiment: str
    metric: str
    published: str
    between: tuple[float, float]
    band_reason: str
    params: Mapping[str, Any] = field(default_factory=dict)
    quick: bool = False

    def holds(self, value: float) -> bool:
        """Whether `value` is inside the band, both ends inclusive (NaN never is)."""
        lo, hi = self.between
        return not math.isnan(value) and lo <= value <= hi


@final
@dataclass(frozen=True)
class Outcome:
    """A fact's simulated value, whether it holds, and the measurements behind it."""

    fact: Fact
    value: float
    holds: bool
    detail: str


def _config(name: str, overrides: Mapping[str, Any] | None = None) -> CoordinatorConfig:
    """The named configuration as a run on the shipped profile gets it (the
    profile's cores for the decoupled adapter), with `overrides` on top."""
    cfg = with_profile_cores(named(name), DEFAULT_PROFILE)
    if overrides:
        cfg = cfg.with_overrides(**{k: coerce_override(k, v) for k, v in overrides.items()})
    return cfg


def _throughput_ratio(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    base = ex.throughput(_config(p["baseline"]), p["workload"], clients=p["clients"])
    cand = ex.throughput(_config(p["candidate"]), p["workload"], clients=p["clients"])
    ratio = cand.ops_per_s / base.ops_per_s if base.ops_per_s else math.nan
    detail = (f"{p['workload']} at {p['clients']} clients: {p['baseline']} {base.ops_per_s:,.0f} ops/s "
              f"(p50 {base.latency.p50_ms:.2f} ms, n={base.latency.n}), {p['candidate']} {cand.ops_per_s:,.0f} ops/s "
              f"(p50 {cand.latency.p50_ms:.2f} ms, n={cand.latency.n})")
    return {"ratio": ratio, "p50_ratio": cand.latency.p50_ms / base.latency.p50_ms}, detail


def _mechanism_share(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """The share of the baseline → candidate throughput difference that one
    mechanism (the `overrides`, applied to the baseline alone) produces."""
    base = ex.throughput(_config(p["baseline"]), p["workload"], clients=p["clients"])
    one = ex.throughput(_config(p["baseline"], p["overrides"]), p["workload"], clients=p["clients"])
    cand = ex.throughput(_config(p["candidate"]), p["workload"], clients=p["clients"])
    total = cand.ops_per_s - base.ops_per_s
    share = (one.ops_per_s - base.ops_per_s) / total if total else math.nan
    knobs = ", ".join(f"{k}={v}" for k, v in p["overrides"].items())
    detail = (f"{p['workload']} at {p['clients']} clients: {p['baseline']} {base.ops_per_s:,.0f}, "
              f"+{knobs} {one.ops_per_s:,.0f}, {p['candidate']} {cand.ops_per_s:,.0f} ops/s")
    return {"share": share}, detail


def _writes_per_commit(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    overrides = p.get("overrides", {})
    r = ex.writes_per_commit(_config(p["config"], overrides), clients=p["clients"],
                             statement=p.get("statement", "insert"))
    knobs = "".join(f", {k}={v}" for k, v in overrides.items())
    detail = (f"{p['config']}{knobs}, {p['clients']} clients x 10 {p.get('statement', 'insert')}s: "
              f"{r.writes_per_commit:.2f} writes/commit, {r.ops_per_s:,.0f} ops/s, "
              f"{r.loop_messages_per_op:.2f} loop messages/op")
    return {"writes_per_commit": r.writes_per_commit, "ops_per_s": r.ops_per_s}, detail


def _batched_read_ts(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    r = ex.batched_read_ts(callers=p["callers"], round_trip_ms=p.get("round_trip_ms", 1.0))
    detail = (f"{p['callers']} callers, {r.calls:,} read_ts calls, {r.backing_queries:,} backing queries; "
              f"wait p50 {r.p50_wait_round_trips:.2f}, max {r.max_wait_round_trips:.2f} round trips")
    return {"queries_per_round_trip": r.queries_per_round_trip, "max_wait_round_trips": r.max_wait_round_trips,
            "p50_wait_round_trips": r.p50_wait_round_trips}, detail


def _victim(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """Seed 000 / PR #37363's victim: `SELECT 1` beside `inserters`, with the
    oracle's calls where `oracle_calls` says and every oracle statement taking
    `oracle_ms` (unset: the profile's)."""
    slow = {"oracle.pg": p["oracle_ms"]} if "oracle_ms" in p else None
    overrides = {**p.get("overrides", {}), "oracle_calls": p["oracle_calls"]}
    r = ex.victim_select_one(_config(p["config"], overrides), inserters=p["inserters"], overrides_ms=slow,
                             duration_s=float(p.get("duration_s", 30.0)))
    knobs = ", ".join(f"{k}={v}" for k, v in overrides.items())
    oracle = f"{p['oracle_ms']:g} ms oracle" if slow else "the profile's oracle"
    detail = (f"{p['config']} ({knobs}), SELECT 1 beside {p['inserters']} inserters, {oracle}: p50 "
              f"{r.victim.p50_ms:,.3f} / p95 {r.victim.p95_ms:,.3f} ms (n={r.victim.n}); "
              f"{r.inserts:,} inserts, {r.writes_per_commit:.2f} writes/commit")
    return {"p50_ms": r.victim.p50_ms, "p95_ms": r.victim.p95_ms}, detail


def _throughput(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    overrides = p.get("overrides", {})
    r = ex.throughput(_config(p["config"], overrides), p["workload"], clients=p["clients"])
    knobs = "".join(f", {k}={v}" for k, v in overrides.items())
    detail = (f"{p['config']}{knobs}, {p['workload']} at {p['clients']} clients: {r.ops_per_s:,.0f} ops/s "
              f"(p50 {r.latency.p50_ms:.2f} ms, n={r.latency.n}), {r.loop_messages_per_op:.2f} loop messages/op, "
              f"{r.errors} errors")
    return {"ops_per_s": r.ops_per_s, "loop_messages_per_op": r.loop_messages_per_op}, detail


def _loop_cap(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    from dataclasses import replace

    cfg = _config(p["config"])
    cfg = replace(cfg, costs=replace(cfg.costs, parse_plan=p["parse_plan_ms"] / 1000))
    r = ex.throughput(cfg, "select-constant", clients=p["clients"])
    detail = (f"{p['config']}, SELECT 1 at {p['clients']} clients, parse_plan {p['parse_plan_ms']:g} ms: "
              f"{r.ops_per_s:,.1f} ops/s (p50 {r.latency.p50_ms:,.1f} ms, n={r.latency.n})")
    return {"ops_per_s": r.ops_per_s}, detail


#: DDLs timed at each catalog size when a slope is measured. A CREATE TABLE is
#: a dozen drawn round trips (`ddl_round_trips`), so the p50 of 20 moves by a
#: few tenths of a ms from seed to seed: 0.2-0.6 us per table at 500-2,000
#: tables, as much as the linearity check allows. 100 divide that by about 2.
SLOPE_REPS: Final = 100


def _ddl_growth(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """How fast DDL's p50 grows with the tables in the catalog (the audit's
    slope, µs per table), per statement kind: from an empty catalog to one
    padded with `padding` tables. (The audit pads to 5,000; padding costs the
    simulator quadratic wall time, and the slope is what the facts carry.)"""
    cfg = _config(p["config"], p.get("overrides", {}))
    n = p["padding"]
    empty, padded = (ex.ddl_latency(cfg, padding=k, reps=SLOPE_REPS) for k in (0, n))
    create = (padded.create.p50_ms - empty.create.p50_ms) * 1000 / n
    drop = (padded.drop.p50_ms - empty.drop.p50_ms) * 1000 / n
    detail = (f"{p['config']}, {padded.create.n} DDLs of each kind: CREATE TABLE p50 {empty.create.p50_ms:.3f} -> "
              f"{padded.create.p50_ms:.3f} ms, DROP TABLE {empty.drop.p50_ms:.3f} -> {padded.drop.p50_ms:.3f} ms "
              f"(0 -> {n:,} tables)")
    return {"create_us_per_table": create, "drop_us_per_table": drop}, detail


def _oracle_traffic(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """PR #37706's count of oracle queries, with the oracle's calls where
    `oracle_calls` says (the era)."""
    overrides = {**p.get("overrides", {}), "oracle_calls": p["oracle_calls"]}
    r = ex.oracle_traffic(_config(p["config"], overrides), inserters=p["inserters"],
                          duration_s=float(p.get("duration_s", 30.0)))
    knobs = ", ".join(f"{k}={v}" for k, v in overrides.items())
    detail = (f"{p['config']} ({knobs}), {p['inserters']} inserters: {r.queries_per_s:,.2f} oracle queries/s, "
              f"{r.commits_per_s:,.2f} group commits/s, {r.queries_per_commit:.2f} queries per commit")
    return {"queries_per_s": r.queries_per_s, "queries_per_commit": r.queries_per_commit}, detail


def _subscribe_starts(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """PR #37355's reproducer: `subscribers` SUBSCRIBEs started together, every
    oracle statement taking `oracle_ms`, in the era `oracle_calls` names."""
    overrides = {**p.get("overrides", {}), "oracle_calls": p["oracle_calls"]}
    r = ex.subscribe_starts(_config(p["config"], overrides), subscribers=p["subscribers"],
                            overrides_ms={"oracle.pg": p["oracle_ms"]})
    knobs = ", ".join(f"{k}={v}" for k, v in overrides.items())
    detail = (f"{p['config']} ({knobs}), {p['subscribers']} SUBSCRIBEs at once, {p['oracle_ms']:g} ms oracle, "
              f"{r.rounds} rounds: the last answers after {r.last_ms:,.0f} ms on average; each start p50 "
              f"{r.starts.p50_ms:,.0f} / p95 {r.starts.p95_ms:,.0f} ms (n={r.starts.n})")
    return {"last_ms": r.last_ms}, detail


#: The latency names of every backend round trip (the oracle, the stash
#: catalog, persist's consensus) that a slow metadata store slows.
BACKEND_LATENCIES: Final = ("oracle.pg", "stash.txn", "catalog.stash.txn", "consensus")


def _backend_round_trips(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """Issue #24395's session: every backend round trip (`BACKEND_LATENCIES`)
    takes `backend_ms`; each statement kind's p50. An operation is one round
    trip unless `round_trips` (latency name -> round trips per operation, as
    the era's code makes them) says more: its latency is that many times
    `backend_ms`."""
    overrides = {**p.get("overrides", {}), "oracle_calls": p["oracle_calls"]}
    ms = float(p["backend_ms"])
    per_op = {**dict.fromkeys(BACKEND_LATENCIES, 1.0), **p.get("round_trips", {})}
    # Parents first: a name replaces its more specific names (`experiments.latency_model`).
    r = ex.statement_latencies(_config(p["config"], overrides),
                               overrides_ms={k: ms * per_op[k] for k in sorted(per_op, key=lambda k: k.count("."))})
    knobs = ", ".join(f"{k}={v}" for k, v in overrides.items())
    more = "".join(f", {k} {v:g} round trips" for k, v in p.get("round_trips", {}).items())
    detail = (f"{p['config']} ({knobs}), every backend round trip {ms:g} ms{more}: p50 " + ", ".join(
        f"{k} {v.p50_ms:,.0f} ms ({v.p50_ms / ms:.1f} round trips, n={v.n})" for k, v in r.items()))
    metrics = {f"{k}_ms": v.p50_ms for k, v in r.items()}
    metrics.update({f"{k}_round_trips": v.p50_ms / ms for k, v in r.items()})
    return metrics, detail


#: How far two measured slopes may differ before `_ddl_at_scale` refuses to
#: extrapolate: the model's DDL cost has only terms linear in the catalog's
#: size, and this checks that it still has.
LINEAR_WITHIN: Final = 0.10


def _ddl_at_scale(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """CREATE TABLE's p50 on a catalog of `objects` entries, end to end as the
    fact's configuration says (its frontend included). Padding a catalog entry
    by entry costs the simulator quadratic wall time (28,000 tables would take
    most of an hour), so: the p50 at an empty catalog (200 DDLs), plus the
    slope per entry, which is measured without the frontend (whose draws would
    drown it) at `padding` and at 2 x `padding` tables. With one session on an
    idle loop, the catalog's size adds the same CPU to every DDL, so it shifts
    the p50 by exactly that. The two slopes must agree within `LINEAR_WITHIN`,
    or the metric is NaN (the fact fails, saying so)."""
    overrides = dict(p.get("overrides", {}))
    cfg = _config(p["config"], overrides)
    bare = _config(p["config"], {k: v for k, v in overrides.items() if k != "frontend"})
    n, objects = p["padding"], p["objects"]
    base = ex.ddl_latency(cfg, padding=0, reps=200).create
    if objects == 0:  # the empty catalog itself: no slope to carry
        return {"create_p50_ms": base.p50_ms, "create_p50_empty_ms": base.p50_ms}, (
            f"{p['config']}: CREATE TABLE p50 {base.p50_ms:.3f} ms on an empty catalog (n={base.n})")
    p50 = [ex.ddl_latency(bare, padding=k, reps=SLOPE_REPS).create.p50_ms for k in (0, n, 2 * n)]
    first, second = (p50[1] - p50[0]) / n, (p50[2] - p50[1]) / n
    linear = abs(first - second) <= LINEAR_WITHIN * max(abs(first), abs(second))
    value = base.p50_ms + second * objects if linear else math.nan
    detail = (f"{p['config']}: CREATE TABLE p50 {base.p50_ms:.3f} ms on an empty catalog (n={base.n}); without "
              f"the frontend {p50[0]:.3f} / {p50[1]:.3f} / {p50[2]:.3f} ms at 0 / {n:,} / {2 * n:,} tables, slopes "
              f"{first * 1000:.2f} and {second * 1000:.2f} us per table: "
              f"{'extended to' if linear else 'NOT linear, not extended to'} {objects:,} objects")
    return {"create_p50_ms": value, "create_p50_empty_ms": base.p50_ms}, detail


#: Experiment name → function of the fact's params → (metrics, one-line detail).
EXPERIMENTS: Final[dict[str, Callable[[Mapping[str, Any]], tuple[dict[str, float], str]]]] = {
    "throughput-ratio": _throughput_ratio,
    "mechanism-share": _mechanism_share,
    "writes-per-commit": _writes_per_commit,
    "batched-read-ts": _batched_read_ts,
    "victim": _victim,
    "loop-cap": _loop_cap,
    "ddl-growth": _ddl_growth,
    "throughput": _throughput,
    "oracle-traffic": _oracle_traffic,
    "ddl-at-scale": _ddl_at_scale,
    "subscribe-starts": _subscribe_starts,
    "backend-round-trips": _backend_round_trips,
}

_FIELDS: Final = ("id", "role", "claim", "source", "mechanism", "experiment", "metric", "published", "between",
                  "band_reason")


def load_facts(path: Path = FACTS) -> list[Fact]:
    """The facts of `path`; `InvalidUsage` naming the first bad entry."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidUsage(f"cannot read facts file {path}: {exc}") from exc
    out: list[Fact] = []
    for i, entry in enumerate(doc.get("fact", [])):
        missing = [f for f in _FIELDS if f not in entry]
        if missing:
            raise InvalidUsage(f"{path}: fact #{i + 1} lacks {', '.join(missing)}")
        if entry["experiment"] not in EXPERIMENTS:
            raise InvalidUsage(f"{path}: fact {entry['id']}: unknown experiment {entry['experiment']!r}; "
                               f"known: {', '.join(EXPERIMENTS)}")
        if entry["role"] not in ROLES:
            raise InvalidUsage(f"{path}: fact {entry['id']}: role must be one of {', '.join(ROLES)}, "
                               f"got {entry['role']!r}")
        band = entry["between"]
        if (not isinstance(band, list) or len(band) != 2
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in band)
                or not band[0] <= band[1]):
            raise InvalidUsage(f"{path}: fact {entry['id']}: between must be [lo, hi] with lo <= hi, got {band!r}")
        if not str(entry["band_reason"]).strip():
            raise InvalidUsage(f"{path}: fact {entry['id']}: band_reason is empty")
        _check_round_trips(path, entry["id"], entry.get("params", {}).get("round_trips", {}))
        fields_ = {k: entry[k] for k in _FIELDS if k != "between"}
        out.append(Fact(**fields_, between=(float(band[0]), float(band[1])), params=entry.get("params", {}),
                        quick=bool(entry.get("quick", False))))
    ids = [f.id for f in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InvalidUsage(f"{path}: duplicate fact ids {', '.join(dup)}")
    return out


def _check_round_trips(path: Path, fact_id: str, round_trips: object) -> None:
    """A fact's `round_trips` (`backend-round-trips`): latency names to round
    trips per operation, each a number in (0, 1000)."""
    if not isinstance(round_trips, dict) or any(
        not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1000
        for k, v in round_trips.items()
    ):
        raise InvalidUsage(f"{path}: fact {fact_id}: round_trips must map latency names to numbers of round "
                           f"trips in (0, 1000), got {round_trips!r}")


def run_fact(fact: Fact, measured: dict[str, tuple[dict[str, float], str]] | None = None) -> Outcome:
    """Runs the fact's experiment and judges its metric. `measured`: the
    experiments already run in this validation, by experiment and params;
    facts that read different metrics of one experiment (issue #24395's
    session gives three) run it once. Every experiment is deterministic."""
    key = json.dumps([fact.experiment, fact.params], sort_keys=True)
    if measured is not None and key in measured:
        metrics, detail = measured[key]
    else:
        metrics, detail = EXPERIMENTS[fact.experiment](fact.params)
        if measured is not None:
            measured[key] = (metrics, detail)
    if fact.metric not in metrics:
        raise InvalidUsage(f"fact {fact.id}: experiment {fact.experiment} has no metric {fact.metric!r}; "
                           f"it gives {', '.join(metrics)}")
    value = metrics[fact.metric]
    return Outcome(fact, value, fact.holds(value), detail)


def table_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """validate.md's Markdown tables, one per role (the command prints the same
    in the house table style): fact | published | band | simulated | holds."""
    lines: list[str] = []
    for role in ROLES:
        group = [o for o in outcomes if o.fact.role == role]
        if not group:
            continue
        lines += [f"## {role.capitalize()} facts", "", "| fact | published | band | simulated | holds |",
                  "|---|---|---|---:|:---:|"]
        for o in group:
            lines.append(f"| {o.fact.id}: {o.fact.claim} | {o.fact.published} | {band_text(o.fact)} | "
                         f"{number_text(o.value)} | {'yes' if o.holds else '**no**'} |")
        lines.append("")
    return lines


def band_text(fact: Fact) -> str:
    """The band as printed: `[lo, hi]`."""
    lo, hi = fact.between
    return f"[{number_text(lo, 4, trim=True)}, {number_text(hi, 4, trim=True)}]"


def number_text(v: float, digits: int = 3, *, trim: bool = False) -> str:
    """`v` to `digits` significant figures as a person reads it: thousands
    separated, never in exponent notation (1,699, not 1.7e+03); `trim` drops
    trailing zeros (a band's written ends, not measured digits)."""
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    text = f"{round(v, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if trim and "." in text else text
