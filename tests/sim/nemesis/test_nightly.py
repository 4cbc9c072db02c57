"""The nightly regression sweep, with a small N: 10,000 seeds per scenario is
the figure in the README (`coordsim anomalies sweep … --seeds 10000`); here the
same command, on every core, must find nothing in `decoupled` under each fault
scenario (crash-restart; split brain; replica, oracle and store faults)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.nemesis.sweep import SUMMARY_FILE

if TYPE_CHECKING:
    from pathlib import Path

    from tests.sim.nemesis.conftest import Seeds

pytestmark = [pytest.mark.virtual, pytest.mark.slow]

#: The scenarios of the nightly figure: crash/restart of the coordinator; a
#: second coordinator beside the first; random replica crashes, oracle and
#: store (Blob, Consensus) errors; and the faults of time (issue 38).
NIGHTLY = ("crash-restart", "split-brain", "ddl-dml", "clock-jump", "clock-skew", "clock-stall")


@pytest.mark.parametrize("scenario", NIGHTLY)
def test_nightly_sweep_finds_nothing_in_decoupled(scenario: str, tmp_path: Path, seeds: Seeds) -> None:
    out = tmp_path / scenario
    n = len(seeds(40))
    r = CliRunner().invoke(
        app, ["anomalies", "sweep", "--scenario", scenario, "--config", "decoupled",
              "--seeds", str(n), "--jobs", "2", "-o", str(out)],
    )
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert r.exit_code == 0, r.output
    assert summary["valid"] is True
    assert summary["failing"] == []
    assert summary["runs"] == n
