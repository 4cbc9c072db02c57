"""`coordsim validate`: the model held to what the seeds' system has published.

Each fact of `sim/model/facts.toml` names an experiment of `sim/model/experiments.py`
(virtual mode, fixed seeds, the shipped calibrated profile), the metric it
reads, and the published value or direction with the range that counts as
holding. A fact that does not hold is a finding about the model, never a
reason to move a constant: the table says so and the command exits 1.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from coordinator.config import named
from sim.load.config import coerce_override
from sim.model import experiments as ex
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from coordinator.config import CoordinatorConfig

__all__ = ["EXPERIMENTS", "FACTS", "Fact", "Outcome", "load_facts", "run_fact", "table_lines"]

#: The facts shipped with coordsim.
FACTS: Final = Path(__file__).with_name("facts.toml")


@final
@dataclass(frozen=True)
class Fact:
    """One published fact and how the model is checked against it."""

    id: str
    claim: str
    source: str
    mechanism: str
    experiment: str
    metric: str
    published: str
    expect: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    quick: bool = False

    def holds(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if "above" in self.expect and not value > self.expect["above"]:
            return False
        if "below" in self.expect and not value < self.expect["below"]:
            return False
        if "between" in self.expect:
            lo, hi = self.expect["between"]
            return bool(lo <= value <= hi)
        return True


@final
@dataclass(frozen=True)
class Outcome:
    """A fact's simulated value, whether it holds, and the measurements behind it."""

    fact: Fact
    value: float
    holds: bool
    detail: str


def _config(name: str, overrides: Mapping[str, Any] | None = None) -> CoordinatorConfig:
    cfg = named(name)
    if overrides:
        cfg = cfg.with_overrides(**{k: coerce_override(k, v) for k, v in overrides.items()})
    return cfg


def _throughput_ratio(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    base = ex.throughput(_config(p["baseline"]), p["workload"], clients=p["clients"])
    cand = ex.throughput(_config(p["candidate"]), p["workload"], clients=p["clients"])
    ratio = cand.ops_per_s / base.ops_per_s if base.ops_per_s else math.nan
    detail = (f"{p['workload']} at {p['clients']} clients: {p['baseline']} {base.ops_per_s:,.0f} ops/s "
              f"(p50 {base.latency.p50_ms:.2f} ms, n={base.latency.n}), {p['candidate']} {cand.ops_per_s:,.0f} ops/s "
              f"(p50 {cand.latency.p50_ms:.2f} ms, n={cand.latency.n})")  # fmt: skip
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
              f"+{knobs} {one.ops_per_s:,.0f}, {p['candidate']} {cand.ops_per_s:,.0f} ops/s")  # fmt: skip
    return {"share": share}, detail


