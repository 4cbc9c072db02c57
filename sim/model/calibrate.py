"""`coordsim calibrate`: measures every round trip virtual mode models — each
statement of the Postgres oracle, the timestamp store's and the catalog stash's
transactions, every Consensus and Blob operation — against a real Postgres (and
S3 if given), and renders them as a latency profile `--mode virtual` reads
(`sim.load.latency_profile.load_profile`), headed by the machine, server and date they were
measured on.

Each operation is timed `samples` times (one client, no contention: the model
adds queueing itself), the operations interleaved round-robin so that a burst
of load on a shared machine lands on all of them alike, after `WARMUP` untimed
rounds, in a fresh database that is dropped afterwards. A log-normal is fitted
by its median and the spread of the log of the samples between the 16th and
84th percentiles. What no backend can measure (coordinator CPU, the simulated
replica, the catalog feed) is listed, with sources, in `sim.model.unmeasured`.

A busy host moves these round trips many times over (issue 35 saw 20-50x), so
`check_host` watches the machine first with the report's own busy-host rule
(`sim.compare.provenance.busy_reason`), and the profile records what it saw
(`[meta.provenance]`), including whether calibrate was forced on a busy host.

`coordsim calibrate --from RUN_DIR` builds a profile from a real run's own
recordings instead (`sim.model.from_run`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import count
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final
from urllib.parse import urlsplit

from sim.model.unmeasured import PROFILE_LATENCIES, unmeasured
from sim.runtime.errors import InvalidUsage
from sim.runtime.owners import owned_tmpdir

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from persist.location import Blob
    from sim.runtime.core import Runtime

__all__ = [
    "MAX_SAMPLES",
    "MEASURED",
    "MIN_SAMPLES",
    "WARMUP",
    "Calibration",
    "Environment",
    "HostCheck",
    "calibrate_profile",
    "check_host",
    "check_samples",
    "fit",
    "provenance_record",
    "render_profile",
]

#: Round trips measured per operation: below 5 the spread is noise; each is a
#: real round trip (0.2-5 ms, 14 operations), so 10^6 is hours.
MIN_SAMPLES: Final = 5
MAX_SAMPLES: Final = 1_000_000

#: Untimed rounds first: asyncpg prepares each statement once per pooled
#: connection, and the first calls pay for it.
WARMUP: Final = 10

#: Every latency name calibrate measures, and the real operation timed for it
#: (in the order they are timed within a round).
MEASURED: Final[Mapping[str, str]] = {
    "oracle.pg.read_ts": "PostgresOracle.read_ts: SELECT of the timeline's row",
    "oracle.pg.peek_write_ts": "PostgresOracle.peek_write_ts: SELECT of the timeline's row",
    "oracle.pg.write_ts": "PostgresOracle.write_ts: UPDATE ... RETURNING, committed",
    "oracle.pg.apply_write": "PostgresOracle.apply_write of the write_ts just allocated: UPDATE, committed",
    "stash.txn": (
        "PostgresTimestampStore.confirm_leadership: lock the epoch row, commit (today's loop does one per "
        "batch of peek results; write_upper and open are the same kind of transaction)"
    ),
    "catalog.stash.txn": (
        "PostgresStashStore.append of one catalog entry with the epoch check (a DDL's commit); the model "
        "charges the catalog stash's reads the same"
    ),
    "consensus.cas": "Postgres Consensus compare_and_set of a 256-byte state",
    "consensus.head": "Postgres Consensus head",
    "consensus.scan": "Postgres Consensus scan of the last 10 versions (limit 256, as persist's replay)",
    "consensus.truncate": "Postgres Consensus truncate of one version",
    "blob.set": "Blob set of 4 KiB",
    "blob.get": "Blob get of 4 KiB",
    "blob.delete": "Blob delete of an existing key",
    "blob.list": "Blob list_keys of a prefix holding 8 keys",
}

_STATE: Final = b"x" * 256
_BLOB_VALUE: Final = b"x" * 4096
_BLOB_KEYS: Final = 8


def check_samples(samples: int) -> None:
    """`InvalidUsage` unless `MIN_SAMPLES <= samples <= MAX_SAMPLES` (call it
    before starting a server: it is the CLI's `--samples`)."""
    if samples < MIN_SAMPLES:
        raise InvalidUsage(f"--samples must be >= {MIN_SAMPLES}, got {samples}")
    if samples > MAX_SAMPLES:
        raise InvalidUsage(f"--samples {samples} exceeds the maximum {MAX_SAMPLES} round trips")


def fit(samples_s: list[float]) -> tuple[float, float]:
    """(median ms, sigma) of a log-normal matching `samples_s`."""
    xs = sorted(max(s, 1e-7) for s in samples_s)
    median = statistics.median(xs)
    lo = xs[int(0.16 * (len(xs) - 1))]
    hi = xs[int(0.84 * (len(xs) - 1))]
    sigma = max(0.05, (math.log(hi) - math.log(lo)) / 2)
    return round(median * 1000, 4), round(sigma, 3)


def _p99_ms(samples_s: list[float]) -> float:
    xs = sorted(samples_s)
    return round(xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] * 1000, 4)


