"""The on-disk trace format: a history and its internal events as Arrow/Parquet.

A trace directory holds `ops.parquet` (the client-operation table, `OPS_SCHEMA`),
`events.parquet` (the internal-event table, `EVENTS_SCHEMA`) and `meta.json`
(schema version, run, config, seed, counts) — the history format of DESIGN.md §7.
It lives apart from `sim.history.model`, the in-memory model it stores. Each file is
written under a temporary name and renamed, `meta.json` last, so a reader never
sees half a trace; readers reject another `SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.history.model import (
    KIND_CODE,
    KINDS,
    NONE,
    OK,
    READ,
    STATUSES,
    Event,
    History,
    HistoryError,
    Status,
)
from sim.runtime.outputs import DIR_MODE, atomic_write

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = [
    "EVENTS_FILE",
    "EVENTS_SCHEMA",
    "META_FILE",
    "OPS_FILE",
    "OPS_SCHEMA",
    "SCHEMA_VERSION",
    "Trace",
    "events_from_table",
    "find_traces",
    "history_from_table",
    "read_trace",
    "write_trace",
]

#: Version of the Parquet schemas below; bump on any incompatible change.
SCHEMA_VERSION: Final = 1
OPS_FILE: Final = "ops.parquet"
EVENTS_FILE: Final = "events.parquet"
META_FILE: Final = "meta.json"

_I64 = pa.int64()
_STR = pa.string()
_DICT = pa.dictionary(pa.int32(), pa.string())

OPS_SCHEMA: Final = pa.schema(
    [
        pa.field("run", _DICT, nullable=False),
        pa.field("config", _DICT, nullable=False),
        pa.field("seed", _I64, nullable=False),
        pa.field("op_id", _I64, nullable=False),
        pa.field("process", _I64, nullable=False),
        pa.field("client", _STR),
        pa.field("kind", _DICT, nullable=False),
        pa.field("object", _STR),
        pa.field("elements", pa.list_(_I64)),
        pa.field("args", _STR),
        pa.field("invoke_ns", _I64, nullable=False),
        pa.field("complete_ns", _I64),
        pa.field("status", _DICT, nullable=False),
        pa.field("error_code", _STR),
        pa.field("error", _STR),
        pa.field("result", pa.list_(_I64)),
        pa.field("count", _I64),
        pa.field("read_ts", _I64),
        pa.field("write_ts", _I64),
        pa.field("catalog_ts", _I64),
    ],
    metadata={"coordsim.schema": "ops", "coordsim.schema_version": str(SCHEMA_VERSION)},
)

EVENTS_SCHEMA: Final = pa.schema(
    [
        pa.field("run", _DICT, nullable=False),
        pa.field("seq", _I64, nullable=False),
        pa.field("kind", _DICT, nullable=False),
        pa.field("component", _DICT, nullable=False),
        pa.field("start_ns", _I64, nullable=False),
        pa.field("end_ns", _I64),
        pa.field("status", _DICT, nullable=False),
        pa.field("timeline", _STR),
        pa.field("ts", _I64),
        pa.field("batch_size", _I64),
        pa.field("actor", _STR),
        pa.field("ops", pa.list_(_I64)),
        pa.field("detail", _STR),
    ],
    metadata={"coordsim.schema": "events", "coordsim.schema_version": str(SCHEMA_VERSION)},
)


def _i64(col: array[int], nullable: bool) -> Any:
    a = pa.Array.from_buffers(_I64, len(col), [None, pa.py_buffer(col)])
    if nullable:
        a = pc.if_else(pc.equal(a, NONE), pa.scalar(None, _I64), a)
    return a


def _list(offsets: array[int], values: array[int], valid: list[bool] | None) -> Any:
    if offsets[-1] >= 2**31:
        raise HistoryError("more than 2**31 elements in one history column; split the run")
    off = pa.array(array("i", offsets), type=pa.int32())
    vals = pa.Array.from_buffers(_I64, len(values), [None, pa.py_buffer(values)])
    mask = None if valid is None else pa.array([not v for v in valid], type=pa.bool_())
    return pa.ListArray.from_arrays(off, vals, mask=mask)


def _const(value: str, n: int) -> Any:
    return pa.DictionaryArray.from_arrays(
        pa.array(array("i", bytes(4 * n)), type=pa.int32()), pa.array([value])
    )


def _strings(values: Sequence[str]) -> Any:
    return pa.array(values, type=_STR).dictionary_encode()


def _ops_table(h: History, run: str, config: str, seed: int) -> Any:
    n = h.n
    is_res = [h.kind[i] == READ and h.status[i] == OK for i in range(n)]
    cols = [
        _const(run, n),
        _const(config, n),
        pa.array(array("q", [seed]) * n, type=_I64),
        _i64(h.op_id, False),
        _i64(h.process, False),
        pa.array(h.client, type=_STR),
        _strings([KINDS[k].value for k in h.kind]),
        pa.array([h.name(i) for i in range(n)], type=_STR),
        _list(h.el_off, h.el, None),
        pa.array(h.args, type=_STR),
        _i64(h.invoke, False),
        _i64(h.complete, True),
        _strings([STATUSES[s].value for s in h.status]),
        pa.array(h.error_code, type=_STR),
        pa.array(h.error, type=_STR),
        _list(h.res_off, h.res, is_res),
        _i64(h.count, True),
        _i64(h.read_ts, True),
        _i64(h.write_ts, True),
        _i64(h.catalog_ts, True),
    ]
    return pa.Table.from_arrays(cols, schema=OPS_SCHEMA)


def _events_table(events: Sequence[Event], run: str) -> Any:
    rows = [
        {
            "run": run, "seq": e.seq, "kind": e.kind, "component": e.component,
            "start_ns": e.start_ns, "end_ns": e.end_ns, "status": str(e.status),
            "timeline": e.timeline, "ts": e.ts, "batch_size": e.batch_size, "actor": e.actor,
            "ops": list(e.ops), "detail": e.detail,
        }
        for e in events
    ]
    return pa.Table.from_pylist(rows, schema=EVENTS_SCHEMA)


def _read_i64(chunks: Iterable[Any]) -> array[int]:
    out = array("q")
    for a in chunks:
        if a.null_count:
            a = pc.fill_null(a, NONE)
        out.frombytes(memoryview(a.buffers()[1])[a.offset * 8 : (a.offset + len(a)) * 8])
    return out


def _read_codes(chunks: Iterable[Any], codes: dict[str, int]) -> array[int]:
    """A (dictionary-encoded) string column as small integer codes."""
    out = array("b")
    for a in chunks:
        enc = a if pa.types.is_dictionary(a.type) else pc.dictionary_encode(a)
        trans = [codes[v] for v in enc.dictionary.to_pylist()]
        out.extend(map(trans.__getitem__, enc.indices.to_pylist()))
    return out


def _read_names(chunks: Iterable[Any]) -> tuple[list[str], array[int]]:
    """Object names, each once, and one index into them per row (-1: none)."""
    index: dict[str, int] = {}
    out = array("q")
    for a in chunks:
        enc = pc.dictionary_encode(a)
        trans = [index.setdefault(v, len(index)) for v in enc.dictionary.to_pylist()]
        out.extend(-1 if x is None else trans[x] for x in enc.indices.to_pylist())
    return list(index), out


def _read_strings(chunks: Iterable[Any]) -> list[str | None]:
    out: list[str | None] = []
    for a in chunks:
        out.extend(a.to_pylist())
    return out


def _read_list(chunks: Iterable[Any]) -> tuple[array[int], array[int]]:
    """A list column as (offsets, values), the offsets starting at 0 and
    running on across chunks."""
    offsets = array("q", [0])
    out = array("q")
    for a in chunks:
        offs = a.offsets
        width = 8 if pa.types.is_large_list(a.type) else 4
        raw = array("q" if width == 8 else "i")
        raw.frombytes(memoryview(offs.buffers()[1])[offs.offset * width : (offs.offset + len(offs)) * width])
        shift = len(out) - raw[0]
        offsets.extend(o + shift for o in raw[1:])
        values = a.flatten()
        if len(values):
            out.frombytes(memoryview(values.buffers()[1])[values.offset * 8 : (values.offset + len(values)) * 8])
    return offsets, out


def _conform(t: Any, schema: Any, what: str) -> Any:
    """`t`'s columns of `schema`, cast to its types (a writer may have used
    int32 or plain strings), with nulls refused where the schema has none:
    the readers below take the raw buffers as int64, so anything else would be
    read as garbage rather than refused."""
    missing = [f.name for f in schema if f.name not in t.column_names]
    if missing:
        raise HistoryError(f"{what} table lacks columns {', '.join(missing)}")
    return pa.Table.from_arrays([_conform_column(t[f.name], f, what) for f in schema], schema=schema)


def _conform_column(col: Any, f: Any, what: str) -> Any:
    """One column of `_conform`: nulls refused where `f` has none, cast to `f`'s type."""
    if not f.nullable and col.null_count:
        raise HistoryError(f"{what} table: column {f.name} has {col.null_count} nulls")
    if col.type != f.type:
        try:
            col = col.cast(f.type)
        except (pa.ArrowException, ValueError) as exc:
            raise HistoryError(f"{what} table: column {f.name} is {col.type}, not {f.type}") from exc
    return col


