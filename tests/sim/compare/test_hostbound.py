"""Host-bound cells and the busy-host warning (issue 33): a real-mode run
starved of CPU says so in every output; the same run unstarved does not."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest

from sim.compare.hostbound import LAG_LIMIT_MS, host_bound
from sim.load.loadgen import HostFigures

if TYPE_CHECKING:
    from pathlib import Path

#: An fsync-bound level: one client's updates wait on Postgres's commits, so
#: an unstarved run leaves coordsim, Postgres and the host mostly idle.
_RUN = ["compare", "--mode", "real", "-w", "update", "--configs", "event-loop", "--concurrency", "1",
        "--repeat", "1", "-T", "1", "--warmup", "0.2", "--no-check"]
_BURN = "while True: pass"


def _figures(**changes: float | None) -> HostFigures:
    base: dict[str, float | None] = {"own_cpu": 0.3, "lag_mean_ms": 0.2, "lag_p99_ms": 1.0,
                                     "postgres_cores": 0.2, "host_cores": 0.6}
    base.update(changes)
    return HostFigures(wall_s=1.0, usable_cores=2, **base)  # type: ignore[arg-type]


def test_each_resource_is_named_with_its_figure() -> None:
    assert host_bound([_figures()]) == ""
    assert host_bound([]) == ""
    assert host_bound([_figures(own_cpu=0.97)]) == "coordsim CPU 97%"
    assert host_bound([_figures(lag_mean_ms=LAG_LIMIT_MS + 1)]).startswith("loop lag")
    assert host_bound([_figures(postgres_cores=1.9)]).startswith("Postgres CPU 1.9 of 2")
    assert host_bound([_figures(host_cores=1.95)]).startswith("host CPU")
    # Averaged over passes: one busy pass of three is not a host-bound cell.
    assert host_bound([_figures(own_cpu=0.99), _figures(), _figures()]) == ""
    # Not measurable (an external Postgres) is not a finding.
    assert host_bound([_figures(postgres_cores=None, host_cores=None)]) == ""


def _compare(out: Path, *, cpu: int | None, burners: int) -> tuple[list[dict[str, str]], dict[str, object], str]:
    """Runs `coordsim compare` in a child process, pinned to `cpu` with
    `burners` busy processes pinned beside it (not its descendants: they are
    "other processes" to it)."""
    with ExitStack() as stack:
        for _ in range(burners):
            code = f"import os; os.sched_setaffinity(0, {{{cpu}}})\n{_BURN}"
            p = subprocess.Popen([sys.executable, "-c", code])
            stack.callback(p.wait)
            stack.callback(p.kill)

        def pin() -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        done = subprocess.run([sys.executable, "-c", "from sim.cli.entry import main; main()", *_RUN, "-o", str(out)], capture_output=True,
                              text=True, timeout=170, preexec_fn=pin, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    summary = json.loads((out / "summary.json").read_text())
    report = (out / "report.md").read_text()
    return rows, summary["provenance"], report


@pytest.mark.postgres
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU pinning needs Linux")
def test_a_starved_run_is_host_bound_and_busy_and_an_unstarved_one_is_not(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    rows, prov, report = _compare(tmp_path / "starved", cpu=cpu, burners=2)
    assert all(r["host_bound"] for r in rows), rows
    assert float(rows[0]["host_cpu_cores"]) >= 0.9
    assert prov["busy"] is True
    assert float(prov["other_cpu_cores"]) >= 0.25  # type: ignore[arg-type]
    head = report.split("##", 1)[0]
    assert "**The host was busy" in head  # in bold, before the first section

    rows, prov, report = _compare(tmp_path / "quiet", cpu=None, burners=0)
    assert not any(r["host_bound"] for r in rows), rows
    assert float(prov["other_cpu_cores"]) < 0.25  # type: ignore[arg-type]
    if prov["busy"]:
        # Only a load average left by earlier tests may still make it busy:
        # that is the past minute's, and the report is right to say so.
        assert float(prov["load_avg_1m_start"]) > len(os.sched_getaffinity(0)), prov  # type: ignore[arg-type]
    else:
        assert "host was busy" not in report.split("##", 1)[0]
