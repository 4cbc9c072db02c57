"""A deployment: one environment's stores (in memory, or a fresh database and
files) and the coordinator processes running on it, with the switches a
nemesis turns (store failures, latency factors)."""

from __future__ import annotations

import contextlib
import string
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import anyio.lowlevel
import anyio.to_thread

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.environment import Environment
from coordinator.factory import build_coordinator
from persist.faults import UnreliableBlob, UnreliableConsensus
from sim.history.capture import event_sink
from sim.load.harness import Stores, open_stores
from sim.runtime.core import ProcessClock
from sim.runtime.errors import CoordsimError
from sim.runtime.latency import Distribution, LatencyModel

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator, Mapping

    from anyio.abc import TaskGroup, TaskStatus

    from coordinator.config import CoordinatorConfig
    from coordinator.session import Coordinator
    from sim.history.recorder import HistoryRecorder
    from sim.load.run_config import RunConfig
    from sim.runtime.core import Runtime

__all__ = ["Deployment", "LatencySwitch", "switchable_latency"]

# --- latency spikes ------------------------------------------------------------------------


@final
class LatencySwitch:
    """Shared by every `_Switchable` distribution of a run: which groups are
    slowed now, and by what factor. Derived Runtimes copy the latency model by
    reference, so flipping the switch reaches every component at once."""

    def __init__(self) -> None:
        self.factors: dict[str, float] = {}


