"""Shared test configuration: service fixtures and the loop choice per test.

Services (Postgres, S3) start from session fixtures in `tests/fixtures/`; an
environment variable points at an existing one instead. A test that cannot get
its service fails with the reason: nothing here skips.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from sim.runtime.loop import VirtualEventLoop

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.s3"]

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci")


@dataclass
class _LoopChoice:
    """Whether the test about to run wants the virtual loop. Decided when each
    test starts: pytest-asyncio asks for loop factories before the marks of a
    parametrized fixture's params (`pytest.param(..., marks=pytest.mark.virtual)`)
    reach the item, so asking the item then would miss them."""

    virtual: bool = False


_CHOICE = _LoopChoice()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _CHOICE.virtual = item.get_closest_marker("virtual") is not None


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """`@pytest.mark.virtual` async tests (or tests of a param so marked) run on
    the virtual-time loop; the rest on the stock loop (real time, real I/O)."""
    return {"loop": lambda: VirtualEventLoop() if _CHOICE.virtual else asyncio.new_event_loop()}


# --- `--seeds N` (tests/sim/nemesis/conftest.py uses it) ---------------------------------

#: Far beyond a night's run; a typo (an extra zero or three) fails at once.
MAX_SEEDS = 1_000_000


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help="Seeds per (scenario, configuration) in the anomaly tests (default: each test's own).",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A count out of range is a usage error before any test runs."""
    n: int | None = config.getoption("seeds", default=None)
    if n is not None and not 1 <= n <= MAX_SEEDS:
        raise pytest.UsageError(f"--seeds must be between 1 and {MAX_SEEDS}, got {n}")


@pytest.fixture(autouse=True)
def _runs_root(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run without `-o` writes a new run directory under the runs
    root: in a test, a temporary one, never the working tree's coordsim-out/."""
    from sim.runtime.run_dirs import ROOT_ENV

    monkeypatch.setenv(ROOT_ENV, str(tmp_path_factory.mktemp("runs") / "coordsim-out"))


@pytest.fixture(autouse=True)
def _forget_secrets() -> None:
    """The redaction remembers every password it hid, process-wide, to hide
    pieces of it in drivers' errors: each test starts as a fresh process."""
    from sim.runtime.redact import forget_secrets

    forget_secrets()
