"""One local Spark session per test session (`local[2]`, no UI, two shuffle
partitions: the inputs are small, and Spark's 200 default would spend the
tests scheduling empty tasks). Without Java or a working JVM every Spark test
fails with one line saying what is missing; none skips."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from sim.spark.session import SparkUnavailable, spark_session

if TYPE_CHECKING:
    from collections.abc import Iterator

GOLDEN: Final = Path(__file__).resolve().parents[1] / "data" / "traces"
GOLDEN_RUNS: Final = ("seed001-valid", "seed001-peeks-ignore-catalog-ts")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        s = spark_session("local[2]", app_name="coordsim-tests", shuffle_partitions=2)
    except SparkUnavailable as exc:
        pytest.fail(f"no local Spark for the tests: {exc}", pytrace=False)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def golden_out(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replay job's output on the golden traces (computed once)."""
    from sim.spark.job import replay

    out = tmp_path_factory.mktemp("replay")
    replay(spark, [str(GOLDEN / r) for r in GOLDEN_RUNS], out)
    return out
