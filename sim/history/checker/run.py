"""Runs the checkers over a history and combines their verdicts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from sim.history.checker.blackbox import check_blackbox
from sim.history.checker.linear import check_linear
from sim.history.checker.named import check_named
from sim.history.checker.oracle_events import check_oracle_events
from sim.history.checker.replay import check_replay
from sim.history.checker.verdict import Collector, Outcome, Verdict, combine
from sim.history.model import validate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sim.history.model import Event, History

__all__ = ["CHECKERS", "LINEAR_MAX_OPS", "Report", "check_history"]

CHECKERS: Final = ("named", "blackbox", "replay", "oracle", "linear")
#: Checker 5 is exponential; above this many ops it is skipped unless forced.
LINEAR_MAX_OPS: Final = 2_000


@final
@dataclass(frozen=True)
class Report:
    outcome: Outcome
    verdicts: tuple[Verdict, ...]

    @property
    def names(self) -> list[str]:
        return sorted({n for v in self.verdicts for n in v.counts})


def check_history(
    h: History,
    events: Sequence[Event] = (),
    *,
    checkers: Sequence[str] = CHECKERS,
    linear_time_limit_s: float = 10.0,
    linear_max_ops: int = LINEAR_MAX_OPS,
) -> Report:
    """Validates `h` (raising `HistoryError` on malformed input) and runs the
    chosen checkers in a fixed order."""
    validate(h)
    out: list[Verdict] = []
    for name in CHECKERS:
        if name not in checkers:
            continue
        if name == "named":
            out.append(check_named(h))
        elif name == "blackbox":
            out.append(check_blackbox(h))
        elif name == "replay":
            out.append(check_replay(h))
        elif name == "oracle":
            out.append(check_oracle_events(events))
        elif h.n <= linear_max_ops:
            out.append(check_linear(h, time_limit_s=linear_time_limit_s))
        else:
            t0 = time.perf_counter()
            out.append(Collector("linear").verdict(
                unknown=f"{h.n} operations exceed checker 5's limit of {linear_max_ops}",
                skipped=True, seconds=time.perf_counter() - t0))  # fmt: skip
    unknown = sorted(set(checkers) - set(CHECKERS))
    if unknown:
        raise ValueError(f"unknown checkers {unknown}; choose from {list(CHECKERS)}")
    return Report(combine(out), tuple(out))