@final
class _Switchable(Distribution):
    def __init__(self, base: Distribution, switch: LatencySwitch, group: str) -> None:
        self.base, self.switch, self.group = base, switch, group

    def sample(self, rng: random.Random) -> float:
        return self.base.sample(rng) * self.switch.factors.get(self.group, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return self.base.to_dict()

    def mean(self) -> float:
        return self.base.mean()


#: Which latency names each spike group slows.
_GROUPS: Final[Mapping[str, tuple[str, ...]]] = {
    # Every oracle operation by name: a calibrated profile gives each its own
    # distribution, which would shadow a spike of `oracle.pg` alone.
    "oracle": ("oracle.pg", *(f"oracle.pg.{op}" for op in ("read_ts", "write_ts", "peek_write_ts", "apply_write")),
               "stash.txn", "catalog.stash.txn",
               # The stash catalog's transaction shapes (`catalog.stash_catalog.MemStashStore`).
               *(f"catalog.stash.txn.{shape}" for shape in ("read", "write", "confirm"))),
    "replica": ("replica.command", "replica.response"),
}


def switchable_latency(base: LatencyModel) -> tuple[LatencyModel, LatencySwitch]:
    """`base` with the oracle's and the replicas' round trips behind a switch."""
    switch = LatencySwitch()
    overrides: dict[str, Distribution] = {}
    for group, names in _GROUPS.items():
        for name in names:
            dist = base.distribution(name) if base.configures(name) else REPLICA_LATENCIES.get(name)
            if dist is None:
                dist = base.distribution(name)
            overrides[name] = _Switchable(dist, switch, group)
    return base.with_overrides(overrides), switch


# --- the deployment ------------------------------------------------------------------------


@final
@dataclass
class _Host:
    name: str
    coord: Coordinator
    #: The process's own wall clock (`with_clock`), which the time faults move.
    clock: ProcessClock
    #: The process is gone: its clients' connections drop (set before `stop`).
    killed: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    exited: anyio.Event = field(default_factory=anyio.Event)


@final
class Deployment:
    """One environment and the coordinator processes running on it.

    Coordinators are named `a`, `b`, … in start order; `live` lists those
    running. Clients pick one with `pick` and wait with `wait_changed` when the
    one they used went away.
    """

    def __init__(
        self,
        rt: Runtime,
        config: CoordinatorConfig,
        recorder: HistoryRecorder,
        tg: TaskGroup,
        switch: LatencySwitch,
        stores: Stores,
    ) -> None:
        self.rt = rt
        self.config = config
        self.recorder = recorder
        self.switch = switch
        frt = rt.derive("faults")
        self.blob = UnreliableBlob(stores.blob, frt.derive("blob").rng, p_fail=0.0, p_timeout=0.0)
        self.consensus = UnreliableConsensus(
            stores.consensus, frt.derive("consensus").rng, p_fail=0.0, p_timeout=0.0
        )
        self.blob.enabled = self.consensus.enabled = False
        #: Real mode: the run's own database (pg-kill terminates its backends).
        self.database_url = stores.database_url
        self.env = Environment(
            rt, blob=self.blob, consensus=self.consensus, postgres_url=stores.database_url,
            blob_url=stores.blob_url,
        )
        self.live: list[_Host] = []
        self._tg = tg
        self._started = 0
        self._changed = anyio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls,
        rt: Runtime,
        config: CoordinatorConfig,
        recorder: HistoryRecorder,
        switch: LatencySwitch,
        *,
        postgres_url: str | None = None,
        modeled: bool = False,
        blob_url: str | None = None,
    ) -> AsyncIterator[Deployment]:
        """A deployment with its first coordinator started; on exit every
        coordinator stops.

        Args:
            postgres_url: real mode: the server on which the run gets a fresh
                database (dropped afterwards); None: virtual mode, in memory.
            modeled: virtual mode: the in-memory stores take `rt`'s modeled
                latencies (compare, scripts); else they answer at once (the
                anomaly runs, which model the oracle, its timestamp store and the catalog stash only).
            blob_url: real mode: Blob there instead of files in a temporary
                directory.
        """
        stores = open_stores(postgres_url, modeled=rt if modeled else None, blob_url=blob_url)
        async with stores as st, anyio.create_task_group() as tg:
            dep = cls(rt, config, recorder, tg, switch, st)
            await dep.start_coordinator()
            try:
                yield dep
            finally:
                for h in list(dep.live):
                    h.stop.set()

    @classmethod
    @contextlib.asynccontextmanager
    async def for_config(
        cls, cfg: RunConfig, config_name: str, rt: Runtime, recorder: HistoryRecorder, *, workload: str | None = None
    ) -> AsyncIterator[Deployment]:
        """A deployment of `config_name` as `cfg` describes the run: modeled
        in-memory stores in virtual mode; in real mode a fresh database on
        `cfg`'s Postgres, and `cfg.blob_url` or files. `workload` names what
        it will run (see `RunConfig.coordinator`)."""
        pg = cfg.effective_postgres_url() if cfg.mode == "real" else None
        if cfg.mode == "real" and pg is None:
            raise CoordsimError("real mode needs a Postgres (start one or set COORDSIM_POSTGRES_URL)")
        async with cls.running(
            rt, cfg.coordinator(config_name, workload), recorder, LatencySwitch(), postgres_url=pg, modeled=True,
            blob_url=cfg.blob_url,
        ) as dep:
            yield dep

    @property
    def newest(self) -> Coordinator | None:
        return self.live[-1].coord if self.live else None

    def pick(self, index: int) -> Coordinator | None:
        """The coordinator client `index` should use: clients spread over the
        live coordinators (a load balancer in front of a split brain)."""
        if not self.live:
            return None
        return self.live[index % len(self.live)].coord

    def is_live(self, coord: Coordinator) -> bool:
        return any(h.coord is coord for h in self.live)

    def host_of(self, coord: Coordinator) -> _Host | None:
        return next((h for h in self.live if h.coord is coord), None)

    async def wait_changed(self) -> None:
        """Waits until a coordinator starts or stops."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def start_coordinator(self) -> str:
        """Starts a new coordinator on the same stores (fencing older ones)."""
        name = _name(self._started)
        self._started += 1
        await self._tg.start(self._host, name)
        self._notify()
        return name

    async def stop_coordinator(self, host: _Host) -> None:
        """Stops `host` as a crash does: its clients' connections drop first
        (their statements end `info`), then the process shuts down."""
        host.killed.set()
        for _ in range(3):  # let the dropped connections' cancellations land
            await anyio.lowlevel.checkpoint()
        host.stop.set()
        await host.exited.wait()

    async def _host(self, name: str, *, task_status: TaskStatus[None]) -> None:
        clock = ProcessClock()  # a process of its own: a clock of its own (issue 38)
        rt = (self.rt if name == "a" else self.rt.derive(f"coordinator-{name}")).with_clock(clock)
        host: _Host | None = None
        try:
            async with build_coordinator(
                self.config, self.env, rt, events=event_sink(self.recorder), actor=name
            ) as coord:
                host = _Host(name, coord, clock)
                self.live.append(host)
                task_status.started()
                await host.stop.wait()
                self.live.remove(host)
                self._notify()
        finally:
            if host is not None:
                host.exited.set()


def _name(i: int) -> str:
    letters = string.ascii_lowercase
    return letters[i] if i < len(letters) else f"c{i}"


