"""The regression suite: every configuration x scenario x many seeds in virtual
mode, judged by every checker, must be valid. A failing seed prints its replay
command (`uv run coordsim anomalies run …`); `coordsim shrink` with the same
arguments reduces it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sim.nemesis.anomalies import CONFIG_NAMES
from tests.anomalies.helpers import sweep

if TYPE_CHECKING:
    from tests.anomalies.conftest import Seeds

pytestmark = pytest.mark.virtual

#: Seeds per (scenario, config) in the default run (`--seeds N` overrides it):
#: 5 scenarios x 3 configs x 16 seeds + busy-reads = ~250 runs, about a minute
#: on two cores.
SEEDS = 16
SCENARIOS = ("seed001", "seed001-index", "ddl-dml", "crash-restart", "split-brain")


@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_is_valid(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(SEEDS))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_busy_reads_are_valid(config: str, seeds: Seeds) -> None:
    found = sweep("busy-reads", config, seeds(3))
    assert not found, "\n".join(str(f) for f in found)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("scenario", [*SCENARIOS, "busy-reads"])
def test_scenario_is_valid_many_seeds(scenario: str, config: str, seeds: Seeds) -> None:
    found = sweep(scenario, config, seeds(30 if scenario == "busy-reads" else 150, start=100))
    assert not found, "\n".join(str(f) for f in found)
