"""`coordsim check PATH`: judge recorded histories (trace directories or
Jepsen-style EDN files, one or a directory of them) and explain every anomaly
in words, with what the checkers covered per table.

Exit codes are the contract scripts rely on: 0 valid (every operation to
judge was judged), 1 invalid (an anomaly), 3 unknown (coverage incomplete:
an operation no checker could judge, a search bound or a time limit), 2 bad
input (one line on stderr, no traceback). Over several histories, the worst:
1, else 2, else 3, else 0.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, final

import typer

from sim.cli import options
from sim.cli.options import wrote
from sim.history.checker.run import CHECKERS, LINEAR_MAX_OPS, RENAMED_CHECKERS
from sim.history.model import HistoryError
from sim.history.verdict_file import VERDICT_FILE
from sim.load.limits import MAX_DURATION_S, MAX_OPS, check_float, check_int
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.owned_files import claim_file, write_owned
from sim.runtime.workers import MAX_JOBS, workers

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from sim.history.checker.run import Report
    from sim.history.checker.verdict import Outcome
    from sim.history.model import Event, History

__all__ = ["BAD_INPUT", "EXIT", "Checked", "check", "check_file", "document", "find_histories", "register"]

#: Exit codes by `Outcome`, keyed by its values (a StrEnum: `EXIT[Outcome.VALID]`
#: is 0) so that the checkers' verdicts are imported only when a command runs.
EXIT: Final = {"valid": 0, "invalid": 1, "unknown": 3}
#: Marks a timeline page as ours: `--html` replaces only a file that has it.
HTML_SIGNATURE: Final = "written by coordsim check"
#: Exit code of a history that could not be read (over several: see `_RANK`).
BAD_INPUT: Final = 2


# Made on first use, as is every import a command needs only to run (below,
# in the commands): `coordsim CMD --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)  # no hard wraps: output is grepped


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _bad_input(msg: str) -> typer.Exit:
    line = " ".join(msg.split())  # one line, whatever a library's message spans
    print(f"coordsim: invalid input: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(BAD_INPUT)


def _failed(error: CoordsimError) -> typer.Exit:
    """An error that is not bad input (a full disk): its one line, its code."""
    print(f"coordsim: error: {' '.join(str(error).split())}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(options.exit_code(error))


def fmt_seconds(s: float) -> str:
    """A checker's time: milliseconds below a second (most checks take a few,
    which `.2f` seconds printed as "0.00s"), seconds above."""
    return f"{s * 1e3:.3g}ms" if s < 1 else f"{s:.2f}s"


def _default_verdict(path: Path) -> tuple[Path | None, str | None]:
    """Where `check PATH` writes verdict.json unasked: inside a trace
    directory, unless that would replace a file that is not coordsim's.
    (None, reason) otherwise; an EDN file gets none, as its directory is often
    a source tree (tests/data/histories). Inside a coordsim output (a run
    directory), `write_verdict` records the file in its marker."""
    if not path.is_dir():
        return None, None
    target = path.absolute() / VERDICT_FILE
    try:
        claim_file(target)
    except InvalidUsage as exc:
        return None, str(exc)
    return target, None


def check(
    path: Annotated[
        Path, typer.Argument(metavar="HISTORY", help="A trace directory, a Jepsen-style EDN history, or any directory holding traces or .edn files below it (a run directory, coordsim-out/latest, a runs root, a folder of histories).")
    ],
    html: Annotated[
        Path | None, typer.Option("--html", metavar="FILE", help="Write a timeline page of the operations here (one trace).")
    ] = None,
    checker: Annotated[
        list[str] | None,
        typer.Option("--checker", metavar="NAME", show_default="all", help=f"Run only these (repeatable; of {', '.join(CHECKERS)}); what the others would judge then counts as not judged."),
    ] = None,
    linear_limit: Annotated[
        float, typer.Option(metavar="SECONDS", help="Time limit in seconds of checker 5 and of the table checker (each).")
    ] = 10.0,
    linear_max_ops: Annotated[
        int, typer.Option(metavar="N", help=f"Above this many operations checker 5 does not run (its operations count as not judged by it); 0 to {MAX_OPS:,}.")
    ] = LINEAR_MAX_OPS,
    as_json: options.Json = False,
    verdict: Annotated[
        Path | None,
        typer.Option("--verdict", metavar="FILE", show_default=f"TRACE/{VERDICT_FILE}", help="Write the verdict here (one trace)."),
    ] = None,
    jobs: options.Jobs = None,
) -> None:
    """Check recorded histories: named anomalies, strict serializability (black-box, and white-box against the system's timestamps), oracle guarantees, per-table linearizability (set and multiset models), and what each covered per table.

    The verdict fails closed: valid (exit 0) only if every operation to judge was judged by some checker, invalid (1) on any anomaly, otherwise unknown (3) with what was not judged and why; 2 on bad input. Writes verdict.json into each trace directory (see sim/history/verdict_file.py) unless that would touch a file that is not coordsim's. HISTORY may hold several histories (a compare run, a folder of EDN files): each is checked (on --jobs worker processes, one per core by default) with a progress line on stderr, then one summary table; the exit code is the worst: 1 if any is invalid, else 2 if one could not be read, else 3 if any is unknown, else 0. With --json and several, stdout is a JSON list with one object per history (its verdict document, or its `error`).

    Examples:
      coordsim check coordsim-out/latest
      coordsim check coordsim-out/latest --json
      coordsim check history.edn --html timeline.html
      coordsim check histories/ --jobs 2 --json
    """
    given = checker or list(CHECKERS)
    for old in sorted(RENAMED_CHECKERS.keys() & set(given)):  # one note per old name, however often given
        options.deprecated(f"--checker {old}", f"--checker {RENAMED_CHECKERS[old]}")
    chosen = [RENAMED_CHECKERS.get(name, name) for name in given]
    bad = sorted(set(chosen) - set(CHECKERS))
    if bad:
        raise _bad_input(f"unknown checker(s) {', '.join(bad)}; choose from {', '.join(CHECKERS)}")
    try:
        check_float("--linear-limit", linear_limit, low=0, high=MAX_DURATION_S, unit="seconds")
        check_int("--linear-max-ops", linear_max_ops, low=0, high=MAX_OPS, unit="operations")
        n_jobs = jobs if jobs is not None else (os.cpu_count() or 1)
        check_int("--jobs", n_jobs, low=1, high=MAX_JOBS, unit="worker processes")
        if path.is_dir():
            found = find_histories(path)
        elif path.is_file():
            found = [path]
        else:
            raise HistoryError(f"{path}: no such trace directory or EDN file")
        if len(found) > 1 and (html is not None or verdict is not None):
            raise InvalidUsage(f"--html and --verdict take one trace; {path} holds {len(found)}")
        if html is not None:
            claim_file(html)  # before checking: refuse early
        if verdict is not None:
            claim_file(verdict)
    except (InvalidUsage, HistoryError) as exc:
        raise _bad_input(str(exc)) from exc
    if len(found) == 1:
        # As given when it is the trace itself, so the report names it as the user did.
        one = path if found[0] == Path(os.path.abspath(path)) or path.is_file() else found[0]
        _check_one(one, chosen, linear_limit, linear_max_ops, html=html, verdict=verdict, as_json=as_json)
    _check_many(found, chosen, linear_limit, linear_max_ops, as_json=as_json, jobs=n_jobs)


def find_histories(path: Path) -> list[Path]:
    """The histories at or below directory `path`, sorted: `path` itself if it
    is a trace directory, else every trace directory (with `meta.json`) and
    every `.edn` file below it. Links to directories are not followed (a runs
    root's `latest` would repeat a run) and hidden entries (a run still being
    written) are passed over.

    Raises:
        HistoryError: `path` holds no history.
    """
    from sim.history.traces import META_FILE

    if (path / META_FILE).is_file():
        return [Path(os.path.abspath(path))]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if META_FILE in files:
            # Not pruned below: compare keeps pass k's trace inside pass 1's
            # (`sim.compare.runner.pass_trace_dir`).
            found.append(Path(os.path.abspath(root)))
        found += [Path(os.path.abspath(root)) / f for f in files if f.endswith(".edn") and not f.startswith(".")]
    if not found:
        raise HistoryError(f"{path}: no trace directory (no {META_FILE}) and no .edn history here or below")
    return sorted(found)


def _read(path: Path) -> tuple[History, list[Event]]:
    from sim.history.import_edn import read_edn
    from sim.history.traces import read_trace

    if path.is_dir():
        trace = read_trace(path)
        return trace.history, list(trace.events)
    return read_edn(path)


def _judge(path: Path, chosen: list[str], linear_limit: float, linear_max_ops: int) -> tuple[History, list[Event], Report]:
    from sim.history.checker.run import check_history

    try:
        h, events = _read(path)
        report = check_history(
            h, events, checkers=chosen, linear_time_limit_s=linear_limit, linear_max_ops=linear_max_ops
        )
    except HistoryError as exc:
        raise _bad_input(str(exc)) from exc
    return h, events, report


def document(report: Report, *, trace: str | None, ops: int) -> dict[str, Any]:
    """The verdict document `check` writes and prints: verdict.json's
    (coverage included)."""
    from sim.history.verdict_file import verdict_document

    return verdict_document(report, trace=trace, ops=ops)


def _write_default(path: Path, doc: dict[str, Any]) -> tuple[Path | None, str | None]:
    """verdict.json into trace `path` by the rule of `_default_verdict`; (None,
    why) if it was not written."""
    from sim.history.verdict_file import write_verdict

    target, not_written = _default_verdict(path)
    if target is not None:
        try:
            write_verdict(target, doc)  # recorded in its output's marker, if in one
        except (OSError, InvalidUsage) as exc:
            return None, f"cannot write it: {exc}"
    return target, not_written


@final
@dataclass(frozen=True)
class Checked:
    """One history of several, as a worker sends it back: small (no
    history, no report), as a directory may hold thousands."""

    path: Path
    ops: int
    seconds: float
    outcome: Outcome | None = None  # None: bad input
    doc: dict[str, Any] | None = None
    names: tuple[str, ...] = ()
    coverage: str = ""
    error: str | None = None

    @property
    def code(self) -> int:
        return BAD_INPUT if self.outcome is None else EXIT[self.outcome]


def check_file(path: Path, chosen: list[str], linear_limit: float, linear_max_ops: int) -> Checked:
    """Reads and checks one history (in a worker process when `--jobs` > 1)."""
    from sim.history.checker.run import check_history

    t0 = time.perf_counter()
    try:
        h, events = _read(path)
        report = check_history(
            h, events, checkers=chosen, linear_time_limit_s=linear_limit, linear_max_ops=linear_max_ops
        )
    except HistoryError as exc:
        return Checked(path, 0, time.perf_counter() - t0, error=" ".join(str(exc).split()))
    doc = document(report, trace=str(path), ops=h.n)
    return Checked(path, h.n, time.perf_counter() - t0, report.outcome, doc, tuple(report.names),
                   report.coverage_summary())


#: How bad a history's exit code is, for the worst of several: invalid, then
#: bad input (no verdict at all), then unknown, then valid.
_RANK: Final = {0: 0, 3: 1, BAD_INPUT: 2, 1: 3}
#: What `check_file` imports, loaded once by the workers' server (`workers`'
#: preload) rather than by each worker: this module imports it lazily.
_WORKER_PRELOAD: Final = (__name__, "sim.history.checker.run", "sim.history.import_edn", "sim.history.traces",
                          "sim.history.verdict_file")


def _check_many(
    found: list[Path], chosen: list[str], linear_limit: float, linear_max_ops: int, *, as_json: bool, jobs: int,
) -> None:
    """Several histories: each checked (on `jobs` worker processes) with a
    progress line on stderr, its verdict.json written into a trace directory;
    then one summary table (or a JSON list, one object per history) and the
    worst exit code."""
    from rich.markup import escape
    from rich.text import Text

    from sim.cli.tables import new_table, plain, print_tables

    results: list[Checked] = []
    unwritten: list[str] = []
    t0 = time.perf_counter()

    def done(c: Checked) -> None:
        results.append(c)
        what = c.error if c.outcome is None else f"{c.outcome.value}, {c.ops:,} operations, {c.coverage}"
        _err().print(f"check: [{len(results)}/{len(found)}] {c.path}: {what} ({fmt_seconds(c.seconds)})", markup=False)
        if c.doc is not None and c.path.is_dir():
            target, why = _write_default(c.path, c.doc)
            if target is None and why is not None:
                unwritten.append(why)

    with workers(min(jobs, len(found)), preload=_WORKER_PRELOAD) as pool:
        if pool is None:
            for f in found:
                done(check_file(f, chosen, linear_limit, linear_max_ops))
        else:
            futures = [pool.submit(check_file, f, chosen, linear_limit, linear_max_ops) for f in found]
            for fut in concurrent.futures.as_completed(futures):
                done(fut.result())
    results.sort(key=lambda c: c.path)
    worst = max((c.code for c in results), key=_RANK.__getitem__)
    if as_json:
        docs = [c.doc if c.doc is not None else {"generator": "coordsim", "valid": None, "error": c.error,
                                                 "trace": str(c.path), "ops": None}
                for c in results]
        sys.stdout.write(json.dumps(docs, indent=2, ensure_ascii=False) + "\n")
        raise typer.Exit(worst)
    table = new_table("history", "operations", "verdict", "anomalies", "coverage", "time",
                      plain=plain(_out()), numeric=("operations", "time"))
    for c in results:
        if c.outcome is None:
            table.add_row(str(c.path), "—", Text("bad input", style="red"), "", c.error or "", fmt_seconds(c.seconds))
            continue
        table.add_row(str(c.path), f"{c.ops:,}", Text(c.outcome.value, style=_COLOR[c.outcome]),
                      ", ".join(c.names) or "none", c.coverage, fmt_seconds(c.seconds))
    print_tables([table], console=_out())
    if unwritten:
        _out().print(f"[dim]{VERDICT_FILE} not written for {len(unwritten)} trace(s): {escape(unwritten[0])}[/dim]")
    counts = {k: sum(1 for c in results if (c.outcome.value if c.outcome else "bad input") == k)
              for k in ("valid", "invalid", "unknown", "bad input")}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    n_jobs = min(jobs, len(found))
    _out().print(f"checked in {time.perf_counter() - t0:.1f} s on {n_jobs} worker{'s' if n_jobs > 1 else ''}")
    word = {0: "valid", 1: "invalid", 3: "unknown", BAD_INPUT: "bad input"}[worst]
    _out().print(f"verdict: [bold]{word}[/bold] ({len(found)} histories: {tally})")
    raise typer.Exit(worst)


#: A verdict's colour by `Outcome` (keyed by its values, as `EXIT`).
_COLOR: Final = {"valid": "green", "invalid": "red", "unknown": "yellow"}


def _check_one(
    path: Path, chosen: list[str], linear_limit: float, linear_max_ops: int, *,
    html: Path | None, verdict: Path | None, as_json: bool,
) -> None:
    from rich.markup import escape
    from rich.text import Text

    from sim.cli.heartbeat import heartbeat
    from sim.cli.tables import new_table, plain, print_tables
    from sim.history.checker.html import timeline_html
    from sim.history.verdict_file import verdict_text, write_verdict

    # A big history takes minutes to read and check: a heartbeat meanwhile.
    with heartbeat(_err(), f"check {path}"):
        h, events, report = _judge(path, chosen, linear_limit, linear_max_ops)
    doc = document(report, trace=str(path), ops=h.n)
    # The page first: bad input (an unwritable --html) must leave nothing behind.
    if html is not None:
        page = f"<!-- {HTML_SIGNATURE} -->\n" + timeline_html(h, report, title=str(path))
        try:
            with options.removed_if_unfinished(html):
                write_owned(html, lambda p: p.write_text(page, encoding="utf-8"))
        except (OSError, InvalidUsage) as exc:
            if isinstance(exc, OSError) and exc.errno in options.DISK_FULL:
                raise _failed(options.write_failed(html, exc)) from exc
            msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _bad_input(f"cannot write {html}: {msg}") from exc
    if verdict is not None:
        target: Path | None = verdict
        not_written = None
        try:
            with options.removed_if_unfinished(verdict):
                write_verdict(verdict, doc)
        except (OSError, InvalidUsage) as exc:  # asked for: failing to write it is the answer
            if isinstance(exc, OSError) and exc.errno in options.DISK_FULL:
                raise _failed(options.write_failed(verdict, exc)) from exc
            msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise _bad_input(f"cannot write {verdict}: {msg}") from exc
    else:
        target, not_written = _write_default(path, doc)
    if as_json:
        sys.stdout.write(verdict_text(doc))
        raise typer.Exit(EXIT[report.outcome])
    _out().print(f"[bold]{escape(str(path))}[/bold]: {h.n} operations, {len(events)} internal events")
    table = new_table("checker", "verdict", "judged", "found", "time", plain=plain(_out()), numeric=("judged", "time"))
    to_judge = report.ops_to_judge
    for v in report.verdicts:
        found = ", ".join([*(f"{n} x{c}" for n, c in v.counts.items()), *([v.reason] if v.reason else [])])
        judged = "—" if v.coverage is None else f"{sum(t.by_checker.get(v.checker, 0) for t in report.coverage):,}/{to_judge:,}"
        if v.skipped:
            table.add_row(v.checker, Text("skipped", style="dim"), judged, found, "—")
            continue
        table.add_row(v.checker, Text(v.outcome.value, style=_COLOR[v.outcome]), judged, found, fmt_seconds(v.seconds))
    print_tables([table, _coverage_table(report)], console=_out())
    for v in report.verdicts:
        for a in v.anomalies:
            ops = ", ".join(str(o) for o in a.ops)
            _out().print(f"\n[bold red]{a.name}[/bold red] [dim]({a.checker}; ops {ops})[/dim]")
            _out().print(escape(a.explanation))
        shown = len(v.anomalies)
        total = sum(v.counts.values())
        if total > shown:
            _out().print(f"[dim]… and {total - shown} more from {v.checker}[/dim]")
    if not report.complete:
        _out().print("\n[bold yellow]not judged[/bold yellow]")
        for line in report.gap_lines():
            _out().print(line, markup=False)
    _out().print(f"\ncoverage: {escape(report.coverage_summary())}")
    _out().print(f"verdict: [bold]{report.outcome.value}[/bold]")
    if html is not None:
        _out().print(f"timeline: {escape(str(html))}")
    if target is None and not_written is not None:
        _out().print(f"[dim]{VERDICT_FILE} not written: {escape(not_written)} (--verdict FILE writes it elsewhere)[/dim]")
    if target is not None:
        wrote(target)
    raise typer.Exit(EXIT[report.outcome])


#: Tables the coverage table lists one by one; past this, those not fully
#: judged (up to this many) and a total of the rest.
SHOWN_TABLES: Final = 20


def _coverage_table(report: Report) -> Table:
    """Per table: operations to judge, judged (and by which checkers), not judged."""
    from rich.text import Text

    from sim.cli.tables import new_table, plain

    table = new_table("coverage per table", "operations", "judged", "not judged", "judged by",
                      plain=plain(_out()), numeric=("operations", "judged", "not judged"))
    rows = list(report.coverage)
    if len(rows) > SHOWN_TABLES:
        rows = [t for t in rows if not t.complete][:SHOWN_TABLES]
    for t in rows:
        missing = t.ops - t.judged
        by = ", ".join(f"{c} {n:,}" for c, n in t.by_checker.items() if n) or "none"
        table.add_row(t.table, f"{t.ops:,}", f"{t.judged:,}",
                      Text(f"{missing:,}", style="yellow" if missing else ""), by)
    shown = {id(t) for t in rows}
    rest = [t for t in report.coverage if id(t) not in shown]
    if rest:
        n, j = sum(t.ops for t in rest), sum(t.judged for t in rest)
        what = f"{len(rest):,} {'more ' if rows else ''}tables{' (all fully judged)' if n == j else ''}"
        table.add_row(what, f"{n:,}", f"{j:,}", f"{n - j:,}", "")
    if report.not_tables:
        table.add_row("(views, indexes, clusters)", f"{report.not_tables:,}", "", "", "not tables: not judged")
    return table


def register(app: typer.Typer) -> None:
    """Adds `check` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("check")(check)
