"""Seed 000's rollout flag on one running coordinator: its timestamp oracles
(every timeline's, as Materialize's flag switched "all oracles" at once)
flip between the in-memory oracle and the distributed one while it serves —
the `oracle-switch` fault (issue 36, item 6).

Only a single coordinator (the event-loop architecture) has the flag: the
in-memory oracle lives in one process, so a decoupled deployment, whose
adapters share the oracle, runs the distributed one for good.

What keeps a flip safe:

1. Per timeline, the new oracle starts at or above the old one's `read_ts`
   and `write_ts`, after the calls in flight on the old one have completed,
   and before any call reaches it (`oracle.switching`, whose docstring gives
   the rule and its source in Materialize's coordinator).
2. `confirm_leadership()` stays in place on both implementations, as seed
   000's rollout kept it ("we could produce linearization anomalies when
   switching in either direction"): a process deposed while it serves from
   one implementation learns it only from that check, since a newer process
   on the other implementation never touches its oracle. After a flip the
   coordinator confirms through the catalog's epoch, which every coordinator
   bumps whichever oracle it runs (the timestamp store's epoch only memory-oracle
   processes bump); see `Incarnation.switch_oracle`.

3. A coordinator that starts on a deployment whose oracle was ever switched
   starts its oracle at or above the largest timestamp *either*
   implementation holds durably for each timeline (`start_above_other`):
   Materialize's start-up rule, which is where it switched implementations.
   Without it a process restarted (or started beside a deposed one) on the
   distributed oracle would begin at the row an earlier switch left behind,
   below what the in-memory oracle handed out since.

`KnownBad.unsynced_oracle_switch` drops rule 1: the new oracle serves at once
from its own state (the Postgres row where the last switch left it; the
timestamp store's upper), and calls in flight on the old oracle take effect there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from coordinator.config import OracleKind
from oracle.open import open_oracles
from oracle.switching import Advancing, SwitchingOracle
from sim.runtime.errors import Fenced

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from coordinator.environment import Environment
    from oracle.api import TimestampOracle
    from oracle.switching import Handover
    from sim.runtime.core import Runtime

__all__ = ["Flip", "OracleSwitch", "start_above_other"]

_OTHER: Final = {OracleKind.MEMORY: OracleKind.POSTGRES, OracleKind.POSTGRES: OracleKind.MEMORY}

@final
@dataclass(frozen=True, slots=True)
class Flip:
    """One flip of the flag: from which implementation to which, and each
    timeline's handover."""

    old: OracleKind
    new: OracleKind
    handovers: tuple[Handover, ...]

    def as_detail(self) -> dict[str, Any]:
        return {"from": self.old.value, "to": self.new.value,
                "timelines": [h.as_detail() for h in self.handovers]}


@final
class OracleSwitch:
    """The flag of one process: `kind` is the implementation serving now,
    `realtime` and `catalog` the oracles the process calls (pass-through
    until the first flip)."""

    def __init__(
        self,
        kind: OracleKind,
        realtime: TimestampOracle,
        catalog: TimestampOracle,
        reopen: Callable[[OracleKind], Awaitable[tuple[TimestampOracle, TimestampOracle]]],
        *,
        unsynced: bool = False,
    ) -> None:
        """`reopen` opens a fresh (realtime, catalog) pair of the given kind;
        `unsynced`: the known-bad flip (see the module docstring)."""
        self.kind = kind
        self.realtime = SwitchingOracle(realtime)
        self.catalog = SwitchingOracle(catalog)
        self._reopen = reopen
        self._unsynced = unsynced
        self._lock = anyio.Lock()
        self.flips: list[Flip] = []

    async def flip(self) -> Flip:
        """Switches every timeline to the other implementation (one flip at a
        time); returns what it did. Raises what opening or the handover
        raises (the timelines not yet switched keep their oracle)."""
        async with self._lock:
            new = _OTHER[self.kind]
            realtime, catalog = await self._reopen(new)
            ff = not self._unsynced
            handovers = (
                await self.realtime.switch(realtime, fast_forward=ff),
                await self.catalog.switch(catalog, fast_forward=ff),
            )
            flip = Flip(self.kind, new, handovers)
            self.kind = new
            self.flips.append(flip)
            return flip


async def start_above_other(
    env: Environment, kind: OracleKind, rt: Runtime, oracles: Sequence[TimestampOracle]
) -> dict[str, int]:
    """Rule 3: fast-forwards `oracles` (a starting process's, of implementation
    `kind`, each `oracle.switching.Advancing`) to what the other implementation
    holds durably for their timelines — the distributed oracle's `write_ts`
    (its `GREATEST(read_ts, write_ts)`), or the timestamp store's upper, above every
    timestamp the in-memory oracle ever handed out. As Materialize's start-up
    (`get_initial_oracle_timestamps`): `read_ts` and `write_ts` both rise to
    it, which a starting process may do since none of its writes is in
    flight. Returns the floor applied per timeline (absent: none held)."""
    timelines = [o.timeline for o in oracles]
    floors = await (_store_uppers if kind is OracleKind.POSTGRES else _rows)(env, rt, timelines)
    for o in oracles:
        floor = floors.get(o.timeline)
        if floor is not None:
            assert isinstance(o, Advancing), o
            try:
                await o.advance(read_ts=floor, write_ts=floor)
            except Fenced:
                # A newer process opened the timestamp store while this one started: the
                # oracle stays fenced, and its first call fences the coordinator.
                break
    return floors


async def _rows(env: Environment, rt: Runtime, timelines: list[str]) -> dict[str, int]:
    """The distributed oracle's `write_ts` per timeline (one statement each)."""
    async with await open_oracles(env.oracle_spec(OracleKind.POSTGRES), rt) as oracles:
        return {tl: await (await oracles.timeline(tl)).peek_write_ts() for tl in timelines}


async def _store_uppers(env: Environment, rt: Runtime, timelines: list[str]) -> dict[str, int]:
    """The timestamp store's upper per timeline that has one (one transaction each),
    read without bumping its epoch."""
    async with await open_oracles(env.oracle_spec(OracleKind.MEMORY), rt) as oracles:
        uppers = {tl: await oracles.persisted_upper(tl) for tl in timelines}
    return {tl: u for tl, u in uppers.items() if u is not None}
