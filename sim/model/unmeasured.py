"""The one list of modeled costs that no measurement backs (DESIGN.md §10):
coordinator CPU (`coordinator.config.Costs`), the simulated replica
(`controllers.replica_costs.REPLICA_LATENCIES`) and the catalog feed, each with its
value and where that value comes from.

Everything else virtual mode draws, `coordsim calibrate` measures (see
`sim.model.calibrate.MEASURED`); `tests/sim/model/test_calibrate.py` fails when the model
draws a latency that is in neither list, or when a cost here has no source.
Values are read from where the model takes them, so this list cannot drift
from them; only the sources are written here. `python -m sim.model.unmeasured`
prints the list.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Final, final

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.runtime.latency import Constant, Distribution, LogNormal

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CALIBRATED_BY",
    "CATALOG_FEED",
    "COST_SOURCES",
    "FRONTEND_PGWIRE",
    "LATENCY_SOURCES",
    "PROFILE_LATENCIES",
    "REAL_MODE_TIMERS",
    "Unmeasured",
    "describe",
    "render",
    "unmeasured",
]

#: How long a committed catalog change takes to reach a controller's command
#: task (`coordinator/follow_catalog.py`). The profile carries it (it has no other
#: default): `coordsim calibrate` copies it from here into every profile it writes.
CATALOG_FEED: Final[Distribution] = LogNormal(0.002, 0.5)

#: A pgwire client's round trip and the adapter frontend's work for one
#: statement, off the loop (`coordinator.config.Frontend.PGWIRE`). Calibrated
#: on fact `select-one-unloaded-latency`: Materialize issue #29526 reports
#: `SELECT 1` at 100 qps (an open loop that does not load the loop) with p50
#: 4.21 ms and p95 36.24 ms; the median is the p50, sigma = ln(p95/p50)/1.645.
FRONTEND_PGWIRE: Final[Distribution] = LogNormal(0.00421, 1.309)

#: Unmeasured latencies whose only value is the one a profile gives them.
PROFILE_LATENCIES: Final[Mapping[str, Distribution]] = {
    "controller.catalog_feed": CATALOG_FEED,
    "frontend.pgwire": FRONTEND_PGWIRE,
}

#: The latencies real mode realizes each as one timer of the stock loop (the
#: simulated replica's two hops and the profile-only latencies): what a
#: profile's `[timer]` rounds (`sim.runtime.latency.TimerRealized`). Not the
#: replica's CPU (`replica.peek` and the per-row costs): those are summed and
#: held on its core pool, which real mode sleeps off in whole quanta
#: (`sim.runtime.cpu.CorePool.owe`), and a per-row draw rounded up to a
#: millisecond would charge a millisecond per row. Everything else real mode
#: measures: round trips to Postgres, which are I/O, not timers.
REAL_MODE_TIMERS: Final[tuple[str, ...]] = ("replica.command", "replica.response", *PROFILE_LATENCIES)

#: Where each unmeasured latency's value comes from.
LATENCY_SOURCES: Final[Mapping[str, str]] = {
    "controller.catalog_feed": (
        "assumed: order of magnitude between a persist PubSub push to the controller (sub-millisecond) "
        "and a listen that polls Consensus (a few ms); real mode models it too, so no backend can time it"
    ),
    "frontend.pgwire": (
        "calibrated on fact select-one-unloaded-latency (Materialize issue #29526: SELECT 1 at 100 qps, "
        "p50 4.21 ms, p95 36.24 ms): median 4.21 ms, sigma ln(36.24/4.21)/1.645; the model's own few "
        "hundred microseconds of loop time for SELECT 1 are counted twice, a 2-5 % overestimate"
    ),
    # The replica's own comment block (controllers/replica_costs.py) gives the reasoning.
    "replica.command": "assumed: one environmentd->clusterd hop in one availability zone, ~0.5 ms round trip",
    "replica.response": "assumed: as replica.command, the hop back",
    "replica.peek": (
        "assumed: replica-side CPU of a peek (plan lookup, cursor, encoding) ~50 us, small next to "
        "the few ms Materialize takes end to end for an indexed point lookup"
    ),
    "replica.peek_row": "assumed: ~1M rows/s/core read from an arrangement",
    "replica.hydrate_row": "assumed: differential builds arrangements at roughly 0.5M rows/s/worker",
    "replica.maintain_row": "assumed: ~200k updates/s/worker for small batches (per-batch and frontier overhead)",
}

_SCALED = (
    "; scaled, with every other cost, so that a staged SELECT holds the loop 1/5000 s "
    "(calibrated on fact select-throughput-loop-bound)"
)

#: Where each `Costs` field's default comes from. None is measured: the
#: simulator has no planner or sequencer whose CPU could be timed. The split
#: between handlers is assumed (`coordinator.config._WEIGHT_US`); the level is
#: calibrated on one published loop-bound SELECT rate
#: (`coordinator.config.LOOP_S_PER_SELECT`).
COST_SOURCES: Final[Mapping[str, str]] = {
    "parse_plan": "assumed weight 100 us: name resolution and planning of a one-table statement" + _SCALED,
    "peek_sequence": "assumed weight 50 us: choosing timestamps, read holds and building the peek" + _SCALED,
    "peek_finish": "assumed weight 20 us: buffering and routing one peek response" + _SCALED,
    "per_row": "assumed weight 0.5 us: copying and encoding one small row" + _SCALED,
    "write_sequence": "assumed weight 40 us: validating a write and queueing it for group commit" + _SCALED,
    "group_commit": "assumed weight 60 us: building one group commit's appends" + _SCALED,
    "ddl_sequence": (
        "assumed weight 500 us: a catalog transaction builds catalog state and derives controller commands"
        + _SCALED
    ),
    "controller_response": "assumed weight 10 us: one controller message (frontier or peek response)" + _SCALED,
    "loop_dispatch": "assumed weight 5 us: one receive from the loop's channels plus the dispatch" + _SCALED,
    "catalog_snapshot": "assumed weight 10 us: hand a session the current catalog (a shared pointer)" + _SCALED,
    "peek_stage": "assumed weight 10 us: resume a staged peek when its off-loop work is back" + _SCALED,
    "commit": "assumed weight 10 us: end a statement's implicit transaction" + _SCALED,
    "ddl_per_entry": (
        "calibrated: CREATE TABLE's p50 +23 ms with 5,000 tables in the catalog (Materialize "
        "test/envd-ddl-scalability/NOTES.md, 2026-05-15, tables padding), one slope for every DDL kind"
    ),
}

#: The published facts (`sim/model/facts.toml`) each calibrated value was set
#: from. Only facts of role "calibration" may appear here; a test holds it.
CALIBRATED_BY: Final[Mapping[str, tuple[str, ...]]] = {
    **{
        f"costs.{name}": ("select-throughput-loop-bound", "loop-messages-per-select")
        for name in COST_SOURCES
        if name != "ddl_per_entry"
    },
    "costs.ddl_per_entry": ("ddl-create-table-grows-with-catalog",),
    "frontend.pgwire": ("select-one-unloaded-latency",),
}


@final
@dataclass(frozen=True)
class Unmeasured:
    """One modeled cost no measurement backs."""

    name: str  # a latency name (`replica.peek`) or `costs.<field>`
    value: str  # as the model uses it, e.g. "100 us CPU" or "lognormal, median 0.25 ms, sigma 0.5"
    defined_in: str  # where the value lives (and where to change it)
    source: str


def describe(dist: Distribution) -> str:
    """A distribution as a person reads it."""
    if isinstance(dist, Constant):
        return f"{_us(dist.seconds)} each"
    if isinstance(dist, LogNormal):
        return f"lognormal, median {_us(dist.median)}, sigma {dist.sigma:g}"
    return str(dist.to_dict())


def _us(seconds: float) -> str:
    return f"{seconds * 1000:g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:g} us"


def unmeasured() -> list[Unmeasured]:
    """Every modeled cost no measurement backs, with its current value."""
    constant = {"controller.catalog_feed": "CATALOG_FEED", "frontend.pgwire": "FRONTEND_PGWIRE"}
    out = [
        Unmeasured(
            name, describe(dist),
            f"sim/model/unmeasured.py {constant.get(name, name)} (written into every calibrated profile)",
            LATENCY_SOURCES[name],
        )
        for name, dist in PROFILE_LATENCIES.items()
    ]
    out.extend(
        Unmeasured(
            name, describe(dist),
            "controllers/replica_costs.py REPLICA_LATENCIES (a profile entry of the same name overrides it)",
            LATENCY_SOURCES[name],
        )
        for name, dist in REPLICA_LATENCIES.items()
    )
    defaults = Costs()
    out.extend(
        Unmeasured(
            f"costs.{f.name}", f"{_us(getattr(defaults, f.name))} CPU",
            "coordinator/config.py Costs (a config file's [costs] table overrides it)",
            COST_SOURCES[f.name],
        )
        for f in fields(Costs)
    )
    return out


def render() -> str:
    """The list as text, one cost per paragraph."""
    lines = [
        "Modeled costs no measurement backs (`coordsim calibrate` measures the rest).",
        "A conclusion that flips when one of them is halved or doubled is fragile.",
        "",
    ]
    for u in unmeasured():
        lines += [f"{u.name}: {u.value}", f"    defined in: {u.defined_in}", f"    source: {u.source}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