def _writes_per_commit(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    overrides = p.get("overrides", {})
    r = ex.writes_per_commit(_config(p["config"], overrides), clients=p["clients"],
                             statement=p.get("statement", "insert"))  # fmt: skip
    knobs = "".join(f", {k}={v}" for k, v in overrides.items())
    detail = (f"{p['config']}{knobs}, {p['clients']} clients x 10 {p.get('statement', 'insert')}s: "
              f"{r.writes_per_commit:.2f} writes/commit, {r.ops_per_s:,.0f} ops/s, "
              f"{r.loop_messages_per_op:.2f} loop messages/op")  # fmt: skip
    return {"writes_per_commit": r.writes_per_commit, "ops_per_s": r.ops_per_s}, detail


def _batched_read_ts(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    r = ex.batched_read_ts(callers=p["callers"], round_trip_ms=p.get("round_trip_ms", 1.0))
    detail = (f"{p['callers']} callers, {r.calls:,} read_ts calls, {r.backing_queries:,} backing queries; "
              f"wait p50 {r.p50_wait_round_trips:.2f}, max {r.max_wait_round_trips:.2f} round trips")  # fmt: skip
    return {"queries_per_round_trip": r.queries_per_round_trip, "max_wait_round_trips": r.max_wait_round_trips}, detail


def _victim(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    slow = {"oracle.pg": p["oracle_ms"]}
    on = ex.victim_select_one(_config(p["config"], {"oracle_calls": "on-loop"}), inserters=p["inserters"],
                              overrides_ms=slow)  # fmt: skip
    off = ex.victim_select_one(_config(p["config"], {"oracle_calls": "off-loop"}), inserters=p["inserters"],
                               overrides_ms=slow)  # fmt: skip
    detail = (f"SELECT 1 beside {p['inserters']} inserters, {p['oracle_ms']:g} ms oracle: on-loop p50 "
              f"{on.victim.p50_ms:,.2f} / p95 {on.victim.p95_ms:,.2f} ms (n={on.victim.n}), off-loop p50 "
              f"{off.victim.p50_ms:,.3f} / p95 {off.victim.p95_ms:,.3f} ms (n={off.victim.n})")  # fmt: skip
    return {"p50_ratio": on.victim.p50_ms / off.victim.p50_ms, "p95_ratio": on.victim.p95_ms / off.victim.p95_ms}, detail


def _loop_cap(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    from dataclasses import replace

    cfg = _config(p["config"])
    cfg = replace(cfg, costs=replace(cfg.costs, parse_plan=p["parse_plan_ms"] / 1000))
    r = ex.throughput(cfg, "select-constant", clients=p["clients"])
    detail = (f"{p['config']}, SELECT 1 at {p['clients']} clients, parse_plan {p['parse_plan_ms']:g} ms: "
              f"{r.ops_per_s:,.1f} ops/s (p50 {r.latency.p50_ms:,.1f} ms, n={r.latency.n})")  # fmt: skip
    return {"ops_per_s": r.ops_per_s}, detail


#: Experiment name → function of the fact's params → (metrics, one-line detail).
EXPERIMENTS: Final[dict[str, Callable[[Mapping[str, Any]], tuple[dict[str, float], str]]]] = {
    "throughput-ratio": _throughput_ratio,
    "mechanism-share": _mechanism_share,
    "writes-per-commit": _writes_per_commit,
    "batched-read-ts": _batched_read_ts,
    "victim": _victim,
    "loop-cap": _loop_cap,
}

_FIELDS: Final = ("id", "claim", "source", "mechanism", "experiment", "metric", "published", "expect")


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
                               f"known: {', '.join(EXPERIMENTS)}")  # fmt: skip
        if not set(entry["expect"]) <= {"above", "below", "between"} or not entry["expect"]:
            raise InvalidUsage(f"{path}: fact {entry['id']}: expect takes above, below or between")
        out.append(Fact(**{k: entry[k] for k in _FIELDS}, params=entry.get("params", {}),
                        quick=bool(entry.get("quick", False))))  # fmt: skip
    ids = [f.id for f in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InvalidUsage(f"{path}: duplicate fact ids {', '.join(dup)}")
    return out


def run_fact(fact: Fact) -> Outcome:
    """Runs the fact's experiment and judges its metric."""
    metrics, detail = EXPERIMENTS[fact.experiment](fact.params)
    if fact.metric not in metrics:
        raise InvalidUsage(f"fact {fact.id}: experiment {fact.experiment} has no metric {fact.metric!r}; "
                           f"it gives {', '.join(metrics)}")  # fmt: skip
    value = metrics[fact.metric]
    return Outcome(fact, value, fact.holds(value), detail)


def table_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """validate.md's Markdown table (the command prints the same in the house table style): fact | published | simulated | holds."""
    lines = ["| fact | published | simulated | holds |", "|---|---|---:|:---:|"]
    for o in outcomes:
        lines.append(f"| {o.fact.id}: {o.fact.claim} | {o.fact.published} | {o.value:,.3g} | "
                     f"{'yes' if o.holds else '**no**'} |")  # fmt: skip
    return lines
