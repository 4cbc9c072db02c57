"""A command whose standard output is a full device (`> /dev/full`) says so in
one line on stderr and exits 1, the class of an external failure, with no
traceback (issue 38 item 5): the catch-all for writes no command handles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("argv", [["config", "show"], ["--help"], ["anomalies", "list"]])
def test_output_to_a_full_device_is_one_line_and_exit_1(argv: list[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.fail("this test needs /dev/full (Linux): it is missing here")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-c", "from sim.cli.entry import main; main()", *argv],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines == ["coordsim: error: no space left to write the output (No space left on device)"], proc.stderr
