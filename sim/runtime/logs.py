"""structlog, configured once per process by the CLI.

A console renderer on a terminal, JSON lines otherwise (CI, pipes). Every
value of every event passes the one redaction core (`sim.runtime.urls`) before it
is rendered, tracebacks included, so a password never reaches a log. Records
of the standard `logging` module (asyncpg's pool reconnecting during an
outage, asyncio's "exception never retrieved") become one structlog line each,
with the error's tier, instead of a raw multi-line traceback.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from sim.runtime.redact import is_secret_name, redact_error, redact_mapping, redact_text

if TYPE_CHECKING:
    from collections.abc import MutableMapping
    from typing import TextIO

    from structlog.typing import ExcInfo

__all__ = ["StdlibToStructlog", "configure_logging", "redact_processor"]

# Rendered by the renderer from the exception itself (see `_redacted_traceback`).
_LEAVE_ALONE = frozenset({"exc_info"})
#: Fields holding an error's text: `error` (ours), `exception` (a formatted traceback).
_ERRORS = frozenset({"error", "exception"})


def redact_processor(_logger: object, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Redacts every value of the event: a secret-named key's value becomes
    `***`, strings go through `redact_text` (nested mappings and sequences too),
    and any other object whose repr would show a secret is replaced by its
    redacted repr."""
    for key, value in event.items():
        if key in _LEAVE_ALONE:
            continue
        event[key] = _redact(key, value)
    return event


def _redact(key: str, value: object) -> object:
    if value is None or isinstance(value, bool | int | float):
        return value
    if key in _ERRORS and isinstance(value, str | BaseException):
        # An error's text (a traceback too) may echo a piece of a password
        # that no pattern recognizes: the one function for driver errors.
        return redact_error(value)
    if isinstance(value, str | Mapping | list | tuple) or is_secret_name(key):
        return redact_mapping({key: value})[key]
    text = repr(value)
    redacted = redact_text(text)
    return value if redacted == text else redacted


def _redacted_traceback(sio: TextIO, exc_info: ExcInfo) -> None:
    """The console renderer's plain traceback, redacted."""
    buf = io.StringIO()
    structlog.dev.plain_traceback(buf, exc_info)
    sio.write(redact_error(buf.getvalue()))


class StdlibToStructlog(logging.Handler):
    """Renders a standard-library log record as one structlog event: logger,
    message, and for an exception its type and message on one line, with its
    tier (DESIGN.md §9). A failure to connect sent nothing, so it is
    `determinate`; anything else may have been applied: `indeterminate`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                fields["error"] = redact_error(exc)  # a driver's error: the one redaction for them
                fields["tier"] = "determinate" if _is_connect_failure(exc) else "indeterminate"
            log = structlog.get_logger()
            message = " ".join(record.getMessage().split())
            if record.levelno >= logging.ERROR:
                log.error(message, **fields)
            elif record.levelno >= logging.WARNING:
                log.warning(message, **fields)
            else:
                log.info(message, **fields)
        except Exception:
            self.handleError(record)


def _is_connect_failure(exc: BaseException) -> bool:
    # OSError covers refused and reset connections; asyncpg's own "cannot
    # connect now" (57P03, the server starting up) is named, not imported:
    # this module must not pull the driver in.
    return isinstance(exc, OSError) or type(exc).__name__ == "CannotConnectNowError"


def configure_logging(*, verbose: bool = False, json: bool | None = None) -> None:
    """Sets up structlog (idempotent). `json=None` picks by whether stderr is a TTY."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    level = logging.DEBUG if verbose else logging.INFO
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_json:
        # The traceback becomes the `exception` string, which the redactor sees.
        processors += [structlog.processors.format_exc_info, redact_processor, structlog.processors.JSONRenderer()]
    else:
        processors += [
            redact_processor,
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=_redacted_traceback),
        ]
    root = logging.getLogger()
    root.handlers = [StdlibToStructlog()]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
