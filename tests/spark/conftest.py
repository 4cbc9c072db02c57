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
#: A crash cut statements off before they got a catalog_ts (`make_golden.py`).
CRASH_RUN: Final = "crash-restart-event-loop"
#: Generated histories (`sim.checker.generate`) with many indeterminate ops,
#: UPDATE/DELETE and dropped tables, and two mutants of each: a read missing
#: an element, completions swapped. (seed, ops, p_mutate, p_info)
GENERATED: Final = ((0, 500, 0.3, 0.2), (1, 400, 0.15, 0.1), (2, 600, 0.0, 0.2), (140, 60, 0.0, 0.3))


def write_generated(root: Path) -> list[Path]:
    """Writes the `GENERATED` histories and their mutants, and the
    hand-written EDN corpus of the checkers' tests (tests/data/histories:
    the tricky cases, each with the verdict it must get), as traces."""
    import random

    from sim.checker.generate import GenConfig, drop_read_element, generate, swap_completions
    from sim.checker.interchange import read_edn
    from sim.traces import write_trace

    out = []
    for edn in sorted((GOLDEN.parent / "histories").glob("*.edn")):
        h, events = read_edn(edn)
        name = f"edn-{edn.stem}"
        write_trace(root / name, h, events, run=name, config="edn", seed=0)
        out.append(root / name)
    for seed, n, p_mutate, p_info in GENERATED:
        rng = random.Random(seed)
        h = generate(GenConfig(ops=n, processes=4, window=2, ops_per_table=30, p_mutate=p_mutate,
                               p_info=p_info, seed=seed))  # fmt: skip
        runs = [("", h)]
        dropped = drop_read_element(h, rng)
        if dropped is not None:
            runs.append(("-drop", dropped[0]))
        swapped = swap_completions(h, rng)
        if swapped is not None:
            runs.append(("-swap", swapped))
        for tag, hist in runs:
            name = f"gen{seed}{tag}"
            write_trace(root / name, hist, run=name, config="generated", seed=seed)
            out.append(root / name)
    return out


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        s = spark_session("local[2]", app_name="coordsim-tests", shuffle_partitions=2)
    except SparkUnavailable as exc:
        pytest.fail(f"no local Spark for the tests: {exc}", pytrace=False)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_generated(tmp_path_factory.mktemp("generated"))


@pytest.fixture(scope="session")
def golden_out(spark: Any, tmp_path_factory: pytest.TempPathFactory, generated: list[Path]) -> Path:
    """The replay job's output on the golden and generated traces (computed
    once: one replay of them all is cheaper than one each)."""
    from sim.spark.job import replay

    out = tmp_path_factory.mktemp("replay")
    replay(spark, [str(GOLDEN / r) for r in (*GOLDEN_RUNS, CRASH_RUN)] + [str(g) for g in generated], out)
    return out
