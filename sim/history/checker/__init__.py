"""Anomaly checkers over histories (DESIGN.md §7): named anomalies, black-box
strict serializability, white-box replay of the system's timestamps
(`whitebox`), oracle guarantees, a per-table linearizability search and
SUBSCRIBE streams; verdicts explain anomalies in words.

Re-exports the checkers' entry points, which most callers want together; the
EDN reading is `sim.history.import_edn`, EDN and Porcupine writing
`sim.history.export`.
"""

from sim.history.checker.blackbox import check_blackbox
from sim.history.checker.linear import check_linear
from sim.history.checker.named import check_named
from sim.history.checker.oracle_events import check_oracle_events
from sim.history.checker.run import CHECKERS, Report, check_history
from sim.history.checker.subscribe import check_subscribe
from sim.history.checker.verdict import ANOMALY_NAMES, Anomaly, Outcome, Verdict
from sim.history.checker.whitebox import check_whitebox

__all__ = [
    "ANOMALY_NAMES",
    "CHECKERS",
    "Anomaly",
    "Outcome",
    "Report",
    "Verdict",
    "check_blackbox",
    "check_history",
    "check_linear",
    "check_named",
    "check_oracle_events",
    "check_subscribe",
    "check_whitebox",
]
