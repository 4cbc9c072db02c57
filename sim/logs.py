"""structlog, configured once per process by the CLI.

A console renderer on a terminal, JSON lines otherwise (CI, pipes). Every
string in every event passes `redact_text`, so a URL's password never reaches
a log.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

import structlog

from persist.urls import redact_text

if TYPE_CHECKING:
    from collections.abc import MutableMapping

__all__ = ["configure_logging", "redact_processor"]


def redact_processor(_logger: object, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replaces URL passwords in every string value of the event."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact_text(value)
    return event


def configure_logging(*, verbose: bool = False, json: bool | None = None) -> None:
    """Sets up structlog (idempotent). `json=None` picks by whether stderr is a TTY."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    level = logging.DEBUG if verbose else logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