def events_from_table(t: Any) -> list[Event]:
    """An events table (a trace's `events.parquet`, or a Spark group of its
    rows) as the model's events, in the table's order."""
    return [
        Event(
            seq=r["seq"], kind=r["kind"], component=r["component"],
            start_ns=r["start_ns"], end_ns=r["end_ns"], status=Status(r["status"]),
            timeline=r["timeline"], ts=r["ts"], batch_size=r["batch_size"],
            actor=r["actor"], ops=tuple(r["ops"] or ()), detail=r["detail"],
        )
        for r in _conform(t, EVENTS_SCHEMA, "events").to_pylist()
    ]


def history_from_table(t: Any) -> History:
    """An ops table (a trace's `ops.parquet`, or a Spark group of its rows)
    as the model's `History`, rows in the table's order."""
    t = _conform(t, OPS_SCHEMA, "ops")
    return _history_from_columns(t.num_rows, lambda name: t.column(name).chunks)


#: Rows of a column decoded at a time by `_history_from_parquet`.
BATCH_ROWS: Final = 65536


def _history_from_parquet(path: Path) -> History:
    """`history_from_table(pq.read_table(path))`, decoded one column and
    `BATCH_ROWS` rows at a time: that slice of Arrow data is all that ever
    sits beside the History, never the whole table (~200 MB for 1M
    operations), so export's memory stays bounded (issue 34)."""
    f = pq.ParquetFile(path)
    names = set(f.schema_arrow.names)
    missing = [c.name for c in OPS_SCHEMA if c.name not in names]
    if missing:
        raise HistoryError(f"ops table lacks columns {', '.join(missing)}")

    def column(name: str) -> Iterator[Any]:
        field = OPS_SCHEMA.field(name)
        for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=[name], use_threads=False):
            yield _conform_column(batch.column(0), field, "ops")

    h = _history_from_columns(f.metadata.num_rows, column)
    pa.default_memory_pool().release_unused()  # the allocator keeps freed pages otherwise
    return h


