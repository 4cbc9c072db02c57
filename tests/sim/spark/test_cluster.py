"""The replay job on a real Spark standalone cluster (a master and two
workers started by the `spark_cluster` fixture, separate executor JVMs and
Python workers): `coordsim spark replay --master spark://…` and the documented
`spark-submit` recipe give the verdicts local mode gives, and `coordsim sweep
--spark` runs its seeds there. The recipe and the sweep are slow tests (`make
test-all`): each costs a driver JVM and a job on one-core executors, and the
default suite keeps the replay here and the sweep on local[2]."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sim.spark.session import java_env
from tests.sim.spark.conftest import GOLDEN
from tests.sim.spark.expected import in_process, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]


def _verdicts(out: Path) -> dict[str, str]:
    return {r["run"]: r["verdict"] for r in pq.read_table(out / "verdicts.parquet").to_pylist()}


def _env(*, python: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(java_env())  # the packaged java, when the system has none
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    if python:
        env["PYSPARK_PYTHON"] = sys.executable
    return env


def test_replay_on_a_standalone_cluster(
    spark_cluster: str, golden_out: Path, known_bad: list[Path], tmp_path: Path
) -> None:
    # Few traces: on one-core executors every Spark job of the replay costs
    # its scheduling, whatever the data.
    traces = [str(GOLDEN / "seed001-valid"), str(known_bad[-1])]
    local = _verdicts(golden_out)
    out = tmp_path / "cli"
    res = subprocess.run(
        [str(Path(sys.executable).parent / "coordsim"), "spark", "replay", *traces, "--master", spark_cluster, "--out", str(out)],
        # No PYSPARK_PYTHON: sim.spark.session must give the executors this
        # interpreter by itself.
        cwd=ROOT, env=_env(python=False), capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]  # a known-bad run is invalid
    got = _verdicts(out)
    assert got == {r: local[r] for r in got}
    assert len(got) == len(traces)


@pytest.mark.slow  # ~40 s: a second driver JVM on the cluster the replay above already proves
def test_the_spark_submit_recipe_on_a_standalone_cluster(
    spark_cluster: str, golden_out: Path, known_bad: list[Path], tmp_path: Path
) -> None:
    # The spark-submit recipe of docs/guide.md, with the zip and a copy of
    # job.py outside the checkout.
    traces = [str(GOLDEN / "seed001-valid"), str(known_bad[-1])]
    local = _verdicts(golden_out)
    zpath = tmp_path / "coordsim.zip"
    # git's files, and new ones not yet committed (what the recipe zips
    # once they are): not stray files git ignores.
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "coordinator", "oracle",
                            "catalog", "persist", "controllers", "sim"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    with zipfile.ZipFile(zpath, "w") as z:
        for f in files:
            if f.endswith(".py") and (ROOT / f).exists():
                z.write(ROOT / f, f)
    job = tmp_path / "job.py"
    job.write_text((ROOT / "sim" / "spark" / "job.py").read_text())
    out2 = tmp_path / "submit"
    submit = Path(sys.executable).parent / "spark-submit"
    res = subprocess.run(
        [str(submit), "--master", spark_cluster, "--py-files", str(zpath), str(job), "--out", str(out2), *traces],
        cwd=tmp_path, env=_env(python=True), capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    got = _verdicts(out2)
    assert got == {r: local[r] for r in got}
    assert len(got) == len(traces)


@pytest.mark.slow  # ~45 s; the default suite keeps the replay above on this cluster and the sweep on local[2]
def test_sweep_on_a_standalone_cluster(spark_cluster: str, tmp_path: Path) -> None:
    # The seeds run as tasks on the cluster's executors (their own JVMs and
    # Python workers), writing traces to a directory all of them share (this
    # machine's disk), then one replay of them all on the same cluster.
    out = tmp_path / "sweep"
    res = subprocess.run(
        [str(Path(sys.executable).parent / "coordsim"), "sweep", "--seeds", "4", "--config", "decoupled",
         "--scenario", "seed001", "--spark", spark_cluster, "--out", str(out)],
        cwd=ROOT, env=_env(python=False), capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode in (0, 1), res.stdout + res.stderr[-3000:]
    traces = sorted((out / "traces").iterdir())
    assert [t.name[-5:] for t in traces] == ["s0000", "s0001", "s0002", "s0003"]
    want = set().union(*(in_process(t) for t in traces))
    assert spark_rows(out) == want
    assert res.returncode == (1 if want else 0)
    assert "simulated 4 seeds" in res.stdout
