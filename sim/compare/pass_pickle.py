"""A pass's result pickled for the trip from a worker process to the one that
owns the output directory (`sim.compare.runner`): every count of a latency
histogram and every field of an event arrive as they left.
"""

from __future__ import annotations

import io
import operator
import pickle
from dataclasses import fields
from typing import Any, Final

from hdrh.histogram import HdrHistogram

from sim.history.model import Event

__all__ = ["dumps"]

#: An `Event`'s fields in order, read in one call (what `Event(*…)` takes).
_EVENT_FIELDS: Final = operator.attrgetter(*(f.name for f in fields(Event)))


def dumps(result: object) -> bytes:
    """`result` as bytes for `pickle.loads`, through `_PassPickler`."""
    buffer = io.BytesIO()
    _PassPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    return buffer.getvalue()


class _PassPickler(pickle.Pickler):
    """Pickles a pass's result for the trip from a worker.

    - A latency histogram goes as HdrHistogram's own encoding: the object
      holds a ctypes array, which pickle refuses; the encoding round-trips
      every count.
    - An `Event` goes as its constructor's arguments. A slotted dataclass
      pickles through `dataclasses`' state functions, which look up the
      fields again for every instance: a pass's 24,000 events took 0.18 s
      to send and receive, more than its trace takes to write (issue 20).
    """

    def reducer_override(self, obj: object) -> Any:
        if type(obj) is Event:
            return Event, _EVENT_FIELDS(obj)
        if isinstance(obj, HdrHistogram):
            return _decoded_histogram, (obj.encode(),)
        return NotImplemented


def _decoded_histogram(encoded: bytes) -> HdrHistogram:
    return HdrHistogram.decode(encoded)
