"""Real mode runs the Python coordinator, the load generator and Postgres on
the same cores, so a level can measure the host instead of the mechanism
being compared. This module watches one level (coordsim's CPU, how late a
1 ms timer fires on the asyncio loop, the embedded Postgres's CPU, the
whole machine's CPU) and names the resource that limited it, so that such
a cell is marked and left out of conclusions (issue 33, DESIGN.md §10).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Final, final

from sim.load.loadgen import HostFigures

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sim.compare.host import HostSampler
    from sim.runtime.core import Runtime

__all__ = [
    "HOST_CPU_LIMIT",
    "LAG_LIMIT_MS",
    "OWN_CPU_LIMIT",
    "POSTGRES_CPU_LIMIT",
    "HostProbe",
    "host_bound",
    "thresholds_text",
]

#: coordsim's process CPU over wall time at or above this: one asyncio loop
#: (and the GIL) uses at most one core, so 90 % of it leaves the loop no
#: slack to wake a waiting client on time.
OWN_CPU_LIMIT: Final = 0.90
#: Mean lateness of a 1 ms timer at or above this: the loop, not the system
#: modeled, is deciding when operations proceed (an idle loop fires it
#: within about 1 ms, the epoll timeout's rounding).
LAG_LIMIT_MS: Final = 5.0
#: Postgres's processes, and all processes on the machine, at or above this
#: share of the cores we may run on: a CPU-saturated host.
POSTGRES_CPU_LIMIT: Final = 0.90
HOST_CPU_LIMIT: Final = 0.90
#: The timer the lag probe sleeps on.
_PROBE_S: Final = 0.001


def thresholds_text() -> str:
    """The rule, as the report states it."""
    return (f"a real-mode cell is host-bound when, averaged over its passes, coordsim's own CPU reaches "
            f"{OWN_CPU_LIMIT:.0%} of the one core its event loop can use, a 1 ms timer fires "
            f"{LAG_LIMIT_MS:g} ms late or more on average, or Postgres's processes or the whole machine "
            f"use {POSTGRES_CPU_LIMIT:.0%} of the usable cores")


def host_bound(figures: Sequence[HostFigures]) -> str:
    """The resource that limited a cell, e.g. "coordsim CPU 97 %" ("" when
    none did, or nothing was measured: virtual mode). Averaged over the
    passes; several resources are joined with "; "."""
    if not figures:
        return ""
    k = len(figures)
    own = sum(f.own_cpu for f in figures) / k
    lag = sum(f.lag_mean_ms for f in figures) / k
    usable = max(1, min(f.usable_cores for f in figures))
    cores = f"{usable} core{'s' if usable != 1 else ''}"
    found = []
    if own >= OWN_CPU_LIMIT:
        found.append(f"coordsim CPU {own:.0%}")
    if lag >= LAG_LIMIT_MS:
        found.append(f"loop lag {lag:.1f} ms")
    pg = [f.postgres_cores for f in figures if f.postgres_cores is not None]
    if pg and sum(pg) / len(pg) >= POSTGRES_CPU_LIMIT * usable:
        found.append(f"Postgres CPU {sum(pg) / len(pg):.1f} of {cores}")
    host = [f.host_cores for f in figures if f.host_cores is not None]
    if host and sum(host) / len(host) >= HOST_CPU_LIMIT * usable:
        found.append(f"host CPU {sum(host) / len(host):.1f} of {cores}")
    return "; ".join(found)


@final
class HostProbe:
    """Watches the host while one level runs: `start()` before it, `lags()`
    as a task beside it (real mode only: in virtual time the timer is never
    late, and its wake-ups would change the trace), `stop()` after it.

    `postgres_pids` gives the embedded server's postmaster when asked (its
    backends are its children, counted with it; None: not measurable, an
    external server)."""

    def __init__(
        self,
        rt: Runtime,
        postgres_pids: Callable[[], Sequence[int]] | None,
        *,
        own_children: Sequence[int] = (),
    ) -> None:
        self._rt = rt
        self._postgres_pids = postgres_pids
        #: Processes whose CPU is coordsim's own: the adapter processes of a
        #: real-mode deployment with several adapters.
        self._children = tuple(own_children)
        self._lags: list[float] = []
        self._t0 = 0.0
        self._cpu0 = 0.0
        self._pg0: float | None = None
        self._sampler: HostSampler | None = None

    def start(self) -> None:
        from sim.compare.host import HostSampler

        self._t0 = self._rt.now()
        self._cpu0 = self._own_cpu()
        self._pg0 = self._postgres_cpu()
        self._sampler = HostSampler(also_own=self._postgres_pids or tuple)
        self._sampler.start()

    async def lags(self) -> None:
        """Sleeps 1 ms at a time until cancelled, noting how late each wake-up is."""
        while True:
            t = self._rt.now()
            await self._rt.sleep(_PROBE_S)
            self._lags.append(max(0.0, self._rt.now() - t - _PROBE_S))

    def stop(self) -> HostFigures:
        wall = max(1e-9, self._rt.now() - self._t0)
        own = (self._own_cpu() - self._cpu0) / wall
        pg1 = self._postgres_cpu()
        pg = (pg1 - self._pg0) / wall if pg1 is not None and self._pg0 is not None else None
        usage = self._sampler.stop() if self._sampler is not None else None
        lags = sorted(self._lags)
        mean = sum(lags) / len(lags) if lags else 0.0
        p99 = lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)] if lags else 0.0
        host = usage.host_busy_cores if usage is not None else None
        usable = usage.usable_cores if usage is not None else 1
        return HostFigures(wall, own, mean * 1000, p99 * 1000, pg, host, int(usable or 1))

    def _own_cpu(self) -> float:
        """This process's CPU seconds and its adapter processes' (each tree)."""
        if not self._children:
            return time.process_time()
        from sim.compare.host import process_tree_cpu_s

        return time.process_time() + sum(process_tree_cpu_s(pid) or 0.0 for pid in self._children)

    def _postgres_cpu(self) -> float | None:
        if self._postgres_pids is None:
            return None
        from sim.compare.host import process_tree_cpu_s

        readings = [process_tree_cpu_s(pid) for pid in self._postgres_pids()]
        known = [x for x in readings if x is not None]
        return sum(known) if known else None

