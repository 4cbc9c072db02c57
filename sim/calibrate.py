"""`coordsim calibrate`: measures the round trips virtual mode models — the
Postgres oracle's statements, the timestamp stash's transactions, Consensus
and Blob operations — against a real Postgres (and S3 if given), and renders
them as a latency profile `--mode virtual` reads (`sim.config.load_profile`).

Each operation is timed `samples` times sequentially (one client, no
contention: the model adds queueing itself) in a fresh database that is
dropped afterwards. A log-normal is fitted by its median and the spread of the
log of the samples between the 16th and 84th percentiles.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from typing import TYPE_CHECKING, Any, Final

from persist.location import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["MAX_SAMPLES", "MIN_SAMPLES", "calibrate_profile", "check_samples", "fit", "render_profile"]

#: Round trips measured per operation: below 5 the spread is noise; each is a
#: real round trip (about a millisecond, 11 operations), so 10^6 is hours.
MIN_SAMPLES: Final = 5
MAX_SAMPLES: Final = 1_000_000


def check_samples(samples: int) -> None:
    """`InvalidUsage` unless `MIN_SAMPLES <= samples <= MAX_SAMPLES` (call it
    before starting a server: it is the CLI's `--samples`)."""
    if samples < MIN_SAMPLES:
        raise InvalidUsage(f"--samples must be >= {MIN_SAMPLES}, got {samples}")
    if samples > MAX_SAMPLES:
        raise InvalidUsage(f"--samples {samples} exceeds the maximum {MAX_SAMPLES} round trips")


#: Latency names virtual mode uses that a calibration does not measure.
_UNMEASURED: dict[str, dict[str, Any]] = {
    "controller.catalog_feed": {"kind": "lognormal", "median_ms": 2.0, "sigma": 0.5},
}


def fit(samples_s: list[float]) -> tuple[float, float]:
    """(median ms, sigma) of a log-normal matching `samples_s`."""
    xs = sorted(max(s, 1e-7) for s in samples_s)
    median = statistics.median(xs)
    lo = xs[int(0.16 * (len(xs) - 1))]
    hi = xs[int(0.84 * (len(xs) - 1))]
    sigma = max(0.05, (math.log(hi) - math.log(lo)) / 2)
    return median * 1000, round(sigma, 3)


async def _time(samples: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    out = []
    await call(-1)  # warm the connection
    for i in range(samples):
        t0 = time.perf_counter()  # wall time is what we measure here
        await call(i)
        out.append(time.perf_counter() - t0)
    return out


async def _measure(pg_url: str, samples: int, s3_url: str | None) -> dict[str, list[float]]:
    from oracle.pgstash import PostgresTimestampStash
    from oracle.postgres import PostgresOracle
    from persist.file import FileBlob
    from persist.location import Blob, SeqNo, VersionedData
    from persist.open import open_blob, open_consensus
    from sim.runner import drop_database, fresh_database
    from sim.runtime import Runtime

    rt = Runtime(seed=0)
    db = await fresh_database(pg_url)
    out: dict[str, list[float]] = {}
    try:
        oracle = await PostgresOracle.open(db, "calibrate", rt)
        try:
            out["oracle.pg.read_ts"] = await _time(samples, lambda i: oracle.read_ts())
            out["oracle.pg.write_ts"] = await _time(samples, lambda i: oracle.write_ts())
            ts = await oracle.read_ts()
            out["oracle.pg.apply_write"] = await _time(samples, lambda i: oracle.apply_write(ts + i + 2))
        finally:
            await oracle.close()
        stash = await PostgresTimestampStash.connect(db, rt, name="calibrate")
        try:
            epoch = await stash.open()
            out["stash.txn"] = await _time(samples, lambda i: stash.write_upper("calibrate", i + 2, epoch))
            out["catalog.stash.txn"] = await _time(samples, lambda i: stash.confirm_leadership(epoch))
        finally:
            await stash.close()
        consensus = await open_consensus(db)
        try:
            seq: list[SeqNo | None] = [None]

            async def cas(i: int) -> None:
                cur = seq[0]
                nxt = SeqNo.minimum() if cur is None else cur.next()
                await consensus.compare_and_set("calibrate", cur, VersionedData(nxt, b"x" * 256))
                seq[0] = nxt

            out["consensus.cas"] = await _time(samples, cas)
            out["consensus.head"] = await _time(samples, lambda i: consensus.head("calibrate"))
            out["consensus.scan"] = await _time(
                samples, lambda i: consensus.scan("calibrate", SeqNo.minimum(), 10)
            )
        finally:
            await consensus.close()
        with tempfile.TemporaryDirectory(prefix="coordsim-calibrate-") as tmp:
            blob: Blob = await open_blob(s3_url) if s3_url else FileBlob(tmp, fsync=False)
            try:

                async def put(i: int) -> None:
                    await blob.set(f"k{i % 8}", b"x" * 4096)

                async def get(i: int) -> None:
                    await blob.get(f"k{i % 8}")

                out["blob.set"] = await _time(samples, put)
                out["blob.get"] = await _time(samples, get)
            finally:
                await blob.close()
    finally:
        await drop_database(pg_url, db)
    return out


def calibrate_profile(pg_url: str, *, samples: int = 200, s3_url: str | None = None) -> dict[str, tuple[float, float, int]]:
    """Measures against `pg_url` (a server; a fresh database is used and dropped);
    returns name → (median ms, sigma, samples)."""
    import asyncio

    check_samples(samples)
    raw = asyncio.run(_measure(pg_url, samples, s3_url))
    return {name: (*fit(xs), len(xs)) for name, xs in raw.items()}


def render_profile(measured: dict[str, tuple[float, float, int]], *, json_format: bool = False) -> str:
    """The profile file text (TOML, or JSON), with where its numbers came from."""
    import platform

    latency: dict[str, dict[str, Any]] = {"default": {"kind": "constant", "ms": 0.0}}
    for name, (median_ms, sigma, _) in sorted(measured.items()):
        latency[name] = {"kind": "lognormal", "median_ms": round(median_ms, 4), "sigma": sigma}
    for name, spec in _UNMEASURED.items():
        latency.setdefault(name, spec)
    meta = {
        "source": f"coordsim calibrate on {platform.node()} ({platform.machine()}, Python {platform.python_version()})",
        "samples": {name: n for name, (_, _, n) in sorted(measured.items())},
        "unmeasured": sorted(_UNMEASURED),
    }
    if json_format:
        return json.dumps({"meta": meta, "latency": latency}, indent=2, sort_keys=True) + "\n"
    lines = [
        "# A coordsim latency profile written by `coordsim calibrate` (round trips, ms).",
        f"# {meta['source']}",
        "",
        "[meta]",
        f"source = {json.dumps(meta['source'])}",
        f"unmeasured = {json.dumps(meta['unmeasured'])}",
    ]
    for name, spec in latency.items():
        lines.append("")
        lines.append(f"[latency.{json.dumps(name)}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in spec.items())
    return "\n".join(lines) + "\n"
