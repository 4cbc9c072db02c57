"""`coordsim check PATH`: judge a recorded history (a trace directory or a
Jepsen-style EDN file) and explain every anomaly in words.

Exit codes are the contract scripts rely on: 0 valid, 1 invalid, 3 unknown (a
limit was hit), 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from sim.cli import options  # noqa: TC001 - typer reads the annotations at run time
from sim.cli.options import wrote
from sim.cli.tables import new_table, plain, print_tables
from sim.history.checker.html import timeline_html
from sim.history.checker.run import CHECKERS, LINEAR_MAX_OPS, check_history
from sim.history.checker.verdict import Outcome
from sim.history.interchange import read_edn
from sim.history.model import HistoryError
from sim.history.traces import find_traces, read_trace
from sim.history.verdict import (
    VERDICT_FILE,
    VERDICT_SIGNATURE,
    verdict_document,
    verdict_text,
    write_verdict,
)
from sim.load.config import MAX_DURATION_S, MAX_OPS, check_float, check_int
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write, claim_file, list_in_output, owning_output

if TYPE_CHECKING:
    from sim.history.checker.run import Report
    from sim.history.model import Event, History

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


def _default_verdict(path: Path) -> tuple[Path | None, str | None]:
    """Where `check PATH` writes verdict.json unasked: inside a trace
    directory, unless that would replace a file that is not coordsim's.
    (None, reason) otherwise; an EDN file gets none, as its directory is often
    a source tree (tests/data/histories). Inside a coordsim output (a run
    directory), `_write_default` lists the file in its marker."""
    if not path.is_dir():
        return None, None
    target = path.absolute() / VERDICT_FILE
    try:
        claim_file(target, VERDICT_SIGNATURE)
    except InvalidUsage as exc:
        return None, str(exc)
    return target, None


def check(
    path: Annotated[
        Path, typer.Argument(metavar="HISTORY", help="A trace directory, any directory holding traces below it (a run directory, coordsim-out/latest, a runs root), or a Jepsen-style EDN history.")
    ],
    html: Annotated[
        Path | None, typer.Option("--html", metavar="FILE", help="Write a timeline page of the operations here (one trace).")
    ] = None,
    checker: Annotated[
        list[str] | None,
        typer.Option("--checker", "-c", metavar="NAME", show_default="all", help=f"Run only these (repeatable; of {', '.join(CHECKERS)})."),
    ] = None,
    linear_limit: Annotated[
        float, typer.Option(metavar="SECONDS", help="Checker 5's time limit in seconds.")
    ] = 10.0,
    linear_max_ops: Annotated[
        int, typer.Option(metavar="N", help="Skip checker 5 above this many operations.")
    ] = LINEAR_MAX_OPS,
    as_json: options.Json = False,
    verdict: Annotated[
        Path | None,
        typer.Option("--verdict", metavar="FILE", show_default=f"TRACE/{VERDICT_FILE}", help="Write the verdict here (one trace)."),
    ] = None,
) -> None:
    """Check recorded histories: named anomalies, strict serializability (black-box and timestamp replay), oracle guarantees, per-table linearizability.

    Writes verdict.json into each trace directory (see sim/history/verdict.py) unless that would touch a file that is not coordsim's. HISTORY may hold several traces (a compare run): each is checked, one line each (path, operations, verdict, anomalies), and the exit code is the worst: 1 if any is invalid, else 3 if any is unknown, else 0; 2 on bad input. With --json and several traces, stdout is a JSON list of their verdict documents.

    Examples:
      coordsim check coordsim-out/latest
      coordsim check coordsim-out/latest --json
      coordsim check history.edn --html timeline.html
    """
    chosen = list(checker or CHECKERS)
    bad = sorted(set(chosen) - set(CHECKERS))
    if bad:
        raise _bad_input(f"unknown checker(s) {', '.join(bad)}; choose from {', '.join(CHECKERS)}")
    try:
        check_float("--linear-limit", linear_limit, low=0, high=MAX_DURATION_S, unit="seconds")
        check_int("--linear-max-ops", linear_max_ops, low=0, high=MAX_OPS, unit="operations")
        if path.is_dir():
            found = find_traces(path)
        elif path.is_file():
            found = [path]
        else:
            raise HistoryError(f"{path}: no such trace directory or EDN file")
        if len(found) > 1 and (html is not None or verdict is not None):
            raise InvalidUsage(f"--html and --verdict take one trace; {path} holds {len(found)}")
        if html is not None:
            claim_file(html, HTML_SIGNATURE)  # before checking: refuse early
        if verdict is not None:
            claim_file(verdict, VERDICT_SIGNATURE)
    except (InvalidUsage, HistoryError) as exc:
        raise _bad_input(str(exc)) from exc
    if len(found) == 1:
        # As given when it is the trace itself, so the report names it as the user did.
        one = path if found[0] == Path(os.path.abspath(path)) or path.is_file() else found[0]
        _check_one(one, chosen, linear_limit, linear_max_ops, html=html, verdict=verdict, as_json=as_json)
    _check_many(found, chosen, linear_limit, linear_max_ops, as_json=as_json)


def _judge(path: Path, chosen: list[str], linear_limit: float, linear_max_ops: int) -> tuple[History, list[Event], Report]:
    try:
        if path.is_dir():
            trace = read_trace(path)
            h, events = trace.history, trace.events
        else:
            h, events = read_edn(path)
        report = check_history(
            h, events, checkers=chosen, linear_time_limit_s=linear_limit, linear_max_ops=linear_max_ops
        )
    except HistoryError as exc:
        raise _bad_input(str(exc)) from exc
    return h, events, report


def _write_default(path: Path, doc: dict[str, Any]) -> tuple[Path | None, str | None]:
    """verdict.json into trace `path` by the rule of `_default_verdict`; (None,
    why) if it was not written."""
    target, not_written = _default_verdict(path)
    if target is not None:
        try:
            write_verdict(target, doc)
            owner = owning_output(target)
            if owner is not None:
                list_in_output(owner, target)
        except (OSError, InvalidUsage) as exc:
            return None, f"cannot write it: {exc}"
    return target, not_written


def _check_many(found: list[Path], chosen: list[str], linear_limit: float, linear_max_ops: int, *, as_json: bool) -> None:
    """Several traces: each checked and its verdict.json written; one line
    each (or a JSON list of the documents); the worst exit code."""
    docs = []
    worst = Outcome.VALID
    unwritten: list[str] = []
    for t in found:
        h, _events, report = _judge(t, chosen, linear_limit, linear_max_ops)
        doc = verdict_document(report, trace=str(t), ops=h.n)
        docs.append(doc)
        target, why = _write_default(t, doc)
        if target is None and why is not None:
            unwritten.append(why)
        if _WORSE[report.outcome] > _WORSE[worst]:
            worst = report.outcome
        if not as_json:
            names = ", ".join(report.names) or "none"
            _out.print(f"{escape(str(t))}: {h.n} operations, {report.outcome.value}, anomalies: {escape(names)}")
    if as_json:
        sys.stdout.write(json.dumps(docs, indent=2, ensure_ascii=False) + "\n")
    else:
        if unwritten:
            _out.print(f"[dim]{VERDICT_FILE} not written for {len(unwritten)} trace(s): {escape(unwritten[0])}[/dim]")
        _out.print(f"verdict: [bold]{worst.value}[/bold] ({len(found)} traces)")
    raise typer.Exit(EXIT[worst])


#: How bad an outcome is, for the worst of several: invalid > unknown > valid.
_WORSE: Final = {Outcome.VALID: 0, Outcome.UNKNOWN: 1, Outcome.INVALID: 2}


def _check_one(
    path: Path, chosen: list[str], linear_limit: float, linear_max_ops: int, *,
    html: Path | None, verdict: Path | None, as_json: bool,
) -> None:  # fmt: skip
    h, events, report = _judge(path, chosen, linear_limit, linear_max_ops)
    doc = verdict_document(report, trace=str(path), ops=h.n)
    # The page first: bad input (an unwritable --html) must leave nothing behind.
    if html is not None:
        page = f"<!-- {HTML_SIGNATURE} -->\n" + timeline_html(h, report, title=str(path))
        try:
            atomic_write(html, lambda p: p.write_text(page, encoding="utf-8"))
        except OSError as exc:
            raise _bad_input(f"cannot write {html}: {exc.strerror or exc}") from exc
    if verdict is not None:
        target: Path | None = verdict
        not_written = None
        try:
            write_verdict(verdict, doc)
        except (OSError, InvalidUsage) as exc:  # asked for: failing to write it is the answer
            msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _bad_input(f"cannot write {verdict}: {msg}") from exc
    else:
        target, not_written = _write_default(path, doc)
    if as_json:
        sys.stdout.write(verdict_text(doc))
        raise typer.Exit(EXIT[report.outcome])
    _out.print(f"[bold]{escape(str(path))}[/bold]: {h.n} operations, {len(events)} internal events")
    table = new_table("checker", "verdict", "found", "time", plain=plain(_out), numeric=("time",))
    for v in report.verdicts:
        found = ", ".join([*(f"{n} x{c}" for n, c in v.counts.items()), *([v.reason] if v.reason else [])])
        if v.skipped:
            table.add_row(v.checker, Text("skipped", style="dim"), found, "—")
            continue
        color = {"valid": "green", "invalid": "red", "unknown": "yellow"}[v.outcome.value]
        table.add_row(v.checker, Text(v.outcome.value, style=color), found, fmt_seconds(v.seconds))
    print_tables([table], console=_out)
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
    if target is None and not_written is not None:
        _out.print(f"[dim]{VERDICT_FILE} not written: {escape(not_written)} (--verdict FILE writes it elsewhere)[/dim]")
    if target is not None:
        wrote(target)
    raise typer.Exit(EXIT[report.outcome])




def register(app: typer.Typer) -> None:
    """Adds `check` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("check")(check)
