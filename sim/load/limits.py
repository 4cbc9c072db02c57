"""Bounds on what a user may ask for, and the checks that refuse the rest
before anything starts (DESIGN.md §9): numbers too large to mean anything but
a typo, and files too large to be a configuration or a latency profile.

Without a bound, `--concurrency 50000000` dies in a MemoryError and `--rate
1e300` never finishes. Each bound is generous for real use on a 24 GiB
machine; docs/guide.md ("Limits") lists them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from coordinator.config import OracleKind
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from pathlib import Path

    from coordinator.config import CoordinatorConfig

__all__ = [
    "MAX_ADAPTERS", "MAX_BATCH", "MAX_CLIENTS", "MAX_CONCURRENCY", "MAX_CORES", "MAX_DURATION_S", "MAX_FILE_BYTES",
    "MAX_LEVELS", "MAX_OPS", "MAX_RATE", "MAX_REAL_ADAPTERS", "MAX_REPEAT", "MAX_SCENARIO_OPS", "MAX_SEED",
    "MAX_SEEDS", "MAX_SIGMA", "MAX_SIZE", "MAX_STUCK_AFTER_S", "MAX_TABLES", "REAL_STUCK_AFTER_S", "STUCK_AFTER_S",
    "check_float", "check_int", "check_real_adapters", "read_text_file",
]

#: Clients per concurrency level: each is a task and a session (a few KiB), so
#: 10^5 is ~1 GiB of state — beyond any level the seeds' questions need (256).
MAX_CONCURRENCY: Final = 100_000
#: Concurrency levels in one sweep.
MAX_LEVELS: Final = 1_000
#: Operations per level (and warm-up operations): a history row is ~100 bytes,
#: so 10^8 is ~10 GiB of history at the largest level's sqrt(clients) scaling.
MAX_OPS: Final = 10**8
#: Tables in the schema: each is a persist shard with its own writer.
MAX_TABLES: Final = 10_000
#: Open-loop arrivals per second: 10^7/s is beyond the fastest configuration's
#: peak by three orders of magnitude (virtual time makes it cost wall time only).
MAX_RATE: Final = 1e7
#: Any duration a user gives (a modeled CPU cost, a latency, an interval): one day.
MAX_DURATION_S: Final = 86_400.0
#: A log-normal latency's sigma: 4 already puts the 99.99th percentile ~3x10^6
#: times the median; calibrated round trips measure 0.05-1.5.
MAX_SIGMA: Final = 4.0
#: Seeds and other stored integers are signed 64-bit in a trace (Parquet int64).
MAX_SEED: Final = 2**63 - 1
#: Repetitions of a level.
MAX_REPEAT: Final = 1_000
#: Coordinator CPU cores (the decoupled adapter's pool) and loop batch size.
MAX_CORES: Final = 1_024
#: Serving processes of one decoupled deployment (issue 36): each is a set of
#: tasks and its own core pool; 64 is beyond where one oracle row saturates.
MAX_ADAPTERS: Final = 64
#: Real mode runs each adapter as an OS process with its own Postgres
#: connections (oracle, catalog, Consensus, write lock: about ten), so a
#: server's default `max_connections` of 100 bounds it well below
#: `MAX_ADAPTERS`.
MAX_REAL_ADAPTERS: Final = 8
MAX_BATCH: Final = 1_000_000
#: Limits of an anomaly run's `--clients` and `--size` (operations or rounds
#: per client), and of their product: a history row costs ~0.5 KiB while
#: recorded, so 10^8 operations is already more than a 24 GiB machine holds; a
#: scenario's defaults are a few clients and a dozen operations each.
MAX_CLIENTS: Final = 100_000
MAX_SIZE: Final = 10**7
MAX_SCENARIO_OPS: Final = 10**8
#: Simulated seconds after which a virtual anomaly run counts as stuck: virtual
#: time only advances with the simulation, so this counts its progress, never
#: the host's speed (a scenario takes well under one simulated second).
STUCK_AFTER_S: Final = 30.0
#: Real mode's default stuck limit, in wall-clock seconds (`--stuck-after`):
#: generous, because a healthy real run on a loaded host takes minutes; a run
#: past it is reported as stuck (exit 1, with its last operations).
REAL_STUCK_AFTER_S: Final = 900.0
#: The largest `--stuck-after` (a day).
MAX_STUCK_AFTER_S: Final = 86_400.0
#: Seeds of one in-process anomaly sweep (and per matrix entry): a seed takes
#: 0.1-1 s, so 10^7 seeds is months of CPU, past any sensible sweep.
MAX_SEEDS: Final = 10_000_000
#: A config file or latency profile: an empirical profile of 10^6 samples is
#: ~20 MB; reading stops here, so `/dev/zero` is refused instead of eating RAM.
MAX_FILE_BYTES: Final = 64 * 2**20


def check_real_adapters(name: str, coordinator: CoordinatorConfig) -> None:
    """Refuses a real-mode configuration whose adapters cannot run as OS
    processes: more than `MAX_REAL_ADAPTERS`, or an oracle that lives in one
    process (the in-memory oracle cannot be shared).

    Raises:
        InvalidUsage: with the reason.
    """
    n = coordinator.adapters
    if n > MAX_REAL_ADAPTERS:
        raise InvalidUsage(
            f"{name}: real mode runs at most {MAX_REAL_ADAPTERS} adapters (each is an OS process "
            f"with about ten Postgres connections), got {n}"
        )
    if n > 1 and coordinator.oracle is OracleKind.MEMORY:
        raise InvalidUsage(f"{name}: {n} adapter processes need a shared oracle; the in-memory oracle lives in one process")


def read_text_file(path: Path, what: str) -> str:
    """`path`'s UTF-8 text, or `InvalidUsage` naming `what` and the reason
    (unreadable, not UTF-8, larger than `MAX_FILE_BYTES`). Pipes (`<(…)`) work."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidUsage(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InvalidUsage(f"{what} {path} is larger than the maximum {MAX_FILE_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidUsage(f"{what} {path} is not UTF-8 text (byte {exc.start})") from exc


def check_int(name: str, value: int, *, low: int, high: int, unit: str = "") -> None:
    """`InvalidUsage` unless `low <= value <= high`, naming the limit (`name` is
    how the user spelled it, e.g. `--concurrency`)."""
    if value < low:
        raise InvalidUsage(f"{name} must be >= {low}, got {value}")
    if value > high:
        raise InvalidUsage(f"{name} {value} exceeds the maximum {high}{' ' + unit if unit else ''}")


def check_float(
    name: str, value: float, *, low: float, high: float, unit: str = "", strict_low: bool = False
) -> None:
    """As `check_int`, and NaN and infinities are refused."""
    if not math.isfinite(value):
        raise InvalidUsage(f"{name} must be a finite number, got {value}")
    if value < low or (strict_low and value == low):
        raise InvalidUsage(f"{name} must be {'>' if strict_low else '>='} {low:g}, got {value:g}")
    if value > high:
        raise InvalidUsage(f"{name} {value:g} exceeds the maximum {high:g}{' ' + unit if unit else ''}")