def _history_from_columns(n: int, column: Callable[[str], Iterable[Any]]) -> History:
    """The History of `n` rows whose conformed columns `column(name)` gives,
    chunk by chunk (Arrow arrays)."""
    h = History()
    h.n = n
    h.op_id = _read_i64(column("op_id"))
    h.process = _read_i64(column("process"))
    try:
        h.kind = _read_codes(column("kind"), {k.value: KIND_CODE[k] for k in KINDS})
        h.status = _read_codes(column("status"), {s.value: i for i, s in enumerate(STATUSES)})
    except KeyError as exc:
        raise HistoryError(f"ops table: unknown kind or status {exc}") from exc
    h.names, h.obj = _read_names(column("object"))
    h.invoke = _read_i64(column("invoke_ns"))
    h.complete = _read_i64(column("complete_ns"))
    h.el_off, h.el = _read_list(column("elements"))
    h.res_off, h.res = _read_list(column("result"))
    h.count = _read_i64(column("count"))
    h.read_ts = _read_i64(column("read_ts"))
    h.write_ts = _read_i64(column("write_ts"))
    h.catalog_ts = _read_i64(column("catalog_ts"))
    h.error_code = _read_strings(column("error_code"))
    h.error = _read_strings(column("error"))
    h.args = _read_strings(column("args"))
    h.client = _read_strings(column("client"))
    return h


