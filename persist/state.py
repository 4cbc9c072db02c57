"""The state of one persist shard, and its encoding as incremental diffs.

The state (seed 002) is small metadata: frontiers, registered writers and
readers with their leases, the list of batches (pointers into Blob), rollups,
garbage awaiting deletion, the tombstone flag, and the shard's registrations
(what its owners recorded when they set it up: Materialize's shard state holds
its applier version, registered schemas and critical since handles).
Consensus stores one diff per seqno; every so often a full *rollup* goes to
Blob so that rebuilding the state never replays more than one rollup interval
of diffs.

The encoding views a state as a map of named entries (`meta`, `writer/<id>`,
`reader/<id>`, `batch/<lower>`, `rollup/<seqno>`, `garbage/<seqno>/<key>`,
`reg/<name>`) with JSON values, the "fixed number of collections" of seed 002. A diff sets and
deletes entries; applying diffs in seqno order to the last rollup reproduces
the state exactly. Diffs are computed and applied per entry, never by
flattening the whole state, so a transition costs in proportion to what it
changes (else every append would pay for every batch: seed 002's quadratic trap).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, final

from persist.frontier import Frontier
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "Garbage",
    "HollowBatch",
    "ReaderState",
    "ShardState",
    "StateDiff",
    "WriterState",
    "apply_diff",
    "decode_diff",
    "decode_rollup",
    "diff_states",
    "encode_diff",
    "encode_rollup",
]

STATE_FORMAT = 1
#: The diffs' and rollups' JSON: made once, where `json.dumps` with these
#: options builds an encoder per call (every CaS encodes a diff; issue 20).
_JSON: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@final
@dataclass(frozen=True)
class WriterState:
    """A registered writer: its lease, its upper and its last idempotency token."""

    lease_expiry_ms: int
    upper: Frontier
    last_token: str | None = None


@final
@dataclass(frozen=True)
class ReaderState:
    """A registered reader: its since and the oldest seqno it may still read from."""

    since: Frontier
    seqno_hold: int
    lease_expiry_ms: int


@final
@dataclass(frozen=True)
class HollowBatch:
    """A batch as the state knows it: a pointer to Blob plus its description.

    The updates at `key` have times in `[lower, upper)`, each forwarded to at
    least `since` by compaction. `key` None means the batch is empty (no blob):
    empty appends only advance the upper and cost no I/O.
    """

    key: str | None
    lower: int
    upper: Frontier
    since: int
    len: int
    size_bytes: int

    def __post_init__(self) -> None:
        if not self.upper.is_empty and self.upper.ts is not None and self.upper.ts < self.lower:
            raise InvalidUsage(f"batch upper {self.upper} < lower {self.lower}")


@final
@dataclass(frozen=True)
class Garbage:
    """A blob no longer referenced by the state as of `seqno` (epoch-based
    reclamation: deleted once no reader can still be reading at an older seqno)."""

    key: str
    seqno: int
    kind: str  # "batch" | "rollup"


@final
@dataclass(frozen=True)
class ShardState:
    shard_id: str
    seqno: int
    upper: Frontier = Frontier.MINIMUM
    since: Frontier = Frontier.MINIMUM
    writers: Mapping[str, WriterState] = field(default_factory=dict)
    readers: Mapping[str, ReaderState] = field(default_factory=dict)
    batches: tuple[HollowBatch, ...] = ()
    rollups: tuple[int, ...] = ()
    garbage: tuple[Garbage, ...] = ()
    tombstone: bool = False
    #: Name -> value recorded by the shard's owners (`persist.machine.register`).
    registrations: Mapping[str, str] = field(default_factory=dict)

    def with_seqno(self, seqno: int) -> ShardState:
        # The constructor, not dataclasses.replace (which re-reads the fields
        # each call): every state transition takes a new seqno (issue 20).
        return ShardState(
            self.shard_id, seqno, self.upper, self.since, self.writers, self.readers, self.batches,
            self.rollups, self.garbage, self.tombstone, self.registrations,
        )

    @property
    def latest_rollup(self) -> int | None:
        return self.rollups[-1] if self.rollups else None

    def live_blob_keys(self) -> list[str]:
        """Every blob key the state references (batches and rollups excluded
        from garbage)."""
        return sorted(b.key for b in self.batches if b.key is not None)

    # --- flat form ---------------------------------------------------------------------

    def to_flat(self) -> dict[str, Any]:
        """Every entry by name (the rollup form, and the first diff of a shard)."""
        flat: dict[str, Any] = {"meta": _meta_json(self)}
        flat.update({f"writer/{k}": _writer_json(w) for k, w in self.writers.items()})
        flat.update({f"reader/{k}": _reader_json(r) for k, r in self.readers.items()})
        flat.update({f"batch/{_batch_name(b)}": _batch_json(b) for b in self.batches})
        flat.update({f"rollup/{_rollup_name(seqno)}": seqno for seqno in self.rollups})
        flat.update({f"garbage/{_garbage_name(g)}": _garbage_json(g) for g in self.garbage})
        flat.update({f"reg/{k}": v for k, v in self.registrations.items()})
        return flat

    @classmethod
    def from_flat(cls, seqno: int, flat: Mapping[str, Any]) -> ShardState:
        meta = flat["meta"]
        writers: dict[str, WriterState] = {}
        readers: dict[str, ReaderState] = {}
        batches: list[HollowBatch] = []
        rollups: list[int] = []
        garbage: list[Garbage] = []
        registrations: dict[str, str] = {}
        for name in sorted(flat):
            v = flat[name]
            kind, _, ident = name.partition("/")
            if kind == "writer":
                writers[ident] = _writer_from(v)
            elif kind == "reader":
                readers[ident] = _reader_from(v)
            elif kind == "batch":
                batches.append(_batch_from(v))
            elif kind == "rollup":
                rollups.append(int(v))
            elif kind == "garbage":
                garbage.append(_garbage_from(ident, v))
            elif kind == "reg":
                registrations[ident] = str(v)
            elif kind != "meta":
                raise InvalidUsage(f"unknown shard state entry {name!r}")
        return cls(
            shard_id=meta["shard_id"],
            seqno=seqno,
            upper=Frontier(meta["upper"]),
            since=Frontier(meta["since"]),
            writers=writers,
            readers=readers,
            batches=tuple(batches),
            rollups=tuple(rollups),
            garbage=tuple(garbage),
            tombstone=meta["tombstone"],
            registrations=registrations,
        )


# --- diffs and rollups ------------------------------------------------------------------


@final
@dataclass(frozen=True)
class StateDiff:
    """The change from the state at `seqno - 1` to the state at `seqno`."""

    seqno: int
    command: str
    latest_rollup: int | None
    sets: Mapping[str, Any]
    deletes: tuple[str, ...]


# Diffing and applying work collection by collection on the structured state, never
# on the whole flat form: a command touches one or two entries, and both the diff
# and its application must cost in proportion to that, not to the state's size, or
# every append pays for every batch and writer (seed 002's quadratic trap). Commands
# keep untouched entries as the very same objects, so `is` settles most comparisons.


def _meta_json(s: ShardState) -> dict[str, Any]:
    return {
        "shard_id": s.shard_id,
        "upper": s.upper.to_json(),
        "since": s.since.to_json(),
        "tombstone": s.tombstone,
    }


def _writer_json(w: WriterState) -> dict[str, Any]:
    return {"lease_expiry_ms": w.lease_expiry_ms, "upper": w.upper.to_json(), "last_token": w.last_token}


def _writer_from(v: Mapping[str, Any]) -> WriterState:
    return WriterState(v["lease_expiry_ms"], Frontier(v["upper"]), v["last_token"])


def _reader_json(r: ReaderState) -> dict[str, Any]:
    return {"since": r.since.to_json(), "seqno_hold": r.seqno_hold, "lease_expiry_ms": r.lease_expiry_ms}


def _reader_from(v: Mapping[str, Any]) -> ReaderState:
    return ReaderState(Frontier(v["since"]), v["seqno_hold"], v["lease_expiry_ms"])


def _batch_json(b: HollowBatch) -> dict[str, Any]:
    return {
        "key": b.key,
        "lower": b.lower,
        "upper": b.upper.to_json(),
        "since": b.since,
        "len": b.len,
        "size_bytes": b.size_bytes,
    }


def _batch_from(v: Mapping[str, Any]) -> HollowBatch:
    return HollowBatch(v["key"], v["lower"], Frontier(v["upper"]), v["since"], v["len"], v["size_bytes"])


def _batch_name(b: HollowBatch) -> str:
    # Batches partition time, so `lower` identifies one; zero-padded so the flat
    # form sorts in time order.
    return f"{b.lower:020d}"


def _garbage_json(g: Garbage) -> dict[str, Any]:
    return {"seqno": g.seqno, "kind": g.kind}


def _garbage_from(ident: str, v: Mapping[str, Any]) -> Garbage:
    return Garbage(ident.split("/", 1)[1], v["seqno"], v["kind"])


def _garbage_name(g: Garbage) -> str:
    # Ordered by the seqno it became garbage at: compaction adds at the end and GC
    # removes a prefix, so both touch only the ends of the collection.
    return f"{g.seqno:020d}/{g.key}"


def _rollup_name(seqno: int) -> str:
    return f"{seqno:020d}"


def _diff_map(
    prefix: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    enc: Callable[[Any], Any],
    sets: dict[str, Any],
    deletes: list[str],
) -> None:
    if old is new:
        return
    for k, v in new.items():
        ov = old.get(k)
        if ov is not v and ov != v:
            sets[prefix + k] = enc(v)
    deletes.extend(prefix + k for k in old if k not in new)


def _changed_slices(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[int, int, int]:
    """`(p, old_end, new_end)` such that `old[:p] == new[:p]`, the tails from
    `old_end`/`new_end` are equal, and only `old[p:old_end]` became `new[p:new_end]`.

    Commands change a sorted collection at one place (an append at the end, a
    compaction replacing a run, GC dropping a prefix), so the changed middle is
    small. Slice equality runs in C with an identity shortcut per element, so
    finding it costs little even for thousands of batches."""
    n = min(len(old), len(new))
    s = 0
    while s < n and old[-1 - s] is new[-1 - s]:
        s += 1
    cap = n - s
    if old[:cap] == new[:cap]:
        p = cap
    else:
        lo, hi = 0, cap  # old[:lo] == new[:lo] and old[:hi] != new[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if old[:mid] == new[:mid]:
                lo = mid
            else:
                hi = mid
        p = lo
    return p, len(old) - s, len(new) - s


def _diff_sorted(
    prefix: str,
    old: tuple[Any, ...],
    new: tuple[Any, ...],
    name: Callable[[Any], str],
    enc: Callable[[Any], Any],
    sets: dict[str, Any],
    deletes: list[str],
) -> None:
    if old is new:
        return
    p, old_end, new_end = _changed_slices(old, new)
    _diff_map(
        prefix,
        {name(x): x for x in old[p:old_end]},
        {name(x): x for x in new[p:new_end]},
        enc,
        sets,
        deletes,
    )


def _apply_sorted(
    current: tuple[Any, ...],
    changes: Mapping[str, Any],
    name: Callable[[Any], str],
    dec: Callable[[str, Any], Any],
) -> tuple[Any, ...]:
    """`current` (sorted by `name`) with `changes` (name -> encoded value, or None
    to delete) applied; a binary search per change, not a rebuild."""
    out = list(current)
    for ident in sorted(changes):
        v = changes[ident]
        i = bisect.bisect_left(out, ident, key=name)
        exists = i < len(out) and name(out[i]) == ident
        if v is None:
            if exists:
                del out[i]
        elif exists:
            out[i] = dec(ident, v)
        else:
            out.insert(i, dec(ident, v))
    return tuple(out)


def diff_states(old: ShardState | None, new: ShardState, command: str) -> StateDiff:
    """The diff that turns `old` (None: nothing) into `new`."""
    if old is None:
        return StateDiff(new.seqno, command, new.latest_rollup, new.to_flat(), ())
    sets: dict[str, Any] = {}
    deletes: list[str] = []
    meta = _meta_json(new)
    if meta != _meta_json(old):
        sets["meta"] = meta
    _diff_map("writer/", old.writers, new.writers, _writer_json, sets, deletes)
    _diff_map("reader/", old.readers, new.readers, _reader_json, sets, deletes)
    _diff_sorted("batch/", old.batches, new.batches, _batch_name, _batch_json, sets, deletes)
    _diff_sorted("rollup/", old.rollups, new.rollups, _rollup_name, lambda r: r, sets, deletes)
    _diff_sorted("garbage/", old.garbage, new.garbage, _garbage_name, _garbage_json, sets, deletes)
    _diff_map("reg/", old.registrations, new.registrations, str, sets, deletes)
    return StateDiff(new.seqno, command, new.latest_rollup, sets, tuple(sorted(deletes)))


def apply_diff(old: ShardState | None, diff: StateDiff) -> ShardState:
    """The state after `diff`; `old` must be the state at `diff.seqno - 1`.

    Only the entries the diff names are touched."""
    if old is None:
        flat = {k: v for k, v in diff.sets.items() if k not in diff.deletes}
        return ShardState.from_flat(diff.seqno, flat)
    if old.seqno + 1 != diff.seqno:
        raise InvalidUsage(f"diff at seqno {diff.seqno} does not follow state at {old.seqno}")
    changes: dict[str, dict[str, Any]] = {}
    for name in diff.deletes:
        kind, _, ident = name.partition("/")
        changes.setdefault(kind, {})[ident] = None
    for name, v in diff.sets.items():
        kind, _, ident = name.partition("/")
        changes.setdefault(kind, {})[ident] = v
    unknown = set(changes) - {"meta", "writer", "reader", "batch", "rollup", "garbage", "reg"}
    if unknown:
        raise InvalidUsage(f"unknown shard state entries {sorted(unknown)}")

    def patched(current: Mapping[str, Any], kind: str, dec: Callable[[Any], Any]) -> dict[str, Any]:
        out = dict(current)
        for ident, v in changes[kind].items():
            if v is None:
                out.pop(ident, None)
            else:
                out[ident] = dec(v)
        return out

    state = old
    if "meta" in changes:
        m = changes["meta"][""]
        state = replace(
            state,
            shard_id=m["shard_id"],
            upper=Frontier(m["upper"]),
            since=Frontier(m["since"]),
            tombstone=m["tombstone"],
        )
    if "writer" in changes:
        state = replace(state, writers=patched(state.writers, "writer", _writer_from))
    if "reader" in changes:
        state = replace(state, readers=patched(state.readers, "reader", _reader_from))
    if "batch" in changes:
        batches = _apply_sorted(state.batches, changes["batch"], _batch_name, lambda _, v: _batch_from(v))
        state = replace(state, batches=batches)
    if "rollup" in changes:
        rollups = _apply_sorted(state.rollups, changes["rollup"], _rollup_name, lambda _, v: int(v))
        state = replace(state, rollups=rollups)
    if "garbage" in changes:
        garbage = _apply_sorted(state.garbage, changes["garbage"], _garbage_name, _garbage_from)
        state = replace(state, garbage=garbage)
    if "reg" in changes:
        state = replace(state, registrations=patched(state.registrations, "reg", str))
    return state.with_seqno(diff.seqno)


def encode_diff(diff: StateDiff) -> bytes:
    doc = {
        "format": STATE_FORMAT,
        "seqno": diff.seqno,
        "command": diff.command,
        "latest_rollup": diff.latest_rollup,
        "set": diff.sets,
        "del": list(diff.deletes),
    }
    return _JSON.encode(doc).encode()


def decode_diff(data: bytes) -> StateDiff:
    doc = json.loads(data)
    if doc.get("format") != STATE_FORMAT:
        raise InvalidUsage(f"shard state diff format {doc.get('format')!r} is not {STATE_FORMAT}")
    return StateDiff(doc["seqno"], doc["command"], doc["latest_rollup"], doc["set"], tuple(doc["del"]))


def encode_rollup(state: ShardState) -> bytes:
    """The full state; deterministic bytes, so any writer writes the same rollup."""
    doc = {"format": STATE_FORMAT, "seqno": state.seqno, "state": state.to_flat()}
    return _JSON.encode(doc).encode()


def decode_rollup(data: bytes) -> ShardState:
    doc = json.loads(data)
    if doc.get("format") != STATE_FORMAT:
        raise InvalidUsage(f"shard rollup format {doc.get('format')!r} is not {STATE_FORMAT}")
    return ShardState.from_flat(doc["seqno"], doc["state"])
