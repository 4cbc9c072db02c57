"""Structured events at the components' decision points (issue 37): group
commits, oracle calls, catalog transactions, fencing, read_ts batching,
nemesis faults. Each is bound to the run, the configuration, the seed and
the virtual time (the `Runtime`'s loop clock, never the wall clock).

A `Runtime` carries an `EventLog` (`rt.events`) and a component emits with

    if rt.events.on:
        rt.events.emit("group_commit", batch_size=n, trigger="tick")

so with logging off the hot path tests one attribute and builds nothing.
The log is on only when the command installed an `EventSink` (`installed`;
the CLI does for `-v` and `--events`) before `sim.runtime.core.run` made
the Runtime: a context variable hands the sink over, as `backend_stats`
hands its recorder, so the layers between a command and the loop carry
nothing. Worker processes (`--jobs`) and Spark tasks install none: their
runs emit nothing.

Every event passes `logs.redact_processor`, the one redaction, before it is
written anywhere: on the console through structlog's chain, in
`events.jsonl` directly. `events.jsonl` has no wall-clock field, so a
virtual run's file is a function of its seed.
"""

from __future__ import annotations

import contextlib
import json
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, final

from sim.runtime.patches import get_running_loop_or_none

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path
    from typing import TextIO

__all__ = ["EVENTS_FILE", "OFF", "EventLog", "EventSink", "current_sink", "for_run", "installed", "runtime_log"]

#: The file of a run directory that keeps the events (`--events`).
EVENTS_FILE: Final = "events.jsonl"


@final
class EventSink:
    """Where one command's events go: the console (structlog as
    `logs.configure_logging` set it up, at debug level, so `-v` shows them
    and `--log-json` makes them JSON lines on stderr) and/or a JSON-lines
    file. `bound` fields (the run id, the configuration) are in every event.
    `close` closes the file; events after it are dropped."""

    def __init__(
        self, *, console: bool = False, file: Path | None = None, bound: Mapping[str, object] | None = None
    ) -> None:
        self.console = console
        self.path = file
        self.bound: dict[str, object] = dict(bound or {})
        self._file: TextIO | None = file.open("w", encoding="utf-8") if file is not None else None
        self._logger: Any = None
        if console:
            import structlog  # only when asked: 0.2 CPU-s to import (the CLI's start-up)

            self._logger = structlog.get_logger("coordsim.events")

    @property
    def active(self) -> bool:
        """It writes somewhere."""
        return self.console or self._file is not None

    def write(self, event: str, fields: Mapping[str, object]) -> None:
        """Writes one event (`fields` are its bound and own fields)."""
        if self._logger is not None:
            self._logger.debug(event, **fields)
        if self._file is not None:
            from sim.runtime.logs import redact_processor

            record = redact_processor(None, "debug", {"event": event, **fields})
            self._file.write(json.dumps(record, default=str) + "\n")

    def log(self, **bound: object) -> EventLog:
        """An `EventLog` over this sink with `bound` (and the sink's own) fields."""
        return EventLog(self, {**self.bound, **bound}) if self.active else OFF

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._logger = None
        self.console = False


@final
class EventLog:
    """What a component emits through (see the module docstring): `on` says
    whether anything listens; `bind` adds fields; `emit` writes one event
    with the bound fields and `vt`, the running loop's time in seconds."""

    __slots__ = ("_bound", "_sink", "on")

    def __init__(self, sink: EventSink | None = None, bound: Mapping[str, object] | None = None) -> None:
        self._sink = sink
        self._bound: dict[str, object] = dict(bound or {})
        self.on = sink is not None

    def bind(self, **fields: object) -> EventLog:
        """This log with `fields` added to every event (itself when off)."""
        if self._sink is None:
            return self
        return EventLog(self._sink, {**self._bound, **fields})

    @property
    def bound(self) -> Mapping[str, object]:
        return self._bound

    def emit(self, event: str, /, **fields: object) -> None:
        """Writes `event` with the bound fields, `vt` and `fields` (nothing when
        off; callers test `on` first so that nothing is built then)."""
        if self._sink is None:
            return
        loop = get_running_loop_or_none()
        vt = {"vt": round(loop.time(), 9)} if loop is not None else {}
        self._sink.write(event, {**self._bound, **vt, **fields})


#: The log of a Runtime nobody listens to.
OFF: Final = EventLog()

#: The sink a command installed (see the module docstring).
_SINK: ContextVar[EventSink | None] = ContextVar("coordsim_event_sink", default=None)


def current_sink() -> EventSink | None:
    """The sink installed in this context, if any."""
    return _SINK.get()


@contextlib.contextmanager
def installed(sink: EventSink) -> Iterator[EventSink]:
    """`sink` as the one runs started in the block emit to; closed after it."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)
        sink.close()


@contextlib.contextmanager
def for_run(*, run: str, config: str | None = None, directory: Path | None = None) -> Iterator[EventSink | None]:
    """The sink of one run directory's runs, bound to its id `run` (and
    `config`): on the console if the command's sink prints there (`-v`), and
    into `directory / EVENTS_FILE` if `directory` is given; none (nothing
    installed) if neither."""
    parent = _SINK.get()
    console = parent is not None and parent.console
    if not console and directory is None:
        yield None
        return
    bound = {"run": run} if config is None else {"run": run, "config": config}
    file = directory / EVENTS_FILE if directory is not None else None
    with installed(EventSink(console=console, file=file, bound=bound)) as sink:
        yield sink


def runtime_log() -> EventLog:
    """The log of a new run's Runtime (which binds its seed): over the
    installed sink, or `OFF` when none is installed (or it writes nowhere)."""
    sink = _SINK.get()
    return OFF if sink is None else sink.log()
