"""`pytest --seeds N` (registered in tests/conftest.py): how many seeds each
seeded anomaly test runs, so a nightly job can go wide without editing the
tests. Unset, each test keeps its own default count (small: the default suite
stays about a minute)."""

from __future__ import annotations

from typing import final

import pytest


def seed_count(config: pytest.Config, default: int) -> int:
    """`--seeds` if given, else `default`."""
    n: int | None = config.getoption("seeds", default=None)
    return default if n is None else n


@final
class Seeds:
    """`seeds(default, start=0)`: a test's seed range, `--seeds` long if given."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    def __call__(self, default: int, *, start: int = 0) -> range:
        return range(start, start + seed_count(self._config, default))


@pytest.fixture
def seeds(request: pytest.FixtureRequest) -> Seeds:
    return Seeds(request.config)