@final
@dataclass(frozen=True)
class Trace:
    """A trace directory's contents."""

    history: History
    events: list[Event] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def write_trace(
    directory: Path | str,
    history: History,
    events: Sequence[Event] = (),
    *,
    run: str = "run",
    config: str = "unknown",
    seed: int = 0,
    extra_meta: Mapping[str, Any] | None = None,
) -> Path:
    """Writes `ops.parquet`, `events.parquet` and, last, `meta.json` into
    `directory`, each under a temporary name then renamed: a reader that finds
    `meta.json` finds complete files."""
    d = Path(directory)
    d.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    ops = _ops_table(history, run, config, seed)
    evs = _events_table(events, run)
    atomic_write(d / OPS_FILE, lambda p: pq.write_table(ops, p, compression="zstd"))
    atomic_write(d / EVENTS_FILE, lambda p: pq.write_table(evs, p, compression="zstd"))
    meta = {
        "schema_version": SCHEMA_VERSION,
        "run": run,
        "config": config,
        "seed": seed,
        "ops": history.n,
        "events": len(events),
        **(extra_meta or {}),
    }
    text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    atomic_write(d / META_FILE, lambda p: p.write_text(text))
    return d


def find_traces(path: Path | str) -> list[Path]:
    """The trace directories at or below `path`, sorted: `path` itself if it
    has `meta.json`, else every directory below it that has one. So a run
    directory, a runs root or its `latest` link can be passed whole. Links
    below `path` are not followed (a runs root's `latest` would repeat a run)
    and hidden directories (a run still being written) are passed over.

    Raises:
        HistoryError: `path` holds no trace.
    """
    top = Path(path)
    if (top / META_FILE).is_file():
        return [Path(os.path.abspath(top))]
    found = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if META_FILE in files:
            # Not pruned below: compare keeps pass k's trace inside pass 1's
            # (`sim.compare.runner.pass_trace_dir`).
            found.append(Path(os.path.abspath(root)))
    if not found:
        what = (
            "no trace directory (no such directory)" if not top.is_dir()
            else f"no trace directory (no {META_FILE}) here or below"
        )
        raise HistoryError(f"{path}: {what}")
    return sorted(found)


def read_trace(directory: Path | str, *, lean: bool = False) -> Trace:
    """Reads a trace directory; `HistoryError` if it is incomplete or of another
    schema version. `lean`: decode ops.parquet one column at a time, so the
    whole Arrow table (~200 MB for 1M operations, in an allocator that keeps
    its pages) never sits beside the History built from it (export's bounded
    memory, issue 34); the same History either way, at ~10 % more time."""
    d = Path(directory)
    meta_path = d / META_FILE
    if not meta_path.is_file():
        raise HistoryError(f"{d}: no {META_FILE} (not a trace directory, or a half-written one)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise HistoryError(f"{meta_path}: unreadable: {_one_line(exc)}") from exc
    if not isinstance(meta, dict):
        raise HistoryError(f"{meta_path}: not a JSON object")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise HistoryError(f"{d}: schema version {version!r}, this coordsim reads {SCHEMA_VERSION}")
    try:
        history = _history_from_parquet(d / OPS_FILE) if lean else history_from_table(pq.read_table(d / OPS_FILE))
        ev_path = d / EVENTS_FILE
        events = events_from_table(pq.read_table(ev_path)) if ev_path.exists() else []
    except (OSError, pa.ArrowException, KeyError, ValueError) as exc:
        if isinstance(exc, HistoryError):
            raise HistoryError(f"{d}: {exc}") from exc
        raise HistoryError(f"{d}: unreadable trace: {_one_line(exc)}") from exc
    for key, n in (("ops", history.n), ("events", len(events))):
        said = meta.get(key)
        if isinstance(said, int) and not isinstance(said, bool) and said != n:
            raise HistoryError(f"{d}: {META_FILE} says {said} {key}, the trace holds {n} (a mixed or damaged trace)")
    return Trace(history, events, meta)


def _one_line(exc: BaseException) -> str:
    """Arrow's messages span lines (and some name only a path): one line, with the type."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
