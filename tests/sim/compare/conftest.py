"""What the `coordsim compare` tests share: the real entry point run in
process (`coordsim`), and a pair of cells run twice from one seed, their
traces compared (`run_twice`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NamedTuple

import pyarrow.parquet as pq
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sim.compare.runner import RunOutput
    from sim.load.run_config import RunConfig


class Ran(NamedTuple):
    """What one `coordsim` invocation did: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str


@pytest.fixture
def coordsim(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """Runs the real entry point (`sim.cli.main.main`, which maps errors to
    their exit codes) in process with the given arguments."""
    from sim.cli.main import main

    def invoke(*args: str) -> Ran:
        monkeypatch.setattr(sys, "argv", ["coordsim", *args])
        with pytest.raises(SystemExit) as exc:
            main()
        code = exc.value.code
        captured = capsys.readouterr()
        return Ran(code if isinstance(code, int) else 1, captured.out, captured.err)

    return invoke


@pytest.fixture
def run_twice(tmp_path: Path) -> Callable[[RunConfig, str, str], RunOutput]:
    """Runs one configuration and workload twice from the same seed (in
    `tmp_path`'s `a` and `b`), asserts that both runs made the same rows and
    the same traces, and returns the first."""
    from sim.compare.runner import run_pair

    def twice(cfg: RunConfig, configuration: str, workload: str) -> RunOutput:
        a = run_pair(cfg, configuration, workload, tmp_path / "a")
        b = run_pair(cfg, configuration, workload, tmp_path / "b")
        assert a.rows == b.rows
        for name in ("ops.parquet", "events.parquet"):
            assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))
        return a

    return twice
