"""The client API both architectures share: `Coordinator.connect() -> Session`,
`Session.execute(statement) -> Result`.

A SUBSCRIBE streams instead: `Session.subscribe(statement) -> Subscription`,
an async iterator of batches of changes with their progress, which the client
closes (`coordinator.subscribe`).

A `Result` is what a client sees — rows or an error with a SQLSTATE-like code —
plus the timestamps the system used (`read_ts`, `write_ts`, `catalog_ts`), which
histories record as annotations so the whitebox checker can replay them.
Nothing raised inside a coordinator reaches a client as a traceback: expected
failures become `Result.error`; a bug propagates to the coordinator's owner.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Self, final

from coordinator.sql import parse
from coordinator.statements import SqlError, SqlState, Subscribe
from coordinator.subscribe import Subscription
from sim.runtime.tasks import Ready

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable
    from types import TracebackType

    from controllers.transform import Row
    from coordinator.config import CoordinatorConfig
    from coordinator.events import CoordinatorEvent, EventSink
    from coordinator.statements import Statement

__all__ = ["Coordinator", "CoordinatorStatistics", "Result", "Session"]


@final
@dataclass(frozen=True, slots=True)
class Result:
    """One statement's outcome as the client sees it.

    `rows` for a SELECT (a row with multiplicity n appears n times);
    `rows_affected` for INSERT/UPDATE/DELETE; `error` if it failed. `info` marks
    an indeterminate outcome (the write may or may not have happened, DESIGN.md
    §9): histories record it as `info`, never as a failure.
    """

    rows: tuple[Row, ...] = ()
    columns: tuple[str, ...] = ()
    rows_affected: int = 0
    error: SqlError | None = None
    read_ts: int | None = None
    write_ts: int | None = None
    catalog_ts: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def code(self) -> str | None:
        return None if self.error is None else self.error.code.value

    @property
    def info(self) -> bool:
        """True iff the outcome is unknown (the statement may have taken effect)."""
        return self.error is not None and self.error.code is SqlState.INDETERMINATE

    @classmethod
    def failed(
        cls,
        error: SqlError,
        *,
        read_ts: int | None = None,
        write_ts: int | None = None,
        catalog_ts: int | None = None,
    ) -> Result:
        return cls(error=error, read_ts=read_ts, write_ts=write_ts, catalog_ts=catalog_ts)


@final
@dataclass(frozen=True, slots=True)
class CoordinatorStatistics:
    """Counters users compare across architectures (`coordsim compare`)."""

    statements: int
    peeks: int
    writes: int
    ddl: int
    group_commits: int
    writes_group_committed: int
    confirm_leadership_calls: int
    oracle_calls: int
    loop_busy_s: float  # modeled CPU on the coordinator's cores
    loop_cores: int
    ddl_conflicts: int
    loop_messages: int = 0  # messages the event loop handled (0: the decoupled design has no loop)
    empty_group_commits: int = 0  # of group_commits: periodic ones with no write (they advance idle tables)
    lost_races: int = 0  # of group_commits: several adapters (issue 36): retries after another adapter's append won

    @classmethod
    def summed(cls, parts: Iterable[CoordinatorStatistics]) -> CoordinatorStatistics:
        """Several adapters' counters as one deployment's (all zero for none)."""
        parts = list(parts)
        return cls(**{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(cls)})


class Coordinator(ABC):
    """A running coordinator of one architecture, owned via `async with`.

    Contract: `connect()` gives independent sessions; `execute` on one session
    is sequential (a session is one client connection); sessions run
    concurrently. A statement's effects are visible to every statement that
    *starts* after it returned ok (strict serializability, DESIGN.md §7). After
    the owner's `async with` ends, every pending statement has returned.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        events: EventSink | None = None,
        actor: str = "coordinator",
    ) -> None:
        self.config = config
        self.actor = actor
        self._events = events
        self._session_ids = itertools.count(1)

    def emit(self, event: CoordinatorEvent) -> None:
        """Reports an internal event to the owner's sink, if any."""
        if self._events is not None:
            self._events(event)

    @property
    def event_sink(self) -> EventSink | None:
        return self._events

    def connect(self) -> Session:
        """A new client connection."""
        return Session(self, next(self._session_ids))

    def child_pids(self) -> tuple[int, ...]:
        """The OS processes besides this one that serve this coordinator (its
        CPU is theirs too); none unless its adapters are processes."""
        return ()

    @abstractmethod
    async def __aenter__(self) -> Self: ...

    @abstractmethod
    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None: ...

    @abstractmethod
    def execute(self, session: Session, statement: Statement) -> Awaitable[Result]:
        """Runs `statement` for `session` (await it); never raises for a
        client-visible error. An `async def` implements it; so does a function
        returning the awaitable of the call it passes the statement on to."""

    @abstractmethod
    def statistics(self) -> CoordinatorStatistics: ...

    def subscribe(self, session: Session, statement: Subscribe) -> Subscription:
        """Starts `statement` for `session` when the returned `Subscription`
        is entered (`async with`); never raises here. Without an `AS OF`,
        its `as_of` is strict serializable as a peek's timestamp is: at least
        the timestamp of every statement that returned before it began, and
        the snapshot at `as_of` holds every write acknowledged by then. Then
        every committed change after `as_of` arrives exactly once, in
        timestamp order, each batch carrying its progress, until `UP TO`,
        the client's `close()`, or an error (`coordinator.subscribe`). A
        coordinator that cannot stream refuses (0A000), as this default does."""
        del session
        return Subscription.refusing(
            SqlError(SqlState.FEATURE_NOT_SUPPORTED, f"SUBSCRIBE to {statement.table!r} is not supported here")
        )


@final
class Session:
    """One client connection; statements run one at a time."""

    def __init__(self, coordinator: Coordinator, session_id: int) -> None:
        self.coordinator = coordinator
        self.id = session_id

    def execute(self, statement: Statement | str) -> Awaitable[Result]:
        """Runs a typed statement or one SQL statement of the supported subset
        (await it). Returns the coordinator's awaitable itself (see `Ready`)."""
        if isinstance(statement, str):
            try:
                statement = parse(statement)
            except SqlError as exc:
                return Ready(Result.failed(exc))
        if isinstance(statement, Subscribe):
            return Ready(Result.failed(SqlError(
                SqlState.FEATURE_NOT_SUPPORTED, "SUBSCRIBE streams its results: run it with Session.subscribe"
            )))
        return self.coordinator.execute(self, statement)

    def subscribe(self, statement: Statement | str) -> Subscription:
        """A SUBSCRIBE on this connection (see `Coordinator.subscribe`):
        `async with session.subscribe("SUBSCRIBE t") as sub: async for
        batch in sub: …`. A statement that is not a SUBSCRIBE, or does not
        parse, is refused when entered."""
        if isinstance(statement, str):
            try:
                parsed = parse(statement)
            except SqlError as exc:
                return Subscription.refusing(exc)
        else:
            parsed = statement
        if not isinstance(parsed, Subscribe):
            return Subscription.refusing(
                SqlError(SqlState.FEATURE_NOT_SUPPORTED, f"not a SUBSCRIBE: {type(parsed).__name__}")
            )
        return self.coordinator.subscribe(self, parsed)
