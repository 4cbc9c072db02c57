"""`coordsim export PATH --format edn|porcupine|csv|hgrm [-o PATH]`: a recorded
history in the formats established checkers read (Jepsen/Elle EDN, Porcupine
JSON) or a spreadsheet does (CSV).

It never replaces a file coordsim did not write: a file it wrote is recorded
with its size and SHA-256 (`sim.runtime.owned_files.write_owned`) and replaced
only while it still matches, whatever its format; `EDN_SIGNATURE` on an EDN
file's first line tells a reader where it came from and proves nothing.
Several traces under TRACE go into a directory, claimed by the rule of every
coordsim output.
"""

from __future__ import annotations

import csv
import enum
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from sim.cli.options import DISK_FULL, removed_if_unfinished, write_failed, wrote
from sim.history.model import KINDS, NONE, STATUSES, History, HistoryError
from sim.runtime.errors import InvalidUsage
from sim.runtime.owned_files import claim_file, write_owned
from sim.runtime.run_dirs import run_dir
from sim.runtime.staging import staged_dir

if TYPE_CHECKING:
    from sim.history.model import Event

__all__ = ["CSV_COLUMNS", "EDN_SIGNATURE", "Format", "export", "register"]

#: The first line of an EDN file `export` wrote (an EDN comment), for readers.
EDN_SIGNATURE: Final = "; written by coordsim export"
CSV_COLUMNS: Final = (
    "op_id", "process", "client", "kind", "object", "elements", "args", "invoke_ns", "complete_ns",
    "status", "error_code", "error", "result", "count", "read_ts", "write_ts", "catalog_ts",
)


class Format(enum.StrEnum):
    edn = "edn"
    porcupine = "porcupine"
    csv = "csv"
    hgrm = "hgrm"


_EXTENSION: Final = {Format.edn: "edn", Format.porcupine: "json", Format.csv: "csv"}


def _bad_input(msg: str) -> typer.Exit:
    line = " ".join(msg.split())  # one line, whatever a library's message spans
    print(f"coordsim: invalid input: {line}", file=sys.stderr)  # noqa: T201 - the CLI's error channel
    return typer.Exit(2)


def _int_or_empty(v: int) -> str:
    return "" if v == NONE else str(v)


def _csv_write(h: History, path: Path) -> None:
    """One row per operation; lists as space-separated integers, absent values empty."""
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for i in range(h.n):
            res = h.result(i)
            w.writerow((
                h.op_id[i], h.process[i], h.client[i] or "", KINDS[h.kind[i]].value, h.name(i) or "",
                " ".join(map(str, h.elements(i))), h.args[i] or "", h.invoke[i], _int_or_empty(h.complete[i]),
                STATUSES[h.status[i]].value, h.error_code[i] or "", h.error[i] or "",
                "" if res is None else " ".join(map(str, res)), _int_or_empty(h.count[i]),
                _int_or_empty(h.read_ts[i]), _int_or_empty(h.write_ts[i]), _int_or_empty(h.catalog_ts[i]),
            ))


def _write(h: History, events: list[Event], fmt: Format, path: Path, source: str) -> None:
    from sim.history.export import history_to_porcupine, write_edn

    if fmt is Format.csv:
        write_owned(path, lambda p: _csv_write(h, p))
        return
    if fmt is Format.edn:
        head = f"{EDN_SIGNATURE} from {' '.join(source.split())}\n"

        def write(p: Path) -> None:
            # Streamed, line batch by line batch: a 1M-operation history's text is ~260 MB.
            with p.open("w", encoding="utf-8") as f:
                f.write(head)
                write_edn(h, f, events)

        write_owned(path, write)
        return
    text = history_to_porcupine(h)  # client operations only: Porcupine models no internal events
    write_owned(path, lambda p: p.write_text(text, encoding="utf-8"))


def _claim(path: Path, fmt: Format) -> None:
    """Refuses `path` unless writing it loses nothing (see the module docstring)."""
    del fmt  # every format alike: ownership is recorded, not read from the content
    claim_file(path)


def _read(path: Path) -> tuple[History, list[Event]]:
    from sim.history.import_edn import read_edn
    from sim.history.traces import read_trace

    if path.is_file():
        return read_edn(path)
    trace = read_trace(path, lean=True)
    return trace.history, trace.events


