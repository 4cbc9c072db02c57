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

    from sim.history.model import History

GOLDEN: Final = Path(__file__).resolve().parents[2] / "data" / "traces"
GOLDEN_RUNS: Final = ("seed001-valid", "seed001-peeks-ignore-catalog-ts")
#: A crash cut statements off before they got a catalog_ts (`make_golden.py`).
CRASH_RUN: Final = "crash-restart-event-loop"
#: Generated histories (`sim.history.checker.generate`) with many indeterminate ops,
#: UPDATE/DELETE and dropped tables, and two mutants of each: a read missing
#: an element, completions swapped. (seed, ops, p_mutate, p_info)
GENERATED: Final = ((0, 500, 0.3, 0.2), (1, 400, 0.15, 0.1), (2, 600, 0.0, 0.2), (140, 60, 0.0, 0.3))


#: Known-bad variants (coordinator/config.py's KnownBad toggles) on the
#: scenario and config that expose them (tests/sim/nemesis/test_known_bad.py),
#: at seeds the in-process checkers catch: (variant, scenario, config, seed).
KNOWN_BAD: Final = (
    ("peeks_ignore_catalog_ts", "seed001", "decoupled", 0),
    ("peeks_ignore_catalog_ts", "seed001-index", "decoupled", 18),
    ("skip_confirm_leadership", "split-brain", "event-loop", 3),
    ("batching_joins_in_flight", "busy-reads", "event-loop+pg-oracle", 1),
    ("batching_joins_in_flight", "busy-reads", "decoupled", 0),
    # Checker 3's lost-update check and checker 4's append-order check (the
    # first seeds that catch them, as tests/sim/nemesis/test_known_bad.py).
    ("no_write_lock", "update-race", "event-loop", 0),
    ("unbounded_group_commits", "ddl-dml", "decoupled", 0),
    ("apply_write_before_append", "seed001", "event-loop", 0),
    ("apply_write_before_append", "seed001", "event-loop", 1),
    ("apply_write_before_append", "seed001", "event-loop+pg-oracle", 0),
    ("apply_write_before_append", "seed001", "decoupled", 0),
)


def known_bad_name(variant: str, scenario: str, config: str, seed: int) -> str:
    return f"kb-{variant}-{scenario}-{config}-{seed}"


def write_known_bad(root: Path) -> list[Path]:
    """Runs each `KNOWN_BAD` variant (virtual mode, a fraction of a second
    each) and writes its trace."""
    from sim.history.traces import write_trace
    from sim.nemesis.anomalies import run_spec
    from sim.nemesis.anomaly_spec import default_spec, parse_known_bad

    out = []
    for variant, scenario, config, seed in KNOWN_BAD:
        h, events = run_spec(default_spec(scenario, config, seed, known_bad=parse_known_bad([variant])))
        name = known_bad_name(variant, scenario, config, seed)
        write_trace(root / name, h, events, run=name, config=config, seed=seed)
        out.append(root / name)
    return out


def unjudged_histories() -> dict[str, History]:
    """Hand-written histories with operations no checker can judge, so that
    `check_history` says `unknown` (or `invalid`, whatever the coverage, when
    it also finds an anomaly), and a control that is fully judged. Table "t":
    an INSERT of 1 and a read of it."""
    from sim.history.model import History, Kind, Op, Status

    def op(oid: int, kind: Kind, obj: str, t: int, **kw: Any) -> Op:
        return Op(op_id=oid, process=oid, kind=kind, obj=obj, invoke_ns=t, complete_ns=t + 5, status=Status.OK, **kw)

    def column_read(*, ts: bool) -> list[Op]:
        # SELECT v FROM t: only checker 3 models a read of named columns,
        # and only through system timestamps.
        return [op(0, Kind.ADD, "t", 0, elements=(1,), **({"write_ts": 1} if ts else {})),
                op(1, Kind.READ, "t", 10, result=(1,), args={"columns": ["v"]}, **({"read_ts": 1} if ts else {}))]

    countless = [op(0, Kind.ADD, "t", 0, elements=(1,), write_ts=1),
                 op(1, Kind.READ, "t", 10, args={"count": True}, read_ts=1)]
    # An anomaly beside the unjudged column read: a read of "s" after an
    # acknowledged add misses it.
    lost = [op(2, Kind.ADD, "s", 20, elements=(7,)), op(3, Kind.READ, "s", 30, result=())]
    return {
        # Judged only by a checker that is skipped (no timestamps): unknown.
        "unjudged-column-read": History.from_ops(column_read(ts=False)),
        # The same with timestamps: checker 3 judges it, valid.
        "judged-column-read": History.from_ops(column_read(ts=True)),
        # A COUNT without its count: no checker models it, unknown.
        "unjudged-countless": History.from_ops(countless),
        # An anomaly: invalid, whatever went unjudged.
        "unjudged-and-invalid": History.from_ops([*column_read(ts=False), *lost]),
    }


