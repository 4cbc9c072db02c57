"""Bad input, numbers (issue 38 item 5): a huge and a negative value for every
numeric option of every command, each refused in one line that names the
option, exit 2, nothing changed; and every count option states its upper
bound in its --help, the very bound its refusal names.

The options are enumerated from the typer app (every `int` and `float`
option, and the comma-separated counts, whose type is `str`), so a new one is
covered by itself; a command without a base invocation in bad_input_base.py
fails `test_every_numeric_option_is_in_the_corpus`. A seed may be any 64-bit
integer, negative ones too: its negative case is one past 64 bits. The
runner and the promise each case is held to are tests/sim/cli/test_bad_input.py's.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pytest

from tests.sim.cli.bad_input_base import BASE
from tests.sim.cli.bad_input_base import VIRTUAL as _V
from tests.sim.cli.test_bad_input import (
    Case,
    _c,
    _trace,
    cli_params,
    params,
    run_case,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.sim.cli.test_bad_input import Forker

#: `str` options that hold counts: comma-separated, each one bounded.
COUNT_LISTS: Final = frozenset({"concurrency", "adapters"})
#: Options that are not counts: a seed, any 64-bit integer.
SEEDS: Final = frozenset({"seed", "first_seed"})
_HUGE_INT: Final = str(10**25)
_HUGE_FLOAT: Final = "1e300"
#: A count's documented range in its help: "1 to 1,024", "0 to 5,000".
_RANGE: Final = re.compile(r"\b(\d[\d,]*) to (\d[\d,]*)\b")


@dataclass(frozen=True)
class Numeric:
    command: tuple[str, ...]
    param: str
    flag: str
    kind: str  # "int", "float" or "counts" (a comma-separated list of them)
    help: str

    @property
    def count(self) -> bool:
        return self.kind != "float" and self.param not in SEEDS

    @property
    def maximum(self) -> int | None:
        """The upper bound its help states (its first range's), if any."""
        found = _RANGE.search(self.help)
        return int(found[2].replace(",", "")) if found else None


def numeric_options() -> list[Numeric]:
    out = []
    for command, p, annotation in cli_params():
        if not p.opts[0].startswith("-"):
            continue
        text = str(annotation)
        kind = ("float" if "float" in text else "int" if "int" in text and "Path" not in text
                else "counts" if p.name in COUNT_LISTS else None)
        if kind is None:
            continue
        flag = next(o for o in p.opts if o.startswith("--"))
        out.append(Numeric(command, p.name, flag, kind, " ".join(str(p.help or "").split())))
    return out


def _setup(args: tuple[str, ...]) -> Callable[[Path, Path], None] | None:
    if "t" not in args:
        return None

    def setup(cwd: Path, valid: Path) -> None:
        shutil.copytree(valid, cwd / "t")

    return setup


#: Count options whose help does not state their upper bound yet (strictly
#: these: one documented since, or a new one undocumented, fails the test).
_UNDOCUMENTED: Final[dict[tuple[str, ...], str]] = {}


def _generated() -> list[object]:
    out: list[object] = []
    for n in numeric_options():
        huge = _HUGE_FLOAT if n.kind == "float" else _HUGE_INT
        negative = f"-{_HUGE_INT}" if n.param in SEEDS else "-1"
        cid = f"{'-'.join(n.command)}-{n.flag[2:]}"
        for label, value in (("huge", huge), ("negative", negative)):
            args = (*BASE.get(n.command, n.command), n.flag, value)
            out.append(Case(f"every-{cid}-{label}", args, n.flag, setup=_setup(args)))
    return out


#: By hand: zero, the bounds themselves, values past 64 bits, and through the
#: entry point (the generated cases cover a huge and a negative value of each).
_BY_HAND: Final = [
    _c("anomalies-sweep-seeds-huge", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "99999999999",
       expect="--seeds must be between 1 and 10000000, got 99999999999", entry_point=True),
    _c("anomalies-sweep-seeds-zero", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "0",
       expect="--seeds must be between 1 and 10000000, got 0"),
    _c("anomalies-sweep-seeds-negative", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "-3",
       expect="--seeds must be between 1 and 10000000, got -3"),
    _c("anomalies-sweep-jobs-huge", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "2", "-j", "99999",
       expect="--jobs 99999 exceeds the maximum 1024 worker processes"),
    _c("anomalies-sweep-first-seed-past-64-bits", "anomalies", "sweep", "--scenario", "seed001", "--seeds", "2",
       "--first-seed", str(2**63 - 1), expect=f"--first-seed {2**63 - 1} exceeds the maximum {2**63 - 2}"),
    _c("anomalies-matrix-seeds-huge", "anomalies", "matrix", "--seeds", "999999999999",
       expect="--seeds 999999999999 exceeds the maximum 10000000 seeds"),
    _c("anomalies-matrix-seeds-zero", "anomalies", "matrix", "--seeds", "0", expect="--seeds must be >= 1, got 0"),
    _c("anomalies-size-zero", "anomalies", "run", "seed001", "--size", "0", expect="--size must be >= 1, got 0"),
    _c("shrink-max-runs-huge", "shrink", "seed001", "--max-runs", "9999999",
       expect="--max-runs 9999999 exceeds the maximum 100000 runs"),
    _c("synth-trace-planted-huge", "synth-trace", "--ops", "10", "--planted", "99999999",
       expect="--planted 99999999 exceeds the maximum 5000 chunks"),
    _c("synth-trace-planted-past-64-bits", "synth-trace", "--ops", "10", "--planted", str(2**70),
       expect="exceeds the maximum 5000 chunks"),
    _c("sweep-seeds-huge", "spark", "sweep", "--seeds", "99999999", "--config", "decoupled", "--scenario", "seed001",
       expect="--seeds 99999999 exceeds the maximum 1000000 seeds"),
    _c("replay-shuffle-partitions-huge", "spark", "replay", "t", "--shuffle-partitions", "9999999",
       setup=_trace("t", lambda d: None), expect="--shuffle-partitions 9999999 exceeds the maximum 100000"),
    _c("calibrate-samples-huge", "calibrate", "--samples", "99999999",
       expect="--samples 99999999 exceeds the maximum 1000000 round trips"),
    _c("check-linear-max-ops-huge", "check", "t", "--linear-max-ops", "999999999999",
       setup=_trace("t", lambda d: None), expect="--linear-max-ops 999999999999 exceeds the maximum 100000000"),
    _c("check-jobs-zero", "check", "t", "-j", "0", setup=_trace("t", lambda d: None),
       expect="--jobs must be >= 1, got 0"),
    _c("compare-repeat-zero", "compare", *_V, "--repeat", "0", expect="--repeat) must be >= 1, got 0"),
    _c("compare-repeat-huge", "compare", *_V, "--repeat", "99999", expect="99999 exceeds the maximum 1000 repetitions"),
    _c("compare-tables-zero", "compare", *_V, "--tables", "0", expect="--tables) must be >= 1, got 0"),
    _c("compare-ops-negative", "compare", *_V, "--ops", "-7", expect="must be >= 1, got -7"),
    _c("compare-adapters-huge", "compare", *_V, "--adapters", "99999", expect="--adapters 99999 exceeds the maximum 64"),
]

CASES: Final = [*_generated(), *_BY_HAND]
_MAXIMUM: Final = {f"every-{'-'.join(n.command)}-{n.flag[2:]}-huge": n.maximum for n in numeric_options() if n.count}


def test_every_numeric_option_is_in_the_corpus() -> None:
    found = numeric_options()
    missing = sorted({n.command for n in found} - set(BASE))
    assert not missing, f"add a base invocation for {missing} to BASE (tests/sim/cli/bad_input_base.py)"
    assert len(found) >= 40, len(found)
    assert {n.param for n in found} >= COUNT_LISTS | SEEDS


def test_every_count_option_documents_its_upper_bound() -> None:
    """`N to M` in the help of every count option (Typer's `[default: …]`
    aside): the user learns the bound before the refusal tells it."""
    undocumented = {(*n.command, n.flag): n.help for n in numeric_options() if n.count and n.maximum is None}
    assert set(undocumented) == set(_UNDOCUMENTED), "\n".join(f"{k}: {v!r}" for k, v in undocumented.items())


@pytest.mark.parametrize("case", params(CASES))
def test_a_bad_number_is_refused_in_one_line(case: Case, forker: Forker, valid_trace: Path, tmp_path: Path) -> None:
    line = run_case(case, forker, valid_trace, tmp_path)
    maximum = _MAXIMUM.get(case.id)
    if maximum is not None:  # the refusal names the bound the help documents
        assert str(maximum) in line.replace(",", ""), (line, maximum)
