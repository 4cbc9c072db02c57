"""A large, realistic trace for benchmarks: `sim.history.checker.generate` histories
(strictly serializable by construction, with timestamps, drops, indeterminate
ops) laid end to end in chunks, with a few planted anomalies, written to
Parquet one chunk (row group) at a time so memory stays bounded whatever
`--ops` is.

Each chunk is shifted past the previous one in op ids, processes, time,
timestamps and elements, and its tables are renamed, so the whole trace is one
valid history. Planted: in a few chunks one read loses an element (a
`stale-read` and a whitebox mismatch) — the benchmark checks both checkers find
them.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow.parquet as pq

from sim.history.checker.generate import GenConfig, drop_read_element, generate
from sim.history.model import NONE, History
from sim.history.traces import (
    EVENTS_FILE,
    META_FILE,
    OPS_FILE,
    OPS_SCHEMA,
    SCHEMA_VERSION,
    _events_table,
    _ops_table,
)
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from array import array

__all__ = ["CHUNK", "MAX_SYNTH_OPS", "synth_trace"]

CHUNK: Final = 200_000
#: The largest trace `synth_trace` writes: ~60 bytes per operation on disk, so
#: 10^9 is ~60 GB — past any benchmark's need (the default is 10^7).
MAX_SYNTH_OPS: Final = 10**9


def _shift(col: array[int], by: int) -> None:
    for i, v in enumerate(col):
        if v != NONE:
            col[i] = v + by


def _offset(h: History, k: int, base: dict[str, int]) -> None:
    """Moves chunk `k` past everything written before it (in place)."""
    _shift(h.op_id, base["op"])
    _shift(h.process, base["proc"])
    _shift(h.invoke, base["t"])
    _shift(h.complete, base["t"])
    _shift(h.read_ts, base["dts"])
    _shift(h.write_ts, base["dts"])
    _shift(h.catalog_ts, base["cts"])
    _shift(h.el, base["el"])
    _shift(h.res, base["el"])
    h.names = [f"c{k}.{n}" for n in h.names]
    base["op"] = max(h.op_id) + 1
    base["proc"] = max(h.process) + 1
    base["t"] = max(x for x in h.complete if x != NONE) + 1_000_000
    base["dts"] = max([x for x in h.read_ts if x != NONE] + [x for x in h.write_ts if x != NONE] + [base["dts"]]) + 1
    base["cts"] = max([x for x in h.catalog_ts if x != NONE] + [base["cts"]]) + 1
    base["el"] = max([*h.el, *h.res, base["el"]]) + 1


def synth_trace(
    out: Path | str,
    ops: int,
    *,
    seed: int = 0,
    chunk: int = CHUNK,
    planted: int = 3,
    run: str = "synth",
    config: str = "synthetic",
) -> Path:
    """Writes a trace of `ops` operations to `out`; returns the directory.

    Raises:
        InvalidUsage: `ops` outside 1..`MAX_SYNTH_OPS`, a negative `planted`
            or `chunk`, or a seed that does not fit a trace's int64 column.
    """
    if not 1 <= ops <= MAX_SYNTH_OPS:
        raise InvalidUsage(f"--ops must be between 1 and {MAX_SYNTH_OPS}, got {ops}")
    if planted < 0:
        raise InvalidUsage(f"--planted must be >= 0, got {planted}")
    if chunk < 1:
        raise InvalidUsage(f"chunk must be >= 1, got {chunk}")
    if not -(2**63) < seed < 2**63:
        raise InvalidUsage(f"--seed {seed} does not fit in 64 bits")
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    base = {"op": 0, "proc": 0, "t": 0, "dts": 0, "cts": 0, "el": 0}
    n_chunks = max(1, -(-ops // chunk))
    plant_at = set(rng.sample(range(n_chunks), min(planted, n_chunks)))
    tmp = d / f".{OPS_FILE}.tmp-{os.getpid()}"
    written = 0
    try:
        with pq.ParquetWriter(tmp, OPS_SCHEMA, compression="zstd") as w:
            for k in range(n_chunks):
                n = min(chunk, ops - written)
                h = generate(GenConfig(ops=n, processes=10, window=4, seed=seed * 1_000_003 + k, p_info=0.02))
                if k in plant_at and (r := drop_read_element(h, rng)) is not None:
                    h = r[0]
                _offset(h, k, base)
                w.write_table(_ops_table(h, run, config, seed), row_group_size=chunk)
                written += n
        tmp.replace(d / OPS_FILE)
    finally:
        tmp.unlink(missing_ok=True)  # ours, and never renamed if we get here with it
    pq.write_table(_events_table([], run), d / EVENTS_FILE)
    meta = {"schema_version": SCHEMA_VERSION, "run": run, "config": config, "seed": seed, "ops": written,
            "events": 0, "workload": "synthetic-set", "concurrency": 10, "planted": len(plant_at)}
    (d / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return d
