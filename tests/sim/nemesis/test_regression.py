"""The regression suite: every configuration x scenario x many seeds in virtual
mode, judged by every checker, must be valid. A failing seed prints its replay
command (`uv run coordsim anomalies run …`); `coordsim shrink` with the same
arguments reduces it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sim.nemesis.anomaly_spec import CONFIG_NAMES
from tests.sim.nemesis.helpers import sweep

if TYPE_CHECKING:
    from tests.sim.nemesis.conftest import Seeds

pytestmark = pytest.mark.virtual

#: Seeds per (scenario, config) in the default run (`--seeds N` overrides it):
#: 5 scenarios x 3 configs x 16 seeds + busy-reads and the matrix's scenarios
#: = ~270 runs, about a minute on two cores.
SEEDS = 16
SCENARIOS = ("seed001", "seed001-index", "ddl-dml", "crash-restart", "split-brain")
#: Written for the known-bad matrix; the correct designs must pass them too.
MATRIX_SCENARIOS = ("update-race", "read-after-ack")


@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_is_valid(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(SEEDS))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_busy_reads_are_valid(config: str, seeds: Seeds) -> None:
    found = sweep("busy-reads", config, seeds(3))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", MATRIX_SCENARIOS)
def test_matrix_scenarios_are_valid(scenario: str, config: str, seeds: Seeds) -> None:
    """The scenarios issue 21's matrix added, on the correct designs: the
    checks that catch its variants (a lost update, a stale read just after
    an ack) do not fire without them."""
    found = sweep(scenario, config, seeds(4))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", [*SCENARIOS, "busy-reads", *MATRIX_SCENARIOS])
def test_scenario_is_valid_many_seeds(scenario: str, config: str, seeds: Seeds) -> None:
    busy = scenario in ("busy-reads", "read-after-ack")
    found = sweep(scenario, config, seeds(30 if busy else 150, start=100))
    assert not found, "\n".join(str(f) for f in found)
