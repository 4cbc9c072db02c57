"""The event loop's handlers are recorded (real mode, `BackendStats.timed`)
under the kinds `sim.model.from_run` turns into costs. A posted coroutine's
kind leaves out the class that defines it, so moving a handler between the
loop's parts (`coordinator.event_loop_*`) keeps its kind."""

from __future__ import annotations

from sim.nemesis.anomalies import run_spec
from sim.nemesis.anomaly_spec import default_spec
from sim.runtime.backend_stats import BACKEND_STATS, BackendStats, Mark

#: Every kind of the loop an UPDATE race records, on either side of the oracle.
EXPECTED = {
    "event-loop": {
        "client.Insert", "client.Select", "client.Update", "client.ddl", "command.catalog_snapshot",
        "command.commit", "confirm_flush", "internal.downgrade_on_loop", "internal.read_then_write.start",
        "internal.read_then_write.submit", "internal.stage.ready", "internal.trigger_group_commit.initiate",
        "response",
    },
    "event-loop+pg-oracle": {
        "client.Insert", "client.Select", "client.Update", "client.ddl", "command.catalog_snapshot",
        "command.commit", "internal.group_commit_done", "internal.read_then_write.start",
        "internal.read_then_write.submit", "internal.stage.ready", "internal.timestamp_ready",
        "internal.trigger_group_commit.initiate", "response",
    },
}


def test_the_loop_records_the_handler_kinds_calibration_reads() -> None:
    for config, expected in EXPECTED.items():
        stats = BackendStats()
        token = BACKEND_STATS.set(stats)
        try:
            run_spec(default_spec("update-race", config, 1))
        finally:
            BACKEND_STATS.reset(token)
        kinds = {h.kind for h in stats.since(Mark({}, {}, {})).handlers()}
        assert kinds == expected, (config, sorted(kinds ^ expected))
