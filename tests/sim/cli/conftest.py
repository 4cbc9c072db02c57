"""The bad-input corpus's fixtures (tests/sim/cli/test_bad_input*.py): one
fork server and one small valid trace per test module that asks for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.sim.cli.test_bad_input import make_valid_trace, start_forker

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.sim.cli.test_bad_input import Forker


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    yield from start_forker()


@pytest.fixture(scope="module")
def valid_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_valid_trace(tmp_path_factory)
