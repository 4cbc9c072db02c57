"""Shared test configuration: service fixtures and the loop choice per test.

Services (Postgres, S3) start from session fixtures in `tests/fixtures/`; an
environment variable points at an existing one instead. A test that cannot get
its service fails with the reason: nothing here skips.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from hypothesis import settings

from sim.runtime.loop import VirtualEventLoop

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import pytest

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.s3"]

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """`@pytest.mark.virtual` async tests run on the virtual-time loop; the rest on
    the stock loop (real time, real I/O)."""
    if item.get_closest_marker("virtual") is not None:
        return {"virtual": VirtualEventLoop}
    return {"stock": asyncio.new_event_loop}
