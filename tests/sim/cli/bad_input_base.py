"""The base invocations the bad-input corpus adds a bad value to: one table
for test_bad_input_files.py (a bad file for a file parameter) and
test_bad_input_numbers.py (a bad number for a numeric option), so a command
gains its minimal valid invocation once. Each suite's own check fails should
a command with a parameter it covers lack one here."""

from __future__ import annotations

from typing import Final

__all__ = ["BASE", "VIRTUAL"]

#: Virtual mode: the cases never need a real server.
VIRTUAL: Final = ("--mode", "virtual")

#: A minimal valid invocation of each command that has a file parameter or a
#: numeric option; the parameter under test is added to it. (`t` is a valid
#: trace directory.)
BASE: Final[dict[tuple[str, ...], tuple[str, ...]]] = {
    ("check",): ("check", "t"),
    ("shrink",): ("shrink", "seed001"),
    ("compare",): ("compare", *VIRTUAL, "--quick"),
    ("run",): ("run", "insert", *VIRTUAL),
    ("export",): ("export", "t", "-f", "edn"),
    ("isolation",): ("isolation", *VIRTUAL),
    ("calibrate",): ("calibrate",),
    ("spark", "replay"): ("spark", "replay", "t"),
    ("spark", "sweep"): ("spark", "sweep", "seed001", "--seeds", "2"),
    ("synth-trace",): ("synth-trace", "--ops", "10"),
    ("validate",): ("validate", "--quick"),
    ("anomalies", "run"): ("anomalies", "run", "seed001"),
    ("anomalies", "sweep"): ("anomalies", "sweep", "seed001", "--seeds", "2"),
    ("anomalies", "matrix"): ("anomalies", "matrix", "--seeds", "1"),
    ("config", "show"): ("config", "show"),
    ("catalog", "dump"): ("catalog", "dump", "--location", "persist+mem://"),
}
