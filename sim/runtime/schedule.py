"""Scheduling policies of the virtual loop: which ready callback runs next.

`fifo` is asyncio's own order (the loop keeps its plain deque: no cost, the
traces of every earlier version). `random` and `pct` explore interleavings a
seed's latencies alone never produce, with their own random stream, so the
latencies (and the fault plan) a seed draws stay where they were.

What may be reordered. asyncio guarantees FIFO among all `call_soon`s, but a
simulated process cannot rely on that ordering against *another* process: in
the system modeled, tasks are concurrent processes and threads. So the ready
callbacks are split into chains, one per *owner*, and only the order between
chains is the policy's:

- a task's step (`Task.__step`, `Task.__wakeup`) belongs to that task; a task
  has at most one pending step, so its own steps stay in program order;
- any other callback (a future's done-callback, anyio's cancel delivery, a
  `call_soon` of user code, a fired timer) belongs to the task that scheduled
  it (none: the loop itself), and keeps FIFO order within that owner's chain.
  So a task's own `call_soon`s run in order, a future's done-callbacks run in
  registration order, a fired timer runs before its wakeup, and a task's next
  step runs after the plain callbacks it scheduled before yielding (a
  `set_result(); await sleep(0)` still sees the done-callbacks run; only the
  *woken tasks* may be late, as they may be in a real system);
- time never moves while anything is ready (the selector only jumps when the
  ready queue is empty), so reordering never changes *when* something
  happens, only the order of what happens at one instant.

Fairness: a chain head passed over for `FAIR_AFTER` picks runs next, so a
policy that starves a task (PCT's strict priorities against a task polling
with `sleep(0)`, or anyio redelivering a cancellation until its target runs)
slows a run down instead of spinning it forever at one instant.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from collections import deque
from typing import TYPE_CHECKING, Final, final

from sim.runtime import patches
from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Hashable

__all__ = [
    "DEFAULT_PCT_DEPTH",
    "DEFAULT_PCT_STEPS",
    "FAIR_AFTER",
    "SCHEDULES",
    "PctQueue",
    "RandomQueue",
    "ReadyQueue",
    "parse_schedule",
    "ready_queue",
    "schedule_rng",
]

#: The policies by name (`--schedule`); the first is the default.
SCHEDULES: Final = ("fifo", "random", "pct")
#: PCT's bug depth d (d - 1 priority change points), as Coyote's default.
DEFAULT_PCT_DEPTH: Final = 3
#: PCT's estimate k of a run's steps (callbacks run), over which the change
#: points are spread: the anomaly scenarios' default runs take 580-9,000
#: (seed 0, random walk: seed001 ~600-800, ddl-dml, crash-restart and
#: split-brain ~1,300-2,300, busy-reads 6,000-9,000).
DEFAULT_PCT_STEPS: Final = 2_000
#: Picks a ready chain head may be passed over before it runs regardless.
FAIR_AFTER: Final = 1_000

_PCT = re.compile(r"pct(?::d=(\d+)(?:,k=(\d+))?)?")


def parse_schedule(text: str) -> str:
    """The canonical spelling of a policy: `fifo`, `random`, `pct` or
    `pct:d=D,k=K` (depth D >= 1, estimated steps K >= 1).

    Raises:
        InvalidUsage: anything else.
    """
    text = text.strip()
    if text in ("fifo", "random"):
        return text
    m = _PCT.fullmatch(text)
    if m is None:
        raise InvalidUsage(
            f"unknown schedule {text!r}; known: fifo, random, pct (or pct:d=DEPTH,k=STEPS)"
        )
    depth = int(m.group(1)) if m.group(1) else DEFAULT_PCT_DEPTH
    steps = int(m.group(2)) if m.group(2) else DEFAULT_PCT_STEPS
    if not (1 <= depth <= 1000 and 1 <= steps <= 10**9):
        raise InvalidUsage(f"schedule {text!r}: pct needs 1 <= d <= 1000 and 1 <= k <= 10^9")
    if depth == DEFAULT_PCT_DEPTH and steps == DEFAULT_PCT_STEPS:
        return "pct"
    return f"pct:d={depth},k={steps}"


def schedule_rng(seed: int) -> random.Random:
    """The policy's random stream for a run's `seed`: the stream
    `Runtime(seed=seed).derive("schedule").rng` is (same derivation), so no
    other component's draws move when a policy draws."""
    digest = hashlib.blake2b(f"{seed}:schedule".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


class ReadyQueue:
    """A replacement for the loop's `_ready` deque (the operations
    `BaseEventLoop` uses: append, popleft, len, truth, clear) that keeps one
    FIFO chain per owner and lets `_choose` pick which chain runs next."""

    __slots__ = ("_chains", "_len", "_loop", "_since", "picks", "rng")

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random) -> None:
        self._loop = loop
        self.rng = rng
        # Owner -> its ready handles; in the order the heads became ready, so
        # the first chain is the one waiting longest (see `popleft`).
        self._chains: dict[Hashable, deque[asyncio.Handle]] = {}
        self._since: dict[Hashable, int] = {}
        self._len = 0
        #: Callbacks handed to the loop so far (the steps PCT counts).
        self.picks = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def _owner(self, handle: asyncio.Handle) -> Hashable:
        owner = getattr(patches.handle_callback(handle), "__self__", None)
        if isinstance(owner, asyncio.Task):
            return owner
        return asyncio.current_task(self._loop)  # None: the loop itself

    def append(self, handle: asyncio.Handle) -> None:
        owner = self._owner(handle)
        chain = self._chains.get(owner)
        if chain is None:
            self._chains[owner] = chain = deque()
            self._since[owner] = self.picks
            self._seen(owner)
        chain.append(handle)
        self._len += 1

    def popleft(self) -> asyncio.Handle:
        if not self._len:
            raise IndexError("pop from an empty ready queue")
        self.picks += 1
        oldest = next(iter(self._chains))
        owner = oldest if self.picks - self._since[oldest] > FAIR_AFTER else self._choose()
        chain = self._chains.pop(owner)
        handle = chain.popleft()
        if chain:  # its next handle starts waiting now: to the back
            self._chains[owner] = chain
            self._since[owner] = self.picks
        else:
            del self._since[owner]
        self._len -= 1
        return handle

    def clear(self) -> None:
        self._chains.clear()
        self._since.clear()
        self._len = 0

    def _seen(self, owner: Hashable) -> None:
        """`owner` has a ready callback and had none."""

    def _choose(self) -> Hashable:
        raise NotImplementedError