@final
@dataclass(frozen=True)
class Environment:
    """Where and when a calibration ran: what its numbers depend on."""

    date: str  # UTC, minutes
    machine: str  # CPU model and core count
    os: str
    python: str
    postgres: str  # server_version
    postgres_server: str  # embedded / external, local / remote
    fsync: str  # as the server reports it
    synchronous_commit: str
    blob: str
    samples: int
    load_average: tuple[float, float]  # 1-minute load at the start and the end (-1: unknown)


@final
class Calibration(dict[str, tuple[float, float, int]]):
    """name → (median ms, sigma, samples), as `coordsim calibrate` prints them,
    plus the measured p99 of each and the `Environment` they were measured in."""

    def __init__(
        self,
        fits: Mapping[str, tuple[float, float, int]],
        *,
        p99_ms: Mapping[str, float],
        environment: Environment,
        provenance: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(fits)
        self.p99_ms = dict(p99_ms)
        self.environment = environment
        #: `[meta.provenance]`: the host check and who ran it where (None: a
        #: profile written before calibrate recorded it, like the shipped one).
        self.provenance = dict(provenance) if provenance is not None else None


# --- the host -------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class HostCheck:
    """How busy the machine was while `check_host` watched it: the 1-minute
    load before and after, the cores other processes used, and the busy
    verdict of the report's provenance (None: quiet)."""

    seconds: float
    load_avg_1m_start: float | None
    load_avg_1m_end: float | None
    other_cpu_cores: float | None
    usable_cores: int
    busy_reason: str | None

    @property
    def busy(self) -> bool:
        return self.busy_reason is not None


def check_host(*, seconds: float | None = None) -> HostCheck:
    """Watches the host for `seconds` (default: the shortest span whose CPU
    figures count, `sim.compare.provenance.MIN_SAMPLED_S`) while this process
    idles, and judges it as a compare run's provenance does: busy when other
    processes use more than a quarter of a core or the load exceeds the cores.
    Call it before anything of the calibration starts (it blocks)."""
    from sim.compare.host import HostSampler
    from sim.compare.provenance import MIN_SAMPLED_S, busy_reason

    span = MIN_SAMPLED_S if seconds is None else seconds
    load0 = _load_or_none()
    sampler = HostSampler()
    sampler.start()
    time.sleep(span)  # idle on purpose: whatever runs meanwhile is someone else's
    usage = sampler.stop()
    load1 = _load_or_none()
    return HostCheck(
        seconds=round(usage.wall_s, 3),
        load_avg_1m_start=load0,
        load_avg_1m_end=load1,
        other_cpu_cores=None if usage.other_cores is None else round(usage.other_cores, 3),
        usable_cores=usage.usable_cores,
        busy_reason=busy_reason(usage, load0, load1, usage.usable_cores),
    )


def provenance_record(
    check: HostCheck, *, forced: bool, pg_isolation: str, argv: Sequence[str], started: datetime
) -> dict[str, Any]:
    """The profile's `[meta.provenance]`: the run's command, code and machine
    (`sim.compare.provenance.start_provenance`), the host check, whether
    `--force` overrode a busy verdict, and the isolation level measured at.
    Unknown values are left out (TOML has no null)."""
    from sim.compare.provenance import start_provenance

    start = asdict(start_provenance(argv=argv, started=started))
    record: dict[str, Any] = {
        **{k: v for k, v in start.items() if k != "load_avg_1m_start"},
        "host_check_s": check.seconds,
        "load_avg_1m_before": check.load_avg_1m_start,
        "load_avg_1m_after_check": check.load_avg_1m_end,
        "other_cpu_cores_before": check.other_cpu_cores,
        "host_busy": check.busy,
        "busy_reason": check.busy_reason,
        "forced_on_busy_host": forced and check.busy,
        "pg_isolation": pg_isolation,
    }
    return {k: v for k, v in record.items() if v is not None}


# --- measuring ------------------------------------------------------------------------


_Op: TypeAlias = "Callable[[], Awaitable[object]]"


async def _rounds(ops: Mapping[str, _Op], samples: int) -> dict[str, list[float]]:
    """`WARMUP` untimed rounds, then `samples` timed ones, each calling every op once."""
    for _ in range(WARMUP):
        for op in ops.values():
            await op()
    out: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(samples):
        for name, op in ops.items():
            t0 = time.perf_counter()  # wall time is what is measured here
            await op()
            out[name].append(time.perf_counter() - t0)
    return out


async def _oracle_ops(stack: contextlib.AsyncExitStack, db: str, rt: Runtime) -> dict[str, _Op]:
    from oracle.open import OracleBackend, OracleSpec, open_oracles

    oracles = await open_oracles(OracleSpec(OracleBackend.POSTGRES, url=db), rt)
    stack.push_async_callback(oracles.close)
    oracle = await oracles.timeline("calibrate")
    last = [await oracle.write_ts()]

    async def write_ts() -> None:
        last[0] = await oracle.write_ts()

    async def apply_write() -> None:
        await oracle.apply_write(last[0].ts)

    return {
        "oracle.pg.read_ts": oracle.read_ts,
        "oracle.pg.peek_write_ts": oracle.peek_write_ts,
        "oracle.pg.write_ts": write_ts,
        "oracle.pg.apply_write": apply_write,
    }


async def _store_ops(stack: contextlib.AsyncExitStack, db: str, rt: Runtime) -> dict[str, _Op]:
    from catalog.api import Appended
    from catalog.objects import CatalogUpdate, Config
    from catalog.stash_postgres import PostgresStashStore
    from oracle.timestamp_store_postgres import PostgresTimestampStore

    timestamps = await PostgresTimestampStore.connect(db, rt, name="calibrate")
    stack.push_async_callback(timestamps.close)
    epoch = await timestamps.open()

    store = await PostgresStashStore.connect(db, rt, env="calibrate")
    stack.push_async_callback(store.close)
    writer = "calibrate"
    first = await store.append(0, 1, [CatalogUpdate.of(Config("epoch", 1), 0, 1)], None, writer, rt.unique_hex(64))
    if not isinstance(first, Appended):
        raise InvalidUsage(f"calibrate: the fresh catalog stash refused its first append: {first}")
    upper, n = [1], count()

    async def append() -> None:
        u, i = upper[0], next(n)
        update = CatalogUpdate.of(Config(f"calibrate_{i}", i), u, 1)
        result = await store.append(u, u + 1, [update], 1, writer, rt.unique_hex(64))
        if not isinstance(result, Appended):
            raise InvalidUsage(f"calibrate: catalog stash append at {u} did not apply: {result}")
        upper[0] = u + 1

    return {"stash.txn": lambda: timestamps.confirm_leadership(epoch), "catalog.stash.txn": append}


async def _consensus_ops(stack: contextlib.AsyncExitStack, db: str, samples: int) -> dict[str, _Op]:
    from persist.location import CaSResult, SeqNo, VersionedData
    from persist.open import open_consensus

    consensus = await open_consensus(db)
    stack.push_async_callback(consensus.close)
    heads: dict[str, SeqNo | None] = {"calibrate": None, "calibrate-truncate": None}

    async def cas(key: str = "calibrate") -> None:
        cur = heads[key]
        nxt = SeqNo.minimum() if cur is None else cur.next()
        if await consensus.compare_and_set(key, cur, VersionedData(nxt, _STATE)) is not CaSResult.COMMITTED:
            raise InvalidUsage(f"calibrate: a compare_and_set on {key!r} lost to nobody")
        heads[key] = nxt

    await cas()
    for _ in range(WARMUP + samples + 1):  # one version per truncate, and the head that survives
        await cas("calibrate-truncate")
    below = count(1)

    async def scan() -> None:
        head = heads["calibrate"]
        assert head is not None
        await consensus.scan("calibrate", SeqNo(max(0, head.value - 9)), 256)

    return {
        "consensus.cas": cas,
        "consensus.head": lambda: consensus.head("calibrate"),
        "consensus.scan": scan,
        "consensus.truncate": lambda: consensus.truncate("calibrate-truncate", SeqNo(next(below))),
    }


async def _blob_ops(stack: contextlib.AsyncExitStack, s3_url: str | None, samples: int) -> dict[str, _Op]:
    from persist.open import open_blob

    blob: Blob
    if s3_url:
        blob = await open_blob(s3_url)
    else:
        # As real mode's default Blob (sim/compare/runner.py): files, fsync=false.
        tmp = stack.enter_context(owned_tmpdir("coordsim-calibrate-", "blob"))  # reclaimed after a SIGKILL
        blob = await open_blob(f"file://{tmp}?fsync=false")
    stack.push_async_callback(blob.close)
    keys = [f"calibrate-k{i}" for i in range(_BLOB_KEYS)]

    async def tidy() -> None:
        for key in keys:
            await blob.delete(key)

    stack.push_async_callback(tidy)  # an S3 bucket is the user's: leave nothing in it
    for key in keys:
        await blob.set(key, _BLOB_VALUE)
    deletes = [f"calibrate-d{i}" for i in range(WARMUP + samples)]
    for key in deletes:
        await blob.set(key, _BLOB_VALUE)
    i_set, i_get, i_del = count(), count(), count()
    return {
        "blob.set": lambda: blob.set(keys[next(i_set) % _BLOB_KEYS], _BLOB_VALUE),
        "blob.get": lambda: blob.get(keys[next(i_get) % _BLOB_KEYS]),
        "blob.delete": lambda: blob.delete(deletes[next(i_del)]),
        "blob.list": lambda: blob.list_keys("calibrate-k"),
    }


async def _server_settings(db: str) -> tuple[str, str, str]:
    """(server_version, fsync, synchronous_commit) as the server reports them."""
    import asyncpg

    from sim.runtime.urls import driver_url

    conn = await asyncpg.connect(driver_url(db), timeout=10)
    try:
        values = [str(await conn.fetchval(f"SHOW {name}")) for name in ("server_version", "fsync", "synchronous_commit")]
    finally:
        await conn.close()
    return values[0], values[1], values[2]


def _server_kind(pg_url: str) -> str:
    from sim.services.postgres import embedded_serving

    if embedded_serving(pg_url) is not None:
        return "embedded (started by coordsim), 127.0.0.1"
    host = urlsplit(pg_url).hostname
    if host in (None, "", "127.0.0.1", "localhost", "::1") or (host or "").startswith("/"):
        return "external ($COORDSIM_POSTGRES_URL), on this machine"
    return "external ($COORDSIM_POSTGRES_URL), on another host: its network round trip is included"


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _os_name() -> str:
    kernel = f"{platform.system()} {platform.release()}".strip()
    try:
        pretty = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        pretty = ""
    return f"{pretty} ({kernel})" if pretty else kernel


def _load_or_none() -> float | None:
    load = _load()
    return None if load < 0 else load


def _load() -> float:
    """The 1-minute load average (-1 where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return -1.0


async def _measure(
    pg_url: str, samples: int, s3_url: str | None, rt: Runtime
) -> tuple[dict[str, list[float]], Environment]:
    from sim.load.harness import drop_database, fresh_database

    load0 = _load()
    date = datetime.fromtimestamp(rt.wall_ms() / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    db = await fresh_database(pg_url)
    try:
        version, fsync, sync_commit = await _server_settings(db)
        async with contextlib.AsyncExitStack() as stack:
            ops: dict[str, _Op] = {}
            ops |= await _oracle_ops(stack, db, rt)
            ops |= await _store_ops(stack, db, rt)
            ops |= await _consensus_ops(stack, db, samples)
            ops |= await _blob_ops(stack, s3_url, samples)
            assert list(ops) == list(MEASURED), "MEASURED names the operations in the order they run"
            raw = await _rounds(ops, samples)
    finally:
        await drop_database(pg_url, db)
    env = Environment(
        date=date,
        machine=f"{_cpu_model()}, {os.cpu_count() or '?'} cores",
        os=_os_name(),
        python=platform.python_version(),
        postgres=version,
        postgres_server=_server_kind(pg_url),
        fsync=fsync,
        synchronous_commit=sync_commit,
        blob="S3 (--s3)" if s3_url else "files in a temporary directory, fsync=false (real mode's default Blob)",
        samples=samples,
        load_average=(load0, _load()),
    )
    return raw, env


def calibrate_profile(pg_url: str, *, samples: int = 200, s3_url: str | None = None) -> Calibration:
    """Measures against `pg_url` (a server; a fresh database is used and dropped);
    returns name → (median ms, sigma, samples) with the environment."""
    from sim.runtime.core import run

    check_samples(samples)

    async def main(rt: Runtime) -> tuple[dict[str, list[float]], Environment]:
        return await _measure(pg_url, samples, s3_url, rt)

    raw, env = run(main, virtual=False)
    return Calibration(
        {name: (*fit(xs), len(xs)) for name, xs in raw.items()},
        p99_ms={name: _p99_ms(xs) for name, xs in raw.items()},
        environment=env,
    )


# --- rendering ------------------------------------------------------------------------


def _fsync_note(env: Environment) -> str:
    if env.fsync == "on" and env.synchronous_commit != "off":
        return (
            "fsync on, as `coordsim compare`/`run --mode real` start the embedded Postgres: the oracle, "
            "its timestamp store and the catalog stash stand for durable stores (CockroachDB in the seeds), "
            "and a commit's flush is the round trip the write path pays serially"
        )
    return (
        f"fsync {env.fsync}, synchronous_commit {env.synchronous_commit}: commits do not wait for "
        "durable storage, so write round trips are those of a non-durable store (real-mode runs use fsync on)"
    )


def _provenance_comment(prov: Mapping[str, Any] | None) -> list[str]:
    """The header's line on the host check ([meta.provenance] has the figures)."""
    if prov is None:
        return []
    if prov.get("forced_on_busy_host"):
        return [f"# FORCED ON A BUSY HOST (--force): {prov.get('busy_reason')}; these round trips include its load."]
    if prov.get("host_busy"):
        return [f"# The host was busy: {prov.get('busy_reason')}."]
    return ["# The host was quiet when calibration started (see [meta.provenance])."]


def _meta(measured: Calibration) -> dict[str, Any]:
    env = asdict(measured.environment)
    env["load_average"] = list(measured.environment.load_average)
    return {
        "tool": "coordsim calibrate",
        **env,
        "fsync_note": _fsync_note(measured.environment),
        "unmeasured": [u.name for u in unmeasured()],
        "unmeasured_sources": "sim/model/unmeasured.py (python -m sim.model.unmeasured)",
        "operation": {name: MEASURED[name] for name in measured},
        "samples_per_operation": {name: n for name, (_, _, n) in measured.items()},
        "p99_ms": dict(measured.p99_ms),
        **({"provenance": dict(measured.provenance)} if measured.provenance is not None else {}),
    }


def _latencies(measured: Calibration) -> dict[str, dict[str, Any]]:
    latency: dict[str, dict[str, Any]] = {"default": {"kind": "constant", "ms": 0.0}}
    for name, (median_ms, sigma, _) in measured.items():
        latency[name] = {"kind": "lognormal", "median_ms": median_ms, "sigma": sigma}
    for name, dist in PROFILE_LATENCIES.items():
        latency[name] = dist.to_dict()
    return latency


def render_profile(measured: Calibration, *, json_format: bool = False) -> str:
    """The profile file text (TOML, or JSON): every latency the model draws that
    a backend can time, the unmeasured ones that only a profile sets (from
    `sim.model.unmeasured`), and where and when the numbers were measured."""
    meta = _meta(measured)
    latency = _latencies(measured)
    if json_format:
        return json.dumps({"meta": meta, "latency": latency}, indent=2) + "\n"
    env = measured.environment
    lines = [
        "# A coordsim latency profile written by `coordsim calibrate` (round trips, ms).",
        f"# Measured {env.date} on {env.machine}; {env.os}; Python {env.python}.",
        f"# PostgreSQL {env.postgres}, {env.postgres_server}; fsync={env.fsync}, "
        f"synchronous_commit={env.synchronous_commit}.",
        f"#   {_fsync_note(env)}.",
        f"# Blob: {env.blob}.",
        f"# {env.samples} samples per operation after {WARMUP} warm-up rounds, one client, the operations "
        f"interleaved; 1-minute load average {env.load_average[0]:g} at the start, {env.load_average[1]:g} "
        "at the end.",
        "# Fit: log-normal, median = the samples' median, sigma = half the log spread between the 16th and",
        "# 84th percentiles; p99 is the measured one.",
        *_provenance_comment(measured.provenance),
        "#",
        f"#   {'name':<24}{'median':>8}{'sigma':>7}{'p99':>8}  measured as",
    ]
    for name, (median_ms, sigma, _) in measured.items():
        lines.append(
            f"#   {name:<24}{median_ms:>8.3f}{sigma:>7.2f}{measured.p99_ms[name]:>8.3f}  {MEASURED[name]}"
        )
    lines += [
        "#",
        "# Not measured (values and sources in sim/model/unmeasured.py; `python -m sim.model.unmeasured` prints them):",
        *(f"#   {name}: written below from sim/model/unmeasured.py" for name in PROFILE_LATENCIES),
        "#   replica.*: controllers/replica_costs.py REPLICA_LATENCIES, unless this file names them",
        "#   coordinator CPU: coordinator/config.py Costs, unless a config file's [costs] overrides them",
        "",
        "[meta]",
    ]
    tables: list[str] = []
    for key, value in meta.items():
        if isinstance(value, dict):
            tables += ["", f"[meta.{key}]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())]
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    lines += tables
    for name, spec in latency.items():
        lines += ["", f"[latency.{json.dumps(name)}]", *(f"{k} = {json.dumps(v)}" for k, v in spec.items())]
    return "\n".join(lines) + "\n"
