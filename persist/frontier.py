"""Frontiers over `int` timestamps: a time, or the empty frontier.

With totally ordered times an antichain holds at most one element, so a
frontier is either `Frontier(t)` — "every time >= t" — or `Frontier.EMPTY`,
which contains no time at all: an upper that is empty means the shard is
closed (no more data ever), a since that is empty means it can never be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, final

__all__ = ["Frontier"]


@final
@dataclass(frozen=True, slots=True)
class Frontier:
    """`ts is None` is the empty frontier; ordered so that EMPTY is the greatest."""

    ts: int | None

    EMPTY: ClassVar[Frontier]
    MINIMUM: ClassVar[Frontier]

    @classmethod
    def at(cls, ts: int) -> Frontier:
        return cls(ts)

    @classmethod
    def of(cls, value: Frontier | int) -> Frontier:
        """`value` itself, or the frontier at it (APIs take either)."""
        return value if isinstance(value, Frontier) else cls(value)

    @property
    def is_empty(self) -> bool:
        return self.ts is None

    def less_equal(self, ts: int) -> bool:
        """True iff `ts` is at or beyond this frontier (`self <= ts`).

        For an upper: `ts` is not complete yet. For a since: `ts` can be read.
        """
        return self.ts is not None and self.ts <= ts

    def less_than(self, ts: int) -> bool:
        return self.ts is not None and self.ts < ts

    def _key(self) -> tuple[int, int]:
        return (1, 0) if self.ts is None else (0, self.ts)

    def __lt__(self, other: Frontier) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Frontier) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Frontier) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Frontier) -> bool:
        return self._key() >= other._key()

    def to_json(self) -> int | None:
        return self.ts

    @classmethod
    def from_json(cls, value: int | None) -> Frontier:
        return cls(value)

    def __str__(self) -> str:
        return "[]" if self.ts is None else f"[{self.ts}]"


Frontier.EMPTY = Frontier(None)
Frontier.MINIMUM = Frontier(0)
