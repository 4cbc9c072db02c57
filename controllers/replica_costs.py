"""A simulated replica's modeled costs, each a named latency (`replica.*`):
the defaults below, unless the Runtime's latency model (a profile) names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sim.runtime.latency import Constant, LogNormal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sim.runtime.core import Runtime
    from sim.runtime.latency import Distribution

__all__ = ["REPLICA_LATENCIES", "replica_cost"]

#: The replica's default modeled costs (seconds), used for any name the
#: Runtime's latency model does not configure (itself or by a dotted prefix).
#: Engineering estimates, not measurements; `coordsim calibrate` or a latency
#: profile overrides them:
#: - `replica.command` / `replica.response`: one network hop between
#:   environmentd and clusterd in one availability zone: ~0.5 ms round trip,
#:   so a 0.25 ms median each way with a log-normal tail.
#: - `replica.peek`: fixed replica-side CPU of a peek (plan lookup, cursor into
#:   the arrangement, encoding the response): ~50 µs. Materialize serves indexed
#:   point lookups in a few ms end to end, most of it hops and the coordinator;
#:   the replica's CPU share is small, so the coordinator, the subject of the
#:   comparison, stays the bottleneck as it is in the seed's measurements.
#: - `replica.peek_row`: 1 µs per row read from the arrangement (~1M rows/s/core).
#: - `replica.hydrate_row`: 2 µs per snapshot row while building an arrangement
#:   (differential's arrangement building runs at roughly 0.5M rows/s/worker).
#: - `replica.maintain_row`: 5 µs per update while following a shard (small
#:   batches pay per-batch and per-frontier overhead: ~200k updates/s/worker).
REPLICA_LATENCIES: Final[Mapping[str, Distribution]] = {
    "replica.command": LogNormal(0.00025, 0.5),
    "replica.response": LogNormal(0.00025, 0.5),
    "replica.peek": LogNormal(0.00005, 0.3),
    "replica.peek_row": Constant(1e-6),
    "replica.hydrate_row": Constant(2e-6),
    "replica.maintain_row": Constant(5e-6),
}


def replica_cost(rt: Runtime, name: str) -> float:
    """One sample (seconds) of cost `name`: from the Runtime's latency model if it
    configures `name` or a dotted prefix of it, else from `REPLICA_LATENCIES`."""
    if rt.latency.configures(name):
        return rt.latency.distribution(name).sample(rt.rng)
    return REPLICA_LATENCIES[name].sample(rt.rng)
