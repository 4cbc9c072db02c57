"""A bounded least-recently-used map, for values that are costly to compute
and never change under their key (parsed statements, decoded batches)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Generic, TypeVar, final

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

K = TypeVar("K", bound="Hashable")
V = TypeVar("V")

__all__ = ["Lru"]


@final
class Lru(Generic[K, V]):
    """The `capacity` most recently used values by key. A value whose
    computation raises is not kept, so it is computed (and raises) again."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._values: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The value kept for `key`, else `compute()`'s, kept from now on."""
        values = self._values
        if key in values:
            values.move_to_end(key)
            return values[key]
        value = compute()
        values[key] = value
        if len(values) > self.capacity:
            values.popitem(last=False)
        return value

    def put(self, key: K, value: V) -> None:
        """Keeps `value` for `key` (the caller knows it is what `compute` would give)."""
        values = self._values
        values[key] = value
        values.move_to_end(key)
        if len(values) > self.capacity:
            values.popitem(last=False)