@final
class RandomQueue(ReadyQueue):
    """Random walk: each step runs the head of a uniformly chosen chain (a
    uniformly chosen runnable task or callback owner)."""

    __slots__ = ()

    def _choose(self) -> Hashable:
        owners = list(self._chains)
        return owners[self.rng.randrange(len(owners))] if len(owners) > 1 else owners[0]


@final
class PctQueue(ReadyQueue):
    """PCT (Burckhardt et al., ASPLOS 2010; Coyote's and Shuttle's `pct`):
    every owner gets a random priority when first seen, the highest-priority
    ready chain runs, and at d - 1 steps drawn uniformly from 1..k the owner
    about to run drops below every other. A bug needing d ordering
    constraints is hit with probability >= 1 / (n k^(d-1)) per run."""

    __slots__ = ("_changes", "_prio")

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, *, depth: int, steps: int) -> None:
        super().__init__(loop, rng)
        self._prio: dict[Hashable, float] = {}
        n = min(depth - 1, steps)
        self._changes = frozenset(rng.sample(range(1, steps + 1), n))

    def _seen(self, owner: Hashable) -> None:
        if owner not in self._prio:
            self._prio[owner] = self.rng.random()  # a random place among the others

    def _choose(self) -> Hashable:
        prio = self._prio
        owner = max(self._chains, key=prio.__getitem__)
        if self.picks in self._changes:
            prio[owner] = -float(self.picks)  # below everyone, and below earlier drops
            owner = max(self._chains, key=prio.__getitem__)
        return owner


def ready_queue(schedule: str, seed: int, loop: asyncio.AbstractEventLoop) -> ReadyQueue | None:
    """The ready queue `schedule` runs `loop` with for a run's `seed`; None for
    `fifo` (the loop's own deque).

    Raises:
        InvalidUsage: an unknown policy.
    """
    canonical = parse_schedule(schedule)
    if canonical == "fifo":
        return None
    rng = schedule_rng(seed)
    if canonical == "random":
        return RandomQueue(loop, rng)
    m = _PCT.fullmatch(canonical)
    assert m is not None
    depth = int(m.group(1)) if m.group(1) else DEFAULT_PCT_DEPTH
    steps = int(m.group(2)) if m.group(2) else DEFAULT_PCT_STEPS
    return PctQueue(loop, rng, depth=depth, steps=steps)
