"""`coordsim check PATH`: judge a recorded history (a trace directory or a
Jepsen-style EDN file) and explain every anomaly in words.

Exit codes are the contract scripts rely on: 0 valid, 1 invalid, 3 unknown (a
limit was hit), 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path  # noqa: TC003 - typer reads the annotations at run time
from typing import Annotated, Any, Final

import typer
from rich.console import Console
from rich.markup import escape

from sim.history.checker.html import timeline_html
from sim.history.checker.run import CHECKERS, LINEAR_MAX_OPS, check_history
from sim.history.checker.verdict import Outcome
from sim.history.interchange import read_edn
from sim.history.model import HistoryError
from sim.history.traces import read_trace
from sim.history.verdict import (
    VERDICT_FILE,
    VERDICT_SIGNATURE,
    verdict_document,
    verdict_text,
    write_verdict,
)
from sim.load.config import MAX_DURATION_S, MAX_OPS, check_float, check_int
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import MARKER, atomic_write, claim_file, is_coordsim_output

__all__ = ["EXIT", "check", "register"]

EXIT: Final = {Outcome.VALID: 0, Outcome.INVALID: 1, Outcome.UNKNOWN: 3}
#: Marks a timeline page as ours: `--html` replaces only a file that has it.
HTML_SIGNATURE: Final = "written by coordsim check"
_out = Console(highlight=False, soft_wrap=True)  # no hard wraps: output is grepped


def _bad_input(msg: str) -> typer.Exit:
    line = " ".join(msg.split())  # one line, whatever a library's message spans
    print(f"coordsim: invalid input: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(2)


def fmt_seconds(s: float) -> str:
    """A checker's time: milliseconds below a second (most checks take a few,
    which `.2f` seconds printed as "0.00s"), seconds above."""
    return f"{s * 1e3:.3g}ms" if s < 1 else f"{s:.2f}s"


def _listed(owner: Path, target: Path) -> bool:
    """True if the marker of coordsim output `owner` lists `target`, so writing
    it keeps the output replaceable (an unlisted file makes coordsim refuse to
    replace that output later, as if the user had added it)."""
    try:
        data: Any = json.loads((owner / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    files = data.get("files") if isinstance(data, dict) else None
    return isinstance(files, list) and str(target.relative_to(owner)) in files


def _default_verdict(path: Path) -> tuple[Path | None, str | None]:
    """Where `check PATH` writes verdict.json unasked: inside a trace
    directory, unless that would touch a file, or an output, that is not
    coordsim's to change. (None, reason) otherwise; an EDN file gets none, as
    its directory is often a source tree (tests/data/histories)."""
    if not path.is_dir():
        return None, None
    target = path.absolute() / VERDICT_FILE
    try:
        claim_file(target, VERDICT_SIGNATURE)
    except InvalidUsage as exc:
        return None, str(exc)
    for owner in (target.parent, *target.parent.parents):
        if is_coordsim_output(owner) and not _listed(owner, target):
            return None, f"{owner} is a coordsim output that does not list {VERDICT_FILE}"
    return target, None


def check(
    path: Annotated[Path, typer.Argument(help="A trace directory or a Jepsen-style EDN history.")],
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a timeline page of the operations here.")
    ] = None,
    checker: Annotated[
        list[str] | None,
        typer.Option("--checker", "-c", help=f"Run only these (of {', '.join(CHECKERS)})."),
    ] = None,
    linear_limit: Annotated[
        float, typer.Option(help="Checker 5's time limit in seconds.")
    ] = 10.0,
    linear_max_ops: Annotated[
        int, typer.Option(help="Skip checker 5 above this many operations.")
    ] = LINEAR_MAX_OPS,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print verdict.json's document to stdout instead of the report.")
    ] = False,
    verdict: Annotated[
        Path | None,
        typer.Option("--verdict", help=f"Write the verdict here (default: PATH/{VERDICT_FILE} for a trace directory)."),
    ] = None,
) -> None:
    """Check a history: named anomalies, strict serializability (black-box and
    timestamp replay), oracle guarantees, per-table linearizability. Writes
    verdict.json (see sim/history/verdict.py)."""
    chosen = list(checker or CHECKERS)
    bad = sorted(set(chosen) - set(CHECKERS))
    if bad:
        raise _bad_input(f"unknown checker(s) {', '.join(bad)}; choose from {', '.join(CHECKERS)}")
    try:
        check_float("--linear-limit", linear_limit, low=0, high=MAX_DURATION_S, unit="seconds")
        check_int("--linear-max-ops", linear_max_ops, low=0, high=MAX_OPS, unit="operations")
        if html is not None:
            claim_file(html, HTML_SIGNATURE)  # before checking: refuse early
        if verdict is not None:
            claim_file(verdict, VERDICT_SIGNATURE)
    except InvalidUsage as exc:
        raise _bad_input(str(exc)) from exc
    try:
        if path.is_dir():
            trace = read_trace(path)
            h, events = trace.history, trace.events
        elif path.is_file():
            h, events = read_edn(path)
        else:
            raise HistoryError(f"{path}: no such trace directory or EDN file")
        report = check_history(
            h, events, checkers=chosen, linear_time_limit_s=linear_limit, linear_max_ops=linear_max_ops
        )
    except HistoryError as exc:
        raise _bad_input(str(exc)) from exc
    doc = verdict_document(report, trace=str(path), ops=h.n)
    # The page first: bad input (an unwritable --html) must leave nothing behind.
    if html is not None:
        page = f"<!-- {HTML_SIGNATURE} -->\n" + timeline_html(h, report, title=str(path))
        try:
            atomic_write(html, lambda p: p.write_text(page, encoding="utf-8"))
        except OSError as exc:
            raise _bad_input(f"cannot write {html}: {exc.strerror or exc}") from exc
    target, not_written = (verdict, None) if verdict is not None else _default_verdict(path)
    if target is not None:
        try:
            write_verdict(target, doc)
        except (OSError, InvalidUsage) as exc:
            if verdict is not None:  # asked for: failing to write it is the answer
                msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise _bad_input(f"cannot write {verdict}: {msg}") from exc
            target, not_written = None, f"cannot write it: {exc}"
    if as_json:
        sys.stdout.write(verdict_text(doc))
        raise typer.Exit(EXIT[report.outcome])
    _out.print(f"[bold]{escape(str(path))}[/bold]: {h.n} operations, {len(events)} internal events")
    for v in report.verdicts:
        extra = f" ({escape(v.reason)})" if v.reason else ""
        if v.skipped:
            _out.print(f"  {v.checker:<9} [dim]skipped{extra}[/dim]")
            continue
        color = {"valid": "green", "invalid": "red", "unknown": "yellow"}[v.outcome.value]
        counts = ", ".join(f"{n} x{c}" for n, c in v.counts.items())
        _out.print(
            f"  {v.checker:<9} [{color}]{v.outcome.value}[/{color}]{' — ' + counts if counts else ''}"
            f"{extra} [dim]{fmt_seconds(v.seconds)}[/dim]"
        )
    for v in report.verdicts:
        for a in v.anomalies:
            ops = ", ".join(str(o) for o in a.ops)
            _out.print(f"\n[bold red]{a.name}[/bold red] [dim]({a.checker}; ops {ops})[/dim]")
            _out.print(escape(a.explanation))
        shown = len(v.anomalies)
        total = sum(v.counts.values())
        if total > shown:
            _out.print(f"[dim]… and {total - shown} more from {v.checker}[/dim]")
    _out.print(f"\nverdict: [bold]{report.outcome.value}[/bold]")
    if html is not None:
        _out.print(f"timeline: {escape(str(html))}")
    if target is not None:
        _out.print(f"verdict.json: {escape(str(target))}")
    elif not_written is not None:
        _out.print(f"[dim]{VERDICT_FILE} not written: {escape(not_written)} (--verdict FILE writes it elsewhere)[/dim]")
    raise typer.Exit(EXIT[report.outcome])


def register(app: typer.Typer) -> None:
    """Adds `check` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("check")(check)
