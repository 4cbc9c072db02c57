"""The progress of `coordsim compare` and `coordsim run` while they measure
(`sim.compare.pairs.PairProgress`): a bar on a terminal, a line per level on a
pipe or log, and `-P SECONDS`'s periodic lines either way.

Progress goes to stderr, so stdout stays the command's result.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, final

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.compare.pairs import PairProgress

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

    from rich.console import Console

    from sim.compare.rows import LevelRow
    from sim.load.run_config import RunConfig

__all__ = ["shown"]


@final
class _Ticker:
    """`-P SECONDS`, as pgbench's: a line on stderr every SECONDS of wall time
    with the level last measured, the operations measured so far and their
    rate. Its thread is started and joined by the `with` block that owns it."""

    def __init__(self, err: Console, every: float | None, total: int) -> None:
        self.err = err
        self.every = every
        self.total = total
        self.levels = 0
        self.ops = 0
        self.level = "starting"
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="coordsim-progress", daemon=True)

    def __enter__(self) -> _Ticker:
        if self.every is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def add(self, level: str, ops: int) -> None:
        self.levels += 1
        self.ops += ops
        self.level = level

    def line(self) -> str:
        wall = time.perf_counter() - self.t0
        rate = self.ops / wall if wall > 0 else 0.0
        return (f"progress: {wall:.1f} s, {self.level} ({self.levels}/{self.total} levels), "
                f"{self.ops:,} ops, {rate:,.0f} ops/s")

    def _loop(self) -> None:
        assert self.every is not None
        while not self._stop.wait(self.every):
            self.err.print(self.line(), markup=False, highlight=False, soft_wrap=True)


@final
class _Shown(PairProgress):
    """The bar (on a terminal), the ticker (`-P`), and otherwise a line per
    level on a pipe or log."""

    def __init__(self, err: Console, bar: Progress, ticker: _Ticker, total: int, *, lines: bool) -> None:
        self.err = err
        self.bar = bar
        self.task = bar.add_task("compare", total=total)
        self.ticker = ticker
        self.total = total
        self.lines = lines
        self.done = 0
        self.t0 = time.perf_counter()

    def workload(self, workload: str) -> None:
        self.bar.update(self.task, description=workload)

    def level(self, workload: str, config: str, index: int, row: LevelRow) -> None:
        self.bar.advance(self.task)
        self.bar.update(self.task, description=f"{workload} / {config} pass {index}")
        self.done += 1
        self.ticker.add(f"{workload} / {config} pass {index} c={row.concurrency}", row.ops)
        if self.lines:
            self.err.print(f"compare: {workload} / {config} pass {index} c={row.concurrency}: "
                           f"{row.throughput_ops_s:,.0f} ops/s, {row.errors} errors "
                           f"({self.done}/{self.total}, {time.perf_counter() - self.t0:.0f} s)",
                           markup=False, highlight=False, soft_wrap=True)

    def checking(self, workload: str, config: str, index: int) -> None:
        self.bar.update(self.task, description=f"{workload} / {config} pass {index}: checking")

    def script(self, workload: str, config: str) -> AbstractContextManager[None]:
        """On a pipe or log, a heartbeat while the script runs (no level to
        print meanwhile); the bar and `-P`'s ticker already tick."""
        self.bar.update(self.task, description=f"{workload} / {config}")
        if not self.lines:
            return contextlib.nullcontext()
        from sim.cli.heartbeat import heartbeat

        return heartbeat(self.err, f"compare: {workload} / {config}")


@contextlib.contextmanager
def shown(err: Console, cfg: RunConfig, every: float | None) -> Iterator[PairProgress]:
    """The progress of measuring `cfg`'s pairs on `err`, for one `with` block;
    `every` is `-P`'s period (None: no ticker)."""
    total = len(cfg.workloads) * len(cfg.configurations) * len(cfg.concurrency) * cfg.window().repeat
    live = err.is_terminal
    with _Ticker(err, every, total) as ticker, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not live,
    ) as bar:
        # A line per level on a pipe or log, unless -P prints its own.
        yield _Shown(err, bar, ticker, total, lines=not live and every is None)