def write_generated(root: Path) -> list[Path]:
    """Writes the `GENERATED` histories and their mutants, the hand-written
    EDN corpus of the checkers' tests (tests/data/histories: the tricky
    cases, each with the verdict it must get) and `unjudged_histories`, as
    traces."""
    import random

    from sim.history.checker.generate import (
        GenConfig,
        drop_read_element,
        generate,
        swap_completions,
    )
    from sim.history.import_edn import read_edn
    from sim.history.traces import write_trace

    out = []
    for edn in sorted((GOLDEN.parent / "histories").glob("*.edn")):
        h, events = read_edn(edn)
        name = f"edn-{edn.stem}"
        write_trace(root / name, h, events, run=name, config="edn", seed=0)
        out.append(root / name)
    for name, h in unjudged_histories().items():
        write_trace(root / name, h, run=name, config="unjudged", seed=0)
        out.append(root / name)
    for seed, n, p_mutate, p_info in GENERATED:
        rng = random.Random(seed)
        h = generate(GenConfig(ops=n, processes=4, window=2, ops_per_table=30, p_mutate=p_mutate,
                               p_info=p_info, seed=seed))
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
def known_bad(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_known_bad(tmp_path_factory.mktemp("known-bad"))


@pytest.fixture(scope="session")
def golden_out(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, generated: list[Path], known_bad: list[Path]
) -> Path:
    """The replay job's output on the golden, generated and known-bad traces
    (computed once: one replay of them all is cheaper than one each)."""
    from sim.spark.job import replay

    out = tmp_path_factory.mktemp("replay")
    traces = [str(GOLDEN / r) for r in (*GOLDEN_RUNS, CRASH_RUN)] + [str(g) for g in (*generated, *known_bad)]
    replay(spark, traces, out)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two one-core workers started from the
    pyspark installation, bound to 127.0.0.1; yields the master URL. Waits
    until the master's JSON UI reports two alive workers; kills the JVMs'
    process groups at the end. Fails (never skips) without Java."""
    import json
    import os
    import shutil
    import signal
    import subprocess
    import time
    import urllib.request

    import pyspark

    from sim.spark.session import java_env, java_problem

    problem = java_problem()
    if problem is not None:
        pytest.fail(f"no Spark cluster for the tests: {problem}", pytrace=False)
    home = Path(pyspark.__file__).parent
    root = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, **java_env(), "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(root / "logs"), "SPARK_NO_DAEMONIZE": "1",
           # The master's REST submission server listens on a fixed port
           # (6066) by default: off, so parallel sessions never collide.
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    cls = str(home / "bin" / "spark-class")
    cmds = [[cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui)]]
    for i in range(2):
        wdir = root / f"worker{i}"
        wdir.mkdir()
        cmds.append([cls, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                     "--memory", "1g", "--work-dir", str(wdir), "--webui-port", str(_free_port())])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, cmd in enumerate(cmds):
            log = (root / f"jvm{i}.log").open("wb")
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
        deadline = time.monotonic() + 120
        alive = 0
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    alive = int(json.load(r).get("aliveworkers", 0))
            except (OSError, ValueError):
                alive = 0
            if alive >= 2:
                break
            time.sleep(0.5)  # polling a JVM we started; nothing to await
        if alive < 2:
            logs = "\n".join((root / f"jvm{i}.log").read_text(errors="replace")[-1500:] for i in range(len(cmds)))
            pytest.fail(f"the Spark standalone cluster did not come up ({alive} workers alive):\n{logs}")
        yield url
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(root, ignore_errors=True)
