"""A self-contained HTML timeline of a history: one lane per process, one bar
per operation from invoke to completion, the anomalies' operations
highlighted, each anomaly's explanation listed with links to its bars."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Final

from sim.history.checker.tables import INF, ends
from sim.history.checker.verdict import describe, fmt_t
from sim.history.model import FAIL, INFO

if TYPE_CHECKING:
    from sim.history.checker.run import Report
    from sim.history.model import History

__all__ = ["timeline_html"]

#: Bars drawn at most; around the anomalies when there are any.
MAX_BARS: Final = 1_500
_LANE: Final = 18
_WIDTH: Final = 1400


def timeline_html(h: History, report: Report, *, title: str = "coordsim history") -> str:
    row_of = h.index_of()
    flagged: dict[int, list[int]] = {}  # row -> anomaly numbers
    anomalies = [a for v in report.verdicts for a in v.anomalies]
    for k, a in enumerate(anomalies):
        for oid in a.ops:
            r = row_of.get(oid)
            if r is not None:
                flagged.setdefault(r, []).append(k)
    e = ends(h)
    last = max((x for x in e if x < INF), default=0)
    last = max([last, *list(h.invoke)]) + 1
    if flagged:
        lo = min(h.invoke[r] for r in flagged)
        hi = max(min(e[r], last) for r in flagged)
        rows = sorted(flagged) + [i for i in range(h.n) if i not in flagged and h.invoke[i] <= hi and e[i] >= lo]
    else:
        rows = list(range(h.n))
    rows = sorted(set(rows[:MAX_BARS]))
    t0 = min((h.invoke[r] for r in rows), default=0)
    t1 = max((min(e[r], last) for r in rows), default=1)
    span = max(t1 - t0, 1)
    procs = sorted({h.process[r] for r in rows})
    lane = {p: k for k, p in enumerate(procs)}
    bars = []
    for r in rows:
        x = 120 + (h.invoke[r] - t0) / span * (_WIDTH - 140)
        end = min(e[r], t1)
        w = max(2.0, (end - h.invoke[r]) / span * (_WIDTH - 140))
        y = 10 + lane[h.process[r]] * _LANE
        st = h.status[r]
        cls = "info" if st == INFO else "fail" if st == FAIL else "ok"
        if r in flagged:
            cls += " bad"
        tip = f"{describe(h, r)}\ninvoke {fmt_t(h.invoke[r])}, complete {fmt_t(e[r])}"
        if flagged.get(r):
            tip += "\nanomalies: " + ", ".join(f"#{k + 1}" for k in flagged[r])
        bars.append(
            f'<rect id="op{h.op_id[r]}" class="{cls}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
            f'height="{_LANE - 4}"><title>{html.escape(tip)}</title></rect>'
        )
    labels = [
        f'<text x="4" y="{10 + k * _LANE + 11}">process {p}</text>' for p, k in lane.items()
    ]
    height = 36 + len(procs) * _LANE
    items = []
    for k, a in enumerate(anomalies):
        links = " ".join(f'<a href="#op{o}">op {o}</a>' for o in a.ops)
        items.append(
            f"<li><b>#{k + 1} {html.escape(a.name)}</b> ({html.escape(a.checker)}): "
            f"{html.escape(a.explanation)}<br>{links}</li>"
        )
    verdicts = "".join(
        f"<li>{html.escape(v.checker)}: <b>{'skipped' if v.skipped else v.outcome}</b>"
        + (f" — {html.escape(v.reason)}" if v.reason else "")
        + "</li>"
        for v in report.verdicts
    )
    ticks = []
    for k in range(5):
        t = t0 + span * k // 4
        x = 120 + (t - t0) / span * (_WIDTH - 140)
        ticks.append(
            f'<line x1="{x:.1f}" y1="{height - 14}" x2="{x:.1f}" y2="{height - 8}" stroke="#888"/>'
            f'<text x="{x:.1f}" y="{height}" text-anchor="middle">{fmt_t(t)}</text>'
        )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 13px sans-serif; margin: 1em; }}
rect.ok {{ fill: #8fb8de; }} rect.fail {{ fill: #ccc; }} rect.info {{ fill: #f3c078; }}
rect.bad {{ stroke: #d00; stroke-width: 2.5; fill: #f08080; }}
rect:target {{ stroke: #000; stroke-width: 3; }}
svg text {{ font: 11px monospace; }}
</style></head><body>
<h1>{html.escape(title)}: {report.outcome}</h1>
<ul>{verdicts}</ul>
<p>{len(rows)} of {h.n} operations shown, {fmt_t(t0)} to {fmt_t(t1)}; red = involved in an anomaly,
orange = indeterminate (info), grey = failed. Hover a bar for the operation.</p>
<svg width="{_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">
{"".join(labels)}
{"".join(bars)}
{"".join(ticks)}
</svg>
<h2>Anomalies</h2>
<ol>{"".join(items) or "<li>none</li>"}</ol>
</body></html>
"""
