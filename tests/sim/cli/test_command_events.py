"""`coordsim -v --log-json` on compare, anomalies run and anomalies sweep
(issue 37 item 5): their in-process runs' component events are JSON lines on
stderr bound, as `coordsim run`'s are (tests/sim/runtime/test_events.py), to
the run (its directory's name), the configuration, the seed and the virtual
time; a compare pass also says its workload and pass number. Stdout is the
command's own output, as without -v."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

_ENTRY: Final = Path(sys.executable).parent / "coordsim"
#: The kinds a decoupled run emits whatever its size.
_KINDS: Final = {"group_commit", "oracle.call", "catalog.txn"}


def _events(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    r = subprocess.run([str(_ENTRY), "-v", "--log-json", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=300, check=False)
    found = []
    for line in r.stderr.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if "vt" in doc:
                found.append(doc)
    return r, found


def _bound(events: list[dict[str, Any]], run: str) -> None:
    assert events
    for e in events:
        assert e["run"] == run, e
        assert isinstance(e["seed"], int), e
        assert isinstance(e["vt"], float), e
        assert 0 <= e["vt"] < 3600, e  # virtual seconds, not the wall clock
        assert e["level"] == "debug", e


def test_compare_binds_each_pass_to_the_run_configuration_workload_and_seed(tmp_path: Path) -> None:
    r, events = _events("compare", "-w", "insert", "--configs", "decoupled,event-loop", "--concurrency", "1",
                        "--repeat", "2", "-T", "0.01", "--warmup", "0.005", "--jobs", "1", "--no-check",
                        "-o", str(tmp_path / "cmp"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _bound(events, "cmp")
    seen = {(e["config"], e["workload"], e["pass"], e["seed"]) for e in events}
    # Pass k runs with seed k - 1, under each configuration.
    assert seen == {(c, "insert", k, k - 1) for c in ("decoupled", "event-loop") for k in (1, 2)}, seen
    for config in ("decoupled", "event-loop"):
        assert {e["event"] for e in events if e["config"] == config} >= _KINDS, config
    assert r.stdout.rstrip().endswith(str(tmp_path / "cmp"))
    assert '"vt"' not in r.stdout


def test_anomalies_run_binds_its_run_config_and_seed(tmp_path: Path) -> None:
    r, events = _events("anomalies", "run", "seed001", "--seed", "3", "--json", "-o", str(tmp_path / "one"),
                        cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _bound(events, "one")
    assert {(e["config"], e["seed"]) for e in events} == {("decoupled", 3)}
    assert {e["event"] for e in events} >= _KINDS
    assert json.loads(r.stdout)["output"] == str(tmp_path / "one")  # stdout is the document alone


def test_anomalies_sweep_binds_each_seed_in_process(tmp_path: Path) -> None:
    r, events = _events("anomalies", "sweep", "seed001", "--seeds", "2", "--first-seed", "5", "-j", "1",
                        "-o", str(tmp_path / "sw"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _bound(events, "sw")
    assert {(e["config"], e["seed"]) for e in events} == {("decoupled", 5), ("decoupled", 6)}
    for seed in (5, 6):
        assert {e["event"] for e in events if e["seed"] == seed} >= _KINDS, seed
