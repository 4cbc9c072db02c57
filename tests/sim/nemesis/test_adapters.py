"""Hunting across adapters (issue 36, items 2 and 7): each cross-adapter
known-bad variant is caught when the operations span adapters, the adapter
faults (crash, partition from the oracle, pause) leave the correct design
clean on 2 and 4 adapters, and the known-bad matrix holds their rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sim.nemesis.anomaly_spec import ADAPTER_CONFIG_NAMES, Spec, coordinator_config, parse_known_bad
from sim.nemesis.matrix import MATRIX
from sim.nemesis.plan import ADAPTER_FAULTS, FaultKind, FaultPlan
from sim.runtime.errors import InvalidUsage
from tests.sim.nemesis.helpers import sweep

if TYPE_CHECKING:
    from tests.sim.nemesis.conftest import Seeds

pytestmark = pytest.mark.virtual

_UNKNOWN_TABLE = frozenset({"insert-unknown-table", "select-unknown-table"})
_LOST = frozenset({"lost-write", "not-strict-serializable", "not-linearizable", "stale-read"})

#: (variant, scenario, config, names any of which counts, pinned seed bound):
#: both are caught at seed 0 (`coordsim anomalies matrix`).
CAUGHT = [
    *(
        pytest.param("ack_lost_race", "ddl-dml", c, _LOST, 2, id=f"ack-lost-race-{c}")
        for c in ADAPTER_CONFIG_NAMES
    ),
    *(
        pytest.param("stale_adapter_catalog", "seed001", c, _UNKNOWN_TABLE, 2, id=f"stale-adapter-catalog-{c}")
        for c in ADAPTER_CONFIG_NAMES
    ),
]


@pytest.mark.parametrize(("variant", "scenario", "config", "expected", "bound"), CAUGHT)
def test_cross_adapter_variant_is_caught(
    variant: str, scenario: str, config: str, expected: frozenset[str], bound: int
) -> None:
    found = sweep(
        scenario, config, range(bound), known_bad=parse_known_bad([variant]), stop_on=expected
    )
    assert any(expected & set(f.names) for f in found), (
        f"{variant} not caught by {scenario} on {config} within {bound} seeds: {found}"
    )


@pytest.mark.parametrize("config", ADAPTER_CONFIG_NAMES)
@pytest.mark.parametrize("fault", sorted(ADAPTER_FAULTS))
def test_adapter_fault_leaves_the_correct_design_clean(fault: FaultKind, config: str, seeds: Seeds) -> None:
    found = sweep(fault.value, config, seeds(3))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.parametrize("config", ADAPTER_CONFIG_NAMES)
@pytest.mark.parametrize("scenario", ["seed001", "ddl-dml", "update-race"])
def test_scenarios_span_adapters_cleanly(scenario: str, config: str) -> None:
    found = sweep(scenario, config, range(2))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", ADAPTER_CONFIG_NAMES)
@pytest.mark.parametrize(
    "scenario", ["ddl-dml", "crash-restart", "split-brain", *sorted(k.value for k in ADAPTER_FAULTS)]
)
def test_adapter_configurations_are_clean_many_seeds(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(100, start=100))
    assert not found, "\n".join(str(f) for f in found)


def test_adapter_configuration_names() -> None:
    assert coordinator_config("decoupled-4-adapters").adapters == 4
    assert coordinator_config("decoupled").adapters == 1
    with pytest.raises(InvalidUsage, match="single by design"):
        coordinator_config("event-loop-2-adapters")
    with pytest.raises(InvalidUsage, match="-adapters"):
        coordinator_config("nope")


def test_an_adapter_fault_needs_several_adapters() -> None:
    plan = FaultPlan.parse("adapter-pause@5ms+20ms")
    Spec("ddl-dml", "decoupled-2-adapters", 0, faults=plan)
    with pytest.raises(InvalidUsage, match="adapters > 1"):
        Spec("ddl-dml", "decoupled", 0, faults=plan)


def test_matrix_has_the_adapter_rows() -> None:
    """Every cross-adapter variant is caught on both adapter counts, and the
    correct design runs clean on both under every virtual-mode fault kind."""
    rows = {(e.variant, e.scenario, e.config, e.expect) for e in MATRIX}
    for c in ADAPTER_CONFIG_NAMES:
        assert ("ack_lost_race", "ddl-dml", c, "caught") in rows
        assert ("stale_adapter_catalog", "seed001", c, "caught") in rows
        for sc in ("ddl-dml", "crash-restart", "split-brain", *(k.value for k in ADAPTER_FAULTS)):
            assert (None, sc, c, "not-caught") in rows, (sc, c)
