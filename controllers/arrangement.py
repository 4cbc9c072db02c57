"""A replica's arrangement: a collection indexed by time, exact at every time in
`[since, upper)`.

It holds a consolidated *base* (every update at times `<= since`, as if at
`since`) plus the updates at times in `(since, upper)` in time order, so a read
at any `as_of` in `[since, upper)` sums the base and the updates at `<= as_of`:
never data from after `as_of`, never a time before `since` (rejected). Compaction
folds updates into the base, moving `since` forward; the caller holds it back
for in-flight peeks. Also here: the incremental maintenance of a dataflow's
`Transform` (filter/project per update; `count(*)` as one retract-and-insert of
the single output row per time the count changes).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, final

from controllers.transform import CompiledTransform, decode_row, encode_row
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from persist.codec import Update

__all__ = ["Arrangement", "Maintainer"]


@final
class Arrangement:
    """Exact contents at any time in `[since, upper)`; keys are encoded rows."""

    def __init__(self, as_of: int, contents: Iterable[tuple[bytes, int]]) -> None:
        self.since = as_of
        self.upper = as_of + 1
        self._base: dict[bytes, int] = {}
        for key, diff in contents:
            self._add(self._base, key, diff)
        self._times: list[int] = []
        self._updates: list[tuple[bytes, int]] = []
        #: The last `read`: how many updates it folded in, and its answer.
        self._kept: tuple[int, tuple[tuple[bytes, int], ...]] | None = None

    @staticmethod
    def _add(acc: dict[bytes, int], key: bytes, diff: int) -> None:
        n = acc.get(key, 0) + diff
        if n:
            acc[key] = n
        else:
            acc.pop(key, None)

    def __len__(self) -> int:
        """Stored updates beyond the base (what compaction bounds)."""
        return len(self._updates)

    def insert(self, updates: Sequence[tuple[int, bytes, int]], upper: int) -> None:
        """Adds `(ts, key, diff)` updates, sorted by ts, all in `[self.upper, upper)`,
        and advances the upper to `upper`."""
        if upper < self.upper:
            raise InvalidUsage(f"arrangement upper cannot regress from {self.upper} to {upper}")
        for ts, key, diff in updates:
            if ts < self.upper or ts >= upper or (self._times and ts < self._times[-1]):
                raise InvalidUsage(f"update at {ts} outside [{self.upper}, {upper}) or out of order")
            self._times.append(ts)
            self._updates.append((key, diff))
        self.upper = upper

    def read(self, as_of: int) -> tuple[tuple[bytes, int], ...]:
        """`(key, multiplicity)` at `as_of`, sorted by key, zero multiplicities
        dropped. Reads that fold in the same updates are the same tuple: the
        last read is kept until compaction changes the base (peeks of a
        collection that does not change read it over and over; issue 20)."""
        if not self.since <= as_of < self.upper:
            raise InvalidUsage(f"read at {as_of} outside [{self.since}, {self.upper})")
        end = bisect.bisect_right(self._times, as_of)
        kept = self._kept
        if kept is not None and kept[0] == end:
            return kept[1]
        acc = dict(self._base)
        for key, diff in self._updates[:end]:
            self._add(acc, key, diff)
        out = tuple(sorted(acc.items()))
        self._kept = (end, out)
        return out

    def compact(self, since: int) -> None:
        """Moves `since` forward to `since` (at most `upper - 1`); no-op if behind."""
        if since <= self.since:
            return
        if since >= self.upper:
            raise InvalidUsage(f"cannot compact to {since}: upper is {self.upper}")
        end = bisect.bisect_right(self._times, since)
        if end:  # the base changes and the updates' positions move
            self._kept = None
        for key, diff in self._updates[:end]:
            self._add(self._base, key, diff)
        del self._times[:end]
        del self._updates[:end]
        self.since = since


@final
class Maintainer:
    """Turns input updates into output updates of a compiled transform, in time order."""

    def __init__(self, transform: CompiledTransform) -> None:
        self._t = transform
        self._count = 0

    def initial(self, snapshot: Iterable[Update]) -> list[tuple[bytes, int]]:
        """The output contents for an input snapshot (all at one time)."""
        t = self._t
        if t.count:
            self._count = sum(u.diff for u in snapshot if t.keep(decode_row(u.key)))
            return [(encode_row((self._count,)), 1)]
        out: list[tuple[bytes, int]] = []
        for u in snapshot:
            row = decode_row(u.key)
            if t.keep(row):
                out.append((encode_row(t.project(row)), u.diff))
        return out

    def step(self, updates: Sequence[Update]) -> list[tuple[int, bytes, int]]:
        """Output `(ts, key, diff)` for input updates sorted by time."""
        t = self._t
        out: list[tuple[int, bytes, int]] = []
        if not t.count:
            for u in updates:
                row = decode_row(u.key)
                if t.keep(row):
                    out.append((u.ts, encode_row(t.project(row)), u.diff))
            return out
        i = 0
        while i < len(updates):
            ts, delta = updates[i].ts, 0
            while i < len(updates) and updates[i].ts == ts:
                if t.keep(decode_row(updates[i].key)):
                    delta += updates[i].diff
                i += 1
            if delta:
                out.append((ts, encode_row((self._count,)), -1))
                self._count += delta
                out.append((ts, encode_row((self._count,)), 1))
        return out
