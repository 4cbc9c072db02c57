"""The components' structured events (issue 37, item 5; sim/runtime/events.py):
`coordsim -v --log-json run …` prints group-commit, oracle and catalog events
as JSON lines bound to the run, configuration, seed and virtual time, with
the flags before or after the command; `--events` keeps them in the run
directory's events.jsonl (and only then); nothing secret gets through; and
with no sink installed nothing listens."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
import structlog

from coordinator.group_commit import TRIGGERS
from sim.runtime.core import Runtime, run
from sim.runtime.events import EVENTS_FILE, OFF, EventSink, for_run, installed
from sim.runtime.logs import configure_logging

if TYPE_CHECKING:
    from collections.abc import Iterator

_ENTRY: Final = Path(sys.executable).parent / "coordsim"
#: Fields every event of a `coordsim run` carries.
_BOUND: Final = ("run", "config", "seed", "actor", "vt")


def _coordsim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(_ENTRY), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def _events(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON lines among `lines` that are events of ours."""
    found = []
    for line in lines:
        if line.startswith("{"):
            doc = json.loads(line)
            if "vt" in doc:
                found.append(doc)
    return found


def _check_run_events(events: list[dict[str, Any]], run_id: str) -> None:
    kinds = {e["event"] for e in events}
    assert {"group_commit", "oracle.call", "catalog.txn"} <= kinds, kinds
    for e in events:
        for field in _BOUND:
            assert field in e, e
        assert (e["run"], e["config"], e["seed"]) == (run_id, "decoupled", 0), e
        assert isinstance(e["vt"], float)
        assert 0 <= e["vt"] < 3600, e  # the loop's virtual seconds, not the wall clock
    commits = [e for e in events if e["event"] == "group_commit"]
    assert all(e["trigger"] in TRIGGERS and e["batch_size"] >= 0 for e in commits), commits
    assert any(e["batch_size"] > 0 and e["trigger"] in ("write", "drain") for e in commits), commits
    calls = [e for e in events if e["event"] == "oracle.call"]
    assert {"write_ts", "apply_write"} <= {e["op"] for e in calls}
    assert all(e["retries"] == 0 and e["latency_ms"] >= 0 and e["timeline"] for e in calls), calls
    txns = [e for e in events if e["event"] == "catalog.txn"]
    assert (txns[0]["kind"], txns[0]["outcome"]) == ("open", "appended"), txns
    assert all(e["ops"] > 0 and e["outcome"] in ("appended", "conflict", "fenced", "error") for e in txns), txns
    # In time order: each event is stamped when it happens.
    assert [e["vt"] for e in events] == sorted(e["vt"] for e in events)


@pytest.mark.parametrize(
    "where",
    [pytest.param("before", id="before-the-command"), pytest.param("after", id="after-the-command")],
)
def test_v_log_json_prints_the_events_as_json_lines(where: str, tmp_path: Path) -> None:
    out = tmp_path / "my-run"
    flags = ["-v", "--log-json"]
    args = ["run", "seed001", "-o", str(out)]
    r = _coordsim(*(flags + args if where == "before" else args + flags), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    events = _events(lines)
    _check_run_events(events, "my-run")
    assert all(e["level"] == "debug" and "timestamp" in e for e in events)
    assert not (out / EVENTS_FILE).exists()  # not asked for


def test_events_jsonl_is_kept_when_asked_and_is_the_seeds(tmp_path: Path) -> None:
    files = []
    for parent in ("a", "b"):
        out = tmp_path / parent / "same-name"
        r = _coordsim("run", "seed001", "--events", "-o", str(out), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert not _events(r.stderr.splitlines())  # no -v: nothing of them on the console
        files.append((out / EVENTS_FILE).read_text())
    events = [json.loads(line) for line in files[0].splitlines()]
    _check_run_events(events, "same-name")
    assert all("timestamp" not in e for e in events)  # no wall clock in the file...
    assert files[0] == files[1]  # ... so a virtual run's file is a function of its seed
    # Logging changes nothing of the run: its trace is the one without it.
    quiet = tmp_path / "c" / "same-name"
    r = _coordsim("run", "seed001", "-o", str(quiet), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (quiet / EVENTS_FILE).exists()
    for name in ("ops.parquet", "events.parquet"):
        assert (quiet / "trace" / name).read_bytes() == (tmp_path / "a" / "same-name" / "trace" / name).read_bytes()


@pytest.mark.parametrize(("config", "component"), [("event-loop", "oracle"), ("decoupled", "catalog")])
def test_a_split_brain_is_a_fault_and_a_fencing(config: str, component: str, tmp_path: Path) -> None:
    """The nemesis starts a second coordinator (b); the first (a) finds
    itself fenced: by the timestamp store's epoch through its in-memory oracle (the
    event loop), by the catalog's epoch (decoupled)."""
    from sim.nemesis.anomalies import run_spec
    from sim.nemesis.anomaly_spec import default_spec

    path = tmp_path / EVENTS_FILE
    with for_run(run="split", directory=tmp_path):
        run_spec(default_spec("split-brain", config, 0))
    events = [json.loads(line) for line in path.read_text().splitlines()]
    faults = [(e["phase"], e["kind"], e["actor"]) for e in events if e["event"] == "nemesis.fault"]
    assert faults == [("start", "split-brain", "nemesis"), ("stop", "split-brain", "nemesis")]
    fenced = [e for e in events if e["event"] == "fenced"]
    assert fenced, [e["event"] for e in events]
    assert {(e["actor"], e["component"], e["config"], e["run"]) for e in fenced} == {("a", component, config, "split")}
    started = next(e["vt"] for e in events if e["event"] == "nemesis.fault")
    assert all(e["vt"] >= started for e in fenced)


def test_a_run_without_a_sink_emits_nothing() -> None:
    async def main(rt: Runtime) -> tuple[bool, bool]:
        return rt.events is OFF, rt.derive("x").events is OFF

    assert run(main) == (True, True)
    assert not OFF.on
    assert OFF.bind(a=1) is OFF


def test_a_sink_writing_nowhere_is_not_on(tmp_path: Path) -> None:
    with for_run(run="r", directory=None) as sink:
        assert sink is None

        async def main(rt: Runtime) -> bool:
            return rt.events.on

        assert run(main) is False


@pytest.fixture
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        structlog.reset_defaults()
        root.handlers, root.level = handlers, level


SECRET: Final = "Hunter2-s3cret"


@pytest.mark.usefixtures("_restore_logging")
@pytest.mark.parametrize("as_json", [True, False])
def test_no_event_leaks_a_secret(as_json: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(verbose=True, json=as_json)  # to sys.stderr, which capsys holds
    path = tmp_path / EVENTS_FILE
    with installed(EventSink(console=True, file=path, bound={"run": "r"})):

        async def main(rt: Runtime) -> None:
            await rt.sleep(1.5)
            rt.events.emit(
                "oracle.retry", op="write_ts", url=f"postgresql://u:{SECRET}@h/db",
                password=SECRET, error=f"connection to postgres://v:{SECRET}@db failed",
                nested={"dsn": f"host=h password={SECRET}"},
            )

        run(main, seed=7)
    console = capsys.readouterr().err
    kept = path.read_text()
    for text in (console, kept):
        assert "oracle.retry" in text
        assert SECRET not in text
        assert "***" in text
    record = json.loads(kept)
    assert (record["event"], record["run"], record["seed"], record["vt"]) == ("oracle.retry", "r", 7, 1.5)
