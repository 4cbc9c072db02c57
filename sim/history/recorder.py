"""Recording a history as a run goes: `HistoryRecorder` turns invocations and
completions, stamped with the run's clock, into the `History` and `Event`
tables of `sim.history.model`.

It protects the model's invariants where a producer breaks them: completing an
unknown or finished operation, or reusing a process that is still running or
ended `info`, raises `HistoryError` at once rather than yielding a history the
checkers would reject later.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

from sim.history.model import (
    FAIL,
    INFO,
    KIND_CODE,
    NONE,
    OK,
    READ,
    Event,
    EventKind,
    History,
    HistoryBuilder,
    HistoryError,
    Kind,
    Status,
    raw,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = ["Clock", "HistoryRecorder", "encode_args"]

#: The recorder's time source (`Runtime.now`, seconds); stored as integer ns.
Clock: TypeAlias = "Callable[[], float]"


#: Canonical JSON, made once (`json.dumps` with options builds an encoder per call).
_JSON: Final = json.JSONEncoder(sort_keys=True)


def encode_args(args: Mapping[str, Any]) -> str:
    """An op's args as the history stores them: canonical JSON."""
    return _JSON.encode(args)


@final
class HistoryRecorder:
    """Records a run as it goes: `invoke` returns an op id, one of `ok`/`fail`/
    `info` completes it; `event` records an internal event. Misuse (completing
    an unknown or finished op, reusing a process after `info`) raises
    `HistoryError` at once, so a broken producer is caught where it breaks.

    Args:
        clock: seconds, normally `Runtime.now`; recorded as integer ns."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._ops: list[list[Any]] = []
        self._pending: dict[int, int] = {}  # op id -> process
        self._busy: dict[int, int] = {}  # process -> op id
        self._dead: set[int] = set()
        self._next_process = 0
        #: Events as rows (`Event`'s fields in order), built into `Event`s
        #: only when asked for: a run records a few per statement (issue 20).
        self._event_rows: list[tuple[Any, ...]] = []
        self._events: list[Event] = []

    def _now(self) -> int:
        return round(self._clock() * 1e9)

    def now_ns(self) -> int:
        """The clock in ns, e.g. to pass as an event's `start_ns` later."""
        return self._now()

    @property
    def completed(self) -> int:
        """Operations invoked and completed so far. A progress line reads it
        from another thread: two lengths, each read whole, so at worst one
        operation stale."""
        return len(self._ops) - len(self._pending)

    def fresh_process(self) -> int:
        """Reserves a process id never used or handed out before: each client
        takes one, and a client whose op ended `info` continues under a new
        one (Jepsen's convention)."""
        process = self._next_process
        self._next_process += 1
        return process

    def invoke(
        self,
        process: int,
        kind: Kind,
        obj: str | None,
        *,
        elements: Sequence[int] = (),
        args: Mapping[str, Any] | None = None,
        args_json: str | None = None,
        client: str | None = None,
    ) -> int:
        """Records an invocation; returns its op id. `args_json`: `args`
        already as `encode_args` writes them (a caller recording the same
        statement over and over encodes them once); not with `args`."""
        if args is not None:
            if args_json is not None:
                raise HistoryError("invoke takes args or args_json, not both")
            args_json = encode_args(args)
        if process in self._dead:
            raise HistoryError(f"process {process} acts after an `info`; use a fresh process id")
        if process in self._busy:
            raise HistoryError(f"process {process} is still running op {self._busy[process]}")
        self._next_process = max(self._next_process, process + 1)
        oid = len(self._ops)
        self._ops.append(
            [oid, process, KIND_CODE[Kind(kind)], obj, self._now(), NONE, INFO, tuple(elements),
             None, NONE, args_json,
             None, None, NONE, NONE, NONE, client]
        )
        self._pending[oid] = process
        self._busy[process] = oid
        return oid

    def _complete(
        self,
        oid: int,
        status: int,
        *,
        read_ts: int | None,
        write_ts: int | None,
        catalog_ts: int | None,
        args: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        process = self._pending.pop(oid, None)
        if process is None:
            raise HistoryError(f"op {oid} completes but was not invoked or already completed")
        del self._busy[process]
        if status == INFO:
            self._dead.add(process)
        row = self._ops[oid]
        row[5], row[6] = self._now(), status
        row[13], row[14], row[15] = raw(read_ts), raw(write_ts), raw(catalog_ts)
        if args is not None:  # what the op learnt as it ran (a subscription's stream)
            row[10] = encode_args(args)
        return row

    def ok(
        self,
        oid: int,
        *,
        result: Iterable[int] | None = None,
        count: int | None = None,
        read_ts: int | None = None,
        write_ts: int | None = None,
        catalog_ts: int | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Completes `oid` ok; `args`, if given, replace the invocation's."""
        row = self._complete(oid, OK, read_ts=read_ts, write_ts=write_ts, catalog_ts=catalog_ts, args=args)
        if row[2] == READ:
            if result is None:
                raise HistoryError(f"op {oid}: an ok read needs its result")
            row[8] = tuple(sorted(result))
        row[9] = raw(count)

    def fail(
        self,
        oid: int,
        code: str,
        message: str = "",
        *,
        read_ts: int | None = None,
        write_ts: int | None = None,
        catalog_ts: int | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        row = self._complete(oid, FAIL, read_ts=read_ts, write_ts=write_ts, catalog_ts=catalog_ts, args=args)
        row[11], row[12] = code, message

    def info(
        self,
        oid: int,
        message: str = "",
        *,
        read_ts: int | None = None,
        write_ts: int | None = None,
        catalog_ts: int | None = None,
    ) -> None:
        row = self._complete(oid, INFO, read_ts=read_ts, write_ts=write_ts, catalog_ts=catalog_ts)
        row[12] = message or None

    def event(
        self,
        kind: EventKind | str,
        component: str,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        status: Status = Status.OK,
        timeline: str | None = None,
        ts: int | None = None,
        batch_size: int | None = None,
        actor: str | None = None,
        ops: Sequence[int] = (),
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Records an internal event; times default to now (an instant)."""
        # The clock only when a time is missing: most events come timed.
        now = self._now() if start_ns is None or end_ns is None else 0
        rows = self._event_rows
        rows.append(
            (
                len(rows),
                str(kind),
                component,
                now if start_ns is None else start_ns,
                now if end_ns is None and start_ns is None else end_ns,
                status,
                timeline,
                ts,
                batch_size,
                actor,
                tuple(ops),
                None if detail is None else _JSON.encode(detail),
            )
        )

    def history(self) -> History:
        """The operations so far; still-pending ones appear as `info` without a
        completion (they may or may not take effect)."""
        b = HistoryBuilder()
        for row in self._ops:
            b.add_row(*row)
        return b.build()

    def events(self) -> list[Event]:
        built = self._events
        for row in self._event_rows[len(built) :]:
            built.append(Event(*row))
        return list(built)
