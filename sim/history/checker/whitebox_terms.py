"""What checker 3 (`sim.history.checker.whitebox`) reports, shared by its
parts: the anomaly it names and the reasons it leaves operations unjudged
(`Verdict.coverage`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["COUNTLESS", "DDL_UNPLACED", "NAME", "NO_CATALOG_TS", "NO_TIMESTAMPS", "NO_TS", "REPEATED", "UNKNOWABLE"]

NAME: Final = "not-strict-serializable"
#: Why operations go unjudged (`Verdict.coverage`).
NO_TIMESTAMPS: Final = "no system timestamps (read_ts/write_ts/catalog_ts)"
NO_TS: Final = "no system timestamp (read_ts/write_ts)"
NO_CATALOG_TS: Final = "no catalog_ts"
DDL_UNPLACED: Final = "a create/drop without catalog_ts: the table's existence cannot be placed"
UNKNOWABLE: Final = ("after an indeterminate UPDATE/DELETE or a write without write_ts: the "
                     "table's state is unknowable")
COUNTLESS: Final = "count read without its count"
REPEATED: Final = "a value added more than once: not a set, contents not replayed"
