"""What every conformance suite shares (`persist.testing`, `oracle.testing`,
`catalog.testing` and the timestamp-store and catalog-stash suites): the failure they raise and the few
checks they all make."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["ConformanceFailure", "expect", "expect_raises", "fresh_name"]


class ConformanceFailure(AssertionError):
    """An implementation broke its interface's contract."""


def expect(cond: bool, what: str) -> None:
    """Fails the suite with `what` unless `cond` holds."""
    if not cond:
        raise ConformanceFailure(what)


async def expect_raises(error: type[Exception], what: str, op: Callable[[], Awaitable[object]]) -> None:
    """Fails the suite unless `op()` raises `error`."""
    try:
        await op()
    except error:
        return
    except Exception as exc:
        raise ConformanceFailure(f"{what}: expected {error.__name__}, got {exc!r}") from exc
    raise ConformanceFailure(f"{what}: expected {error.__name__}")


def fresh_name(tag: str) -> str:
    """A key, timeline or table no earlier check used: suites share stores."""
    return f"conformance-{tag}-{uuid.uuid4().hex[:12]}"