def export(
    trace: Annotated[
        Path,
        typer.Argument(
            metavar="HISTORY",
            help="A trace directory, any directory holding traces below it (a run directory, coordsim-out/latest), or an EDN history.",
        ),
    ],
    fmt: Annotated[
        Format,
        typer.Option("--format", "-f", help="edn (Jepsen/Elle), porcupine (JSON), csv (one row per operation), or hgrm (a compare or run output's latency histograms)."),
    ] = Format.edn,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="FILE|DIR", show_default="see the help",
            help="File to write, or a directory when HISTORY holds several traces (default: one trace: its name with "
            "the format's extension, in the working directory; several: a new run directory).",
        ),
    ] = None,
) -> None:
    """Export recorded histories for established checkers and tools; prints every file written, and the directory (or file) last.

    EDN for Jepsen/Elle/Knossos (internal events as `:coordsim` events, so `coordsim check` on the file gives the trace's verdict), Porcupine JSON, or CSV. --format hgrm: the HdrHistogram percentile distributions (.hgrm, as wrk2 prints them) that compare and run write under hgrm/, copied to -o DIR, or listed without -o.

    Examples:
      coordsim export coordsim-out/latest --format porcupine -o history.json
      coordsim export coordsim-out/latest -f edn
      coordsim export coordsim-out/latest-compare -f hgrm -o latency
    """
    from rich.console import Console

    from sim.cli.heartbeat import heartbeat
    from sim.spark.frames import expand_traces

    # Reading and converting big histories takes a while: a heartbeat on stderr (stdout lists the files).
    with heartbeat(Console(stderr=True, highlight=False, soft_wrap=True), f"export {trace} as {fmt.value}"):
        try:
            if not trace.exists():
                raise HistoryError(f"{trace}: no such trace directory or EDN file")
            if fmt is Format.hgrm:
                _export_hgrm(trace, output)
                return
            found = [Path(t) for t in expand_traces([str(trace)])] if trace.is_dir() else [trace]
            ext = _EXTENSION[fmt]
            # A link (coordsim-out/latest) is named after what it points at.
            name = trace.resolve().name if trace.is_dir() else trace.stem
            if len(found) == 1:
                target = output if output is not None else Path(f"{name}.{ext}")
                if target.is_dir():
                    target = target / f"{name}.{ext}"
                _claim(target, fmt)  # before reading: refuse early
                h, events = _read(found[0])
                with removed_if_unfinished(target):
                    _write(h, events, fmt, target, str(found[0]))
                wrote(target)
                return
            out_dir = run_dir(output, "export")
            root = Path(os.path.abspath(trace))  # as `expand_traces` names them (`..` resolved)
            written = []
            with staged_dir(out_dir, "export") as stage:
                for t in found:
                    rel = t.relative_to(root)
                    h, events = _read(t)
                    (stage / rel.parent).mkdir(parents=True, exist_ok=True)
                    _write(h, events, fmt, stage / rel.parent / f"{rel.name}.{ext}", str(t))
                    written.append(out_dir / rel.parent / f"{rel.name}.{ext}")
        except (HistoryError, InvalidUsage) as exc:
            raise _bad_input(str(exc)) from exc
        except OSError as exc:
            what = output or "the export"
            if exc.errno in DISK_FULL:  # an external failure, not bad input: exit 1
                print(f"coordsim: error: {write_failed(what, exc)}", file=sys.stderr)  # noqa: T201
                raise typer.Exit(1) from exc
            raise _bad_input(f"cannot write {what}: {exc.strerror or exc}") from exc
    for p in written:
        print(p)  # noqa: T201 - the paths are the output; plain, so scripts can read them
    wrote(out_dir)


def _export_hgrm(run: Path, output: Path | None) -> None:
    """The `.hgrm` files under `run` (a compare or run output): listed, or
    copied to the directory `output` (keeping their hgrm/… layout)."""
    files = sorted(p for p in run.rglob("*.hgrm") if p.is_file()) if run.is_dir() else []
    if not files:
        raise InvalidUsage(f"{run}: no .hgrm files here or below (compare and run write them under hgrm/)")
    if output is None:
        for p in files:
            print(p)  # noqa: T201
        return
    with staged_dir(output, "export") as stage:
        for p in files:
            rel = p.relative_to(run)
            (stage / rel.parent).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, stage / rel)
    for p in files:
        print(output / p.relative_to(run))  # noqa: T201
    wrote(output)


def register(app: typer.Typer) -> None:
    """Adds `export` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("export")(export)
