"""compare's tables, one per workload: by default the columns a reader needs
first, within 80 columns for realistic values (5-digit throughput, 4-digit
milliseconds); `wide`, every measure of `results.csv`'s cells that a person
reads. A level that is not steady or is host-bound is marked beside its
client count, since no conclusion may rest on it (`LevelRow.concludable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sim.compare.report import errors_short, errors_text, fixed_text, tput_text
from sim.runtime.tablestyle import new_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.table import Table

    from sim.compare.rows import LevelRow

__all__ = ["DEFAULT_HEADERS", "WIDE_HEADERS", "tables"]

#: The default table: what a reader needs first. Two-line headers keep each
#: column as narrow as its numbers (new_table joins them with a space off a terminal).
DEFAULT_HEADERS: Final = ("config", "clients", "ops/s\n(95% CI)", "p50\nms", "p99\nms", "mean ± sd\nms", "errors")
#: `--wide` (and every table off a terminal): every measure.
WIDE_HEADERS: Final = (
    "config", "clients", "ops/s\n(95% CI)", "ops", "errors", "p50\nms", "p99\nms", "p99.9\nms", "mean ± sd\nms",
    "lat. n", "censored", "Little's\nlaw", "oracle\nq/op", "loop\nbusy", "loop\nmsg/op", "verdict", "steady",
    "host-bound",
)
_TEXT: Final = frozenset({"config", "verdict", "steady", "host-bound"})
#: Marks beside the client count, explained in the table's caption.
_UNSTEADY: Final = "*"
_HOST_BOUND: Final = "!"


def tables(rows: Sequence[LevelRow], *, plain: bool, wide: bool) -> list[Table]:
    """One table per workload: configuration x concurrency → the measures.

    Args:
        rows: the levels, in the order they are to be shown.
        plain: stdout is not a terminal (`sim.runtime.tablestyle.new_table`).
        wide: every column (`WIDE_HEADERS`), else `DEFAULT_HEADERS`.
    """
    heads = WIDE_HEADERS if wide else DEFAULT_HEADERS
    # errors: a count in the default table; with its rate and codes (text) when wide.
    numeric = [h for h in heads if h not in _TEXT and not (wide and h == "errors")]
    out = []
    for wl in dict.fromkeys(r.workload for r in rows):
        mine = [r for r in rows if r.workload == wl]
        marks = [_mark(r) for r in mine]
        width = max(map(len, marks))
        t = new_table(*heads, title=f"{wl} ({mine[0].mode} mode)", caption=_legend(mine, wide=wide),
                      plain=plain, numeric=numeric)
        for i, (r, mark) in enumerate(zip(mine, marks, strict=True)):
            clients = f"{r.concurrency:,}" + (" " + mark.ljust(width) if width else "")
            last = i + 1 == len(mine) or mine[i + 1].config != r.config
            t.add_row(*(_wide if wide else _default)(r, clients),
                      style="yellow" if mark and not plain else None, end_section=last and not plain)
        out.append(t)
    return out


def _default(r: LevelRow, clients: str) -> list[str]:
    return [r.config, clients, tput_text(r), _ms(r.p50_ms), _ms(r.p99_ms), _mean_sd(r), errors_short(r)]


def _wide(r: LevelRow, clients: str) -> list[str]:
    return [
        r.config, clients, tput_text(r), f"{r.ops:,}", errors_text(r), _ms(r.p50_ms), _ms(r.p99_ms), _ms(r.p999_ms),
        _mean_sd(r), f"{r.latency_samples:,}", f"{r.censored:,}", fixed_text(r.littles_law_ratio, "{:.2f}"),
        fixed_text(r.oracle_queries_per_op, "{:.2f}"), fixed_text(r.loop_busy_fraction, "{:.0%}"),
        fixed_text(r.loop_messages_per_op, "{:.2f}"), r.verdict or "—",
        "yes" if r.steady else f"no: {r.steady_note}" if r.steady_note else "no", r.host_bound or "no",
    ]


def _mark(r: LevelRow) -> str:
    return ("" if r.steady else _UNSTEADY) + (_HOST_BOUND if r.host_bound else "")


def _legend(rows: Sequence[LevelRow], *, wide: bool) -> str | None:
    found = []
    if not all(r.steady for r in rows):
        found.append(f"{_UNSTEADY} not steady")
    if any(r.host_bound for r in rows):
        found.append(f"{_HOST_BOUND} host-bound")
    if not found:
        return None
    return ", ".join(found) + ": no conclusion rests on it" + ("" if wide else " (--wide says why)")


def _ms(v: float | None) -> str:
    """Milliseconds to three significant digits (four from 1,000): the
    HdrHistograms behind them hold three (`sim.load.loadgen`), so more
    digits would only take width."""
    if v is None:
        return "—"
    digits = 0 if v >= 100 else 1 if v >= 10 else 2 if v >= 1 else 3
    return f"{v:,.{digits}f}"


def _mean_sd(r: LevelRow) -> str:
    if r.mean_ms is None:
        return "—"
    return _ms(r.mean_ms) if r.stddev_ms is None else f"{_ms(r.mean_ms)} ± {_ms(r.stddev_ms)}"





