"""How this host's stock asyncio loop realizes a short timer, measured at the
end of a real run (its provenance's `timer`), so that a profile built from
the run (`coordsim calibrate --from`) lets virtual mode predict it
(`sim.runtime.latency.TimerRealized`).

Real mode realizes every latency it does not measure (the simulated
replica's hops, the catalog feed) as a timer. CPython's epoll and poll
selectors round each timeout up to whole milliseconds, so a 0.1 ms hop on
an idle loop lasts about 1.1 ms: a floor the model's latencies do not have,
and the larger part of what separated virtual from real mode at one client.
The rounding is the selector's (read from CPython's `selectors` module);
the overshoot after it is measured: the median, over `SAMPLES` sleeps of
`PROBE_S`, of the time slept beyond the rounded timeout.
"""

from __future__ import annotations

import math
import selectors
import statistics
import time
from typing import Any, Final

import anyio

__all__ = ["PROBE_S", "SAMPLES", "probe_timer", "selector_granularity_s"]

#: The sleep the probe times: shorter than a millisecond, as a replica hop is.
PROBE_S: Final = 0.0002
#: Sleeps per probe (about 0.12 s on Linux).
SAMPLES: Final = 100


def selector_granularity_s() -> float:
    """The timeout granularity of the selector asyncio's stock loop uses here:
    1 ms for epoll, poll and devpoll (they take milliseconds), 0 otherwise
    (select and kqueue take finer timeouts)."""
    coarse = tuple(
        getattr(selectors, name) for name in ("EpollSelector", "PollSelector", "DevpollSelector")
        if hasattr(selectors, name)
    )
    return 0.001 if selectors.DefaultSelector in coarse else 0.0


async def probe_timer(samples: int = SAMPLES) -> dict[str, Any]:
    """Times `samples` sleeps of `PROBE_S` on the running (stock) loop.

    Returns:
        `selector`, `granularity_ms`, `overshoot_ms` (the median time beyond
        the rounded timeout, at least 0), `median_ms` (the median sleep) and `n`.
    """
    g = selector_granularity_s()
    expected = math.ceil(PROBE_S / g - 1e-9) * g if g > 0 else PROBE_S
    took: list[float] = []
    for _ in range(samples):
        t = time.perf_counter()
        await anyio.sleep(PROBE_S)
        took.append(time.perf_counter() - t)
    median = statistics.median(took)
    return {
        "selector": selectors.DefaultSelector.__name__,
        "granularity_ms": round(g * 1000, 6),
        "overshoot_ms": round(max(0.0, median - expected) * 1000, 4),
        "median_ms": round(median * 1000, 4),
        "probe_ms": PROBE_S * 1000,
        "n": samples,
    }
