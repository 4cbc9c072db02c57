"""Spark commands show progress (tasks done out of those known, from Spark's
status tracker) and keep the JVM off the console (issue 37, item 5): a
plain line every -P seconds off a terminal, a bar on one, and the JVM's log
lines (log4j2's WARNs, NativeCodeLoader's) in the run directory's spark.log.

The CLI runs in a process of its own: its JVM must be one that command
started (the session fixture's JVM writes where pytest's process does)."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Final

import pytest
from rich.console import Console

from sim.spark.progress import SparkProgress
from tests.sim.spark.conftest import GOLDEN

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

_ENTRY: Final = Path(sys.executable).parent / "coordsim"
_LINE: Final = re.compile(r"spark replay: (\d[\d,]*)/(\d[\d,]*) tasks done \((\d+) jobs?(, \d+ running)?\), \d+\.\d s")
#: What the JVM writes when it starts or plans (log4j2's pattern, Spark's own).
_JVM: Final = re.compile(r"\bWARN\b|NativeCodeLoader|log4j|SparkContext|Using incubator modules")
_TRACE: Final = str(GOLDEN / "seed001-valid")


def _counts(line: str) -> tuple[int, int]:
    m = _LINE.fullmatch(line.strip())
    assert m is not None, line
    return int(m[1].replace(",", "")), int(m[2].replace(",", ""))


def test_off_a_terminal_progress_is_lines_and_the_jvm_writes_to_spark_log(tmp_path: Path) -> None:
    out = tmp_path / "replay"
    r = subprocess.run(
        [str(_ENTRY), "spark", "replay", _TRACE, "--master", "local[2]", "-o", str(out), "-P", "0.5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=540, check=False,
    )
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert err, "no progress on stderr"
    assert not [line for line in err if _JVM.search(line)], r.stderr
    # Every stderr line is a progress line; the last is the total, all done.
    counts = [_counts(line) for line in err]
    assert len(counts) >= 3, r.stderr
    done, total = counts[-1]
    assert done == total > 0
    assert all(d <= t for d, t in counts)
    log = (out / "spark.log").read_text(errors="replace")
    assert _JVM.search(log), log  # what the console was spared
    assert r.stdout.splitlines()[-1] == f"wrote {out}"


def test_on_a_terminal_progress_is_a_bar_and_nothing_of_the_jvm(tmp_path: Path) -> None:
    out = tmp_path / "replay"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(_ENTRY), "spark", "replay", _TRACE, "--master", "local[2]", "-o", str(out)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # the bar would block on a full terminal otherwise
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        stdout, _ = proc.communicate(timeout=540)
    finally:
        reader.join(timeout=30)
        os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    assert re.search(r"spark replay\s.*\d+/\d+\s+tasks\s+\d+ jobs", shown), shown  # the bar
    final = [line for line in shown.replace("\r", "\n").splitlines() if _LINE.fullmatch(line.strip())]
    assert final, shown
    done, total = _counts(final[-1])
    assert done == total > 0
    assert not _JVM.search(shown), shown
    assert stdout.decode().splitlines()[-1] == f"wrote {out}"


def test_only_the_blocks_jobs_count(spark: Any) -> None:
    sc = spark.sparkContext
    sc.parallelize(range(10), 3).count()  # before the block: not counted
    shown = io.StringIO()
    with SparkProgress(spark, "t", console=Console(file=shown, width=200), every=0.05) as p:
        sc.parallelize(range(100), 4).map(lambda x: x * 2).count()
        sc.parallelize(range(100), 2).count()
    assert p.error is None
    assert (p.last.done, p.last.total, p.last.jobs, p.last.running) == (6, 6, 2, 0)
    lines = shown.getvalue().splitlines()
    assert lines[-1].startswith("t: 6/6 tasks done (2 jobs), ")
