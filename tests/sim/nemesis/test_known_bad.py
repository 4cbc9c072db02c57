"""Every known-bad variant is caught: its expected anomaly appears within a
bounded number of seeds of the scenario that exposes it. If a variant stops
being caught, the test fails (the checker or the scenario lost its teeth)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sim.nemesis.anomaly_spec import parse_known_bad
from tests.sim.nemesis.helpers import sweep

if TYPE_CHECKING:
    from tests.sim.nemesis.conftest import Seeds

pytestmark = pytest.mark.virtual

#: (variant, scenario, config, anomalies any of which counts, seed bound).
CAUGHT = [
    pytest.param(
        "peeks_ignore_catalog_ts", "seed001", "decoupled",
        {"insert-unknown-table", "select-unknown-table"}, 12, id="peeks-ignore-catalog-ts",
    ),
    pytest.param(
        "peeks_ignore_catalog_ts", "seed001-index", "decoupled",
        {"insert-unknown-table", "select-unknown-table"}, 24, id="peeks-ignore-catalog-ts-index",
    ),
    pytest.param(
        "skip_confirm_leadership", "split-brain", "event-loop",
        {"stale-read", "not-strict-serializable", "timestamp-regression"}, 20,
        id="skip-confirm-leadership",
    ),
    pytest.param(
        "batching_joins_in_flight", "busy-reads", "event-loop+pg-oracle",
        {"stale-read", "not-strict-serializable", "timestamp-regression"}, 8,
        id="batching-joins-in-flight-pg-oracle",
    ),
    pytest.param(
        "batching_joins_in_flight", "busy-reads", "decoupled",
        {"stale-read", "not-strict-serializable", "timestamp-regression"}, 8,
        id="batching-joins-in-flight-decoupled",
    ),
    *(
        pytest.param(
            "apply_write_before_append", "seed001", config, {"timestamp-regression"}, 4,
            id=f"apply-write-before-append-{config}",
        )
        for config in ("event-loop", "event-loop+pg-oracle", "decoupled")
    ),
    # Issue 21's matrix (sim/nemesis/matrix.py has the measured bounds).
    *(
        pytest.param(
            "no_write_lock", "update-race", config, {"not-strict-serializable"}, 2,
            id=f"no-write-lock-{config}",
        )
        for config in ("event-loop", "event-loop+pg-oracle", "decoupled")
    ),
    *(
        pytest.param(
            "unbounded_group_commits", "ddl-dml", config, {"timestamp-regression"}, 12,
            id=f"unbounded-group-commits-{config}",
        )
        for config in ("event-loop+pg-oracle", "decoupled")
    ),
    *(
        pytest.param(
            "coordinator_joins_read_ts", "read-after-ack", config,
            {"stale-read", "not-strict-serializable", "timestamp-regression"}, 4,
            id=f"coordinator-joins-read-ts-{config}",
        )
        for config in ("event-loop+pg-oracle", "decoupled")
    ),
]


@pytest.mark.parametrize(("variant", "scenario", "config", "expected", "bound"), CAUGHT)
def test_known_bad_variant_is_caught(
    variant: str, scenario: str, config: str, expected: set[str], bound: int, seeds: Seeds
) -> None:
    # `bound` is the claim (caught within that many seeds): `--seeds N` can
    # widen the search, never narrow it; the sweep stops at the first catch.
    bound = max(bound, len(seeds(bound)))
    found = sweep(
        scenario, config, range(bound), known_bad=parse_known_bad([variant]),
        stop_on=frozenset(expected),
    )
    hits = [f for f in found if expected & set(f.names)]
    assert hits, f"{variant} not caught by {scenario} on {config} within {bound} seeds: {found}"
