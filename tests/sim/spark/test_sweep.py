"""`coordsim sweep` runs seeds as Spark tasks and replays their traces; its
verdicts equal the in-process checkers' on the same traces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from tests.sim.spark.expected import in_process, spark_rows

if TYPE_CHECKING:
    from pathlib import Path

# Four simulations and a whole replay on a shared 2-core machine can exceed the
# default per-test limit.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_sweep_four_seeds_on_local2(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    res = CliRunner().invoke(app, ["sweep", "--seeds", "4", "--config", "decoupled", "--scenario", "seed001",
                                   "--master", "local[2]", "-o", str(out)])
    assert res.exit_code in (0, 1), res.output
    traces = sorted((out / "traces").iterdir())
    assert [t.name[-5:] for t in traces] == ["s0000", "s0001", "s0002", "s0003"]
    verdicts = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert len(verdicts) == 4
    want = set().union(*(in_process(t) for t in traces))
    assert spark_rows(out) == want
    assert res.exit_code == (1 if want else 0)
