"""Progress of a Spark command: tasks done out of the tasks known so far,
from Spark's status tracker (`SparkContext.statusTracker()`), polled from a
thread of its own. On a terminal a rich bar; otherwise (or with an interval
given, `-P`) a plain line every few seconds; a last line when it ends.

The command's jobs run under a job group of their own, so only they count
(a test session's earlier jobs do not). A replay is many Spark jobs whose
number is not known ahead, so the total grows as jobs start; a stage that a
finished job skipped (its shuffle output was reused) counts for nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["PLAIN_EVERY_S", "SparkProgress", "Tally"]

#: Seconds between plain progress lines when none is asked for.
PLAIN_EVERY_S: Final = 5.0
#: Seconds between polls of the status tracker for the bar.
_BAR_POLL_S: Final = 0.5
_DONE: Final = frozenset({"SUCCEEDED", "FAILED"})


@final
@dataclass(frozen=True)
class Tally:
    """Tasks done out of those known, over the jobs seen (`running` of them
    not finished)."""

    done: int = 0
    total: int = 0
    jobs: int = 0
    running: int = 0


@final
class SparkProgress:
    """`with SparkProgress(spark, "spark replay", console=err):` shows the
    progress of the Spark jobs the block runs (on its thread) on `console`,
    a stderr console: a bar if it is a terminal and `every` is None, else a
    line every `every` seconds (`PLAIN_EVERY_S` when None). The thread is
    started and joined by the block."""

    def __init__(self, spark: Any, label: str, *, console: Console, every: float | None = None) -> None:
        self._sc = spark.sparkContext
        self.label = label
        self._console = console
        self._bar = every is None and console.is_terminal
        self._every = every if every is not None else PLAIN_EVERY_S
        self._group = f"coordsim-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="coordsim-spark-progress", daemon=True)
        #: stage id -> (tasks done, tasks) of the stages of finished jobs, frozen.
        self._frozen: dict[int, tuple[int, int]] = {}
        self._finished: set[int] = set()
        self._t0 = time.monotonic()
        self.last = Tally()
        #: Why polling stopped early (the JVM went away under it, say); the
        #: block's own error is the story then, so the display just ends.
        self.error: Exception | None = None

    def __enter__(self) -> SparkProgress:
        # Local properties are per thread (pyspark pins each Python thread to
        # a JVM thread): the block's jobs, run on this thread, get the group.
        self._sc.setJobGroup(self._group, self.label)
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is None:
            self._sc.setLocalProperty("spark.jobGroup.id", None)
            self._sc.setLocalProperty("spark.job.description", None)
            self.last = self.poll()
        self._print(self.line(self.last, final=True))

    def poll(self) -> Tally:
        """Tasks done and known now (a few calls into the JVM per unfinished job)."""
        tracker = self._sc.statusTracker()
        live: dict[int, tuple[int, int]] = {}
        jobs = tracker.getJobIdsForGroup(self._group)
        running = 0
        for job_id in jobs:
            if job_id in self._finished:
                continue
            info = tracker.getJobInfo(job_id)
            if info is None:
                continue
            finished = info.status in _DONE
            running += not finished
            for stage_id in info.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                counts = (stage.numCompletedTasks, stage.numTasks)
                if finished:
                    # Skipped (reused output): nothing done, nothing to do.
                    self._frozen[stage_id] = counts if counts[0] else (0, 0)
                else:
                    live[stage_id] = counts
            if finished:
                self._finished.add(job_id)
        stages = {**live, **self._frozen}
        return Tally(sum(d for d, _ in stages.values()), sum(t for _, t in stages.values()), len(jobs), running)

    def line(self, tally: Tally, *, final: bool = False) -> str:
        wall = time.monotonic() - self._t0
        jobs = f"{tally.jobs} job{'' if tally.jobs == 1 else 's'}"
        if tally.running and not final:
            jobs += f", {tally.running} running"
        return f"{self.label}: {tally.done:,}/{tally.total:,} tasks done ({jobs}), {wall:.1f} s"

    def _print(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _loop(self) -> None:
        try:
            if self._bar:
                self._loop_bar()
                return
            while not self._stop.wait(self._every):
                self.last = self.poll()
                self._print(self.line(self.last))
        except Exception as exc:  # py4j's errors are untyped; the block reports its own
            self.error = exc

    def _loop_bar(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
            TextColumn("{task.fields[jobs]}"), TimeElapsedColumn(), console=self._console, transient=True,
        ) as bar:
            task = bar.add_task(self.label, total=None, jobs="")
            while not self._stop.wait(_BAR_POLL_S):
                self.last = t = self.poll()
                bar.update(task, completed=t.done, total=max(t.total, 1),
                           jobs=f"{t.jobs} jobs" + (f", {t.running} running" if t.running else ""))
