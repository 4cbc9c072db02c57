"""`coordsim validate`: run the published facts (`sim/model/facts.toml`) against the
model and print `fact | published | band | simulated | holds`, calibration
facts and validation facts in separate tables.

Exit codes: 0 every fact held, 1 one did not (a finding about the model),
2 bad input. The tables, each fact's source, band reason and the measurements
behind each value go to `validate.md`, `validate.csv` and `validate.json` in
the output directory; `--json` prints the JSON document instead of the tables.
"""

from __future__ import annotations

import csv
import functools
import json
import sys
import time
from pathlib import Path  # noqa: TC003 - typer reads the annotations at run time
from typing import TYPE_CHECKING, Annotated

import typer

from sim.cli import options
from sim.cli.options import print_json, wrote
from sim.load.limits import read_text_file
from sim.model.facts import FACTS
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write
from sim.runtime.run_dirs import run_dir
from sim.runtime.staging import staged_dir

if TYPE_CHECKING:
    from rich.console import Console

    from sim.model.validate import Outcome

__all__ = ["register", "validate"]


# Made on first use, as is every import a command needs only to run (below,
# in the commands): `coordsim CMD --help` loads none of them (issue 37).
@functools.cache
def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def validate(
    output: options.Output = None,
    quick: Annotated[bool, typer.Option("--quick", help="Only the fast subset (the facts marked quick).")] = False,
    only: Annotated[
        str | None, typer.Option("--only", metavar="IDS", help="Comma-separated fact ids to run (see the facts file).")
    ] = None,
    facts: Annotated[Path, typer.Option("--facts", metavar="FILE", help="The facts file.")] = FACTS,
    as_json: options.Json = False,
    progress: options.Progress = None,
) -> None:
    """Hold the model to published facts about the seeds' system (virtual mode, fixed seeds, the shipped calibrated profile); exit 1 if one does not hold.

    Prints `fact | published | band | simulated | holds`, the calibration facts (constants were set from them) apart from the validation facts (nothing was); writes validate.md, validate.csv and validate.json and prints the directory last.

    Examples:
      coordsim validate --quick   # exit 1: six quick validation facts do not hold (README)
      coordsim validate --only loop-messages-per-select -o validate-out
    """
    from sim.cli.heartbeat import heartbeat
    from sim.cli.tables import new_table, plain, print_tables
    from sim.load.limits import MAX_DURATION_S, check_float
    from sim.model.validate import ROLES, band_text, load_facts, number_text, run_fact, table_lines

    if progress is not None:
        check_float("--progress", progress, low=0, high=MAX_DURATION_S, unit="seconds", strict_low=True)

    # Binary, not UTF-8, endless (/dev/zero) or unreadable: one line, before parsing.
    read_text_file(facts, "facts file")
    chosen = load_facts(facts)
    if only is not None:
        wanted = [x.strip() for x in only.split(",") if x.strip()]
        unknown = sorted(set(wanted) - {f.id for f in chosen})
        if unknown:
            raise InvalidUsage(f"unknown fact id(s) {', '.join(unknown)}; known: {', '.join(f.id for f in chosen)}")
        chosen = [f for f in chosen if f.id in wanted]
    if quick:
        chosen = [f for f in chosen if f.quick]
    outcomes: list[Outcome] = []
    measured: dict[str, tuple[dict[str, float], str]] = {}  # experiments shared by facts: run once
    wall0 = time.perf_counter()
    out = run_dir(output, "validate").absolute()
    with options.disk_full_is_external(out), staged_dir(out, "validate") as stage:
        for i, fact in enumerate(chosen, start=1):
            t0 = time.perf_counter()
            # A fact may take minutes (a sweep of its own): which one runs, and for how long.
            with heartbeat(_err(), f"validate: [{i}/{len(chosen)}] {fact.id}", every=progress):
                o = run_fact(fact, measured)
            outcomes.append(o)
            print(f"[{i}/{len(chosen)}] {fact.id}: {number_text(o.value)} ({'holds' if o.holds else 'DOES NOT HOLD'}, "  # noqa: T201
                  f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
        lines = table_lines(outcomes)
        details = ["", "## Each fact: source, band, mechanism, measurements", ""]
        for o in outcomes:
            details += [f"- **{o.fact.id}** ({o.fact.role}; {'holds' if o.holds else 'does not hold'}): "
                        f"{o.fact.claim}.", f"  Source: {o.fact.source}.",
                        f"  Band: {band_text(o.fact)} ({o.fact.band_reason}).",
                        f"  Mechanism (model): {o.fact.mechanism}.", f"  Measured: {o.detail}."]
        head = ["# coordsim validate", "",
                f"{len(outcomes)} facts, virtual mode, fixed seeds, the shipped profile; "
                f"{time.perf_counter() - wall0:.0f} s of wall time. Calibration facts set a model constant and "
                "only show the calibration took; validation facts set nothing and test the model.", ""]
        atomic_write(stage / "validate.md", lambda p: p.write_text("\n".join(head + lines + details) + "\n"))

        def write_csv(p: Path) -> None:
            with p.open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["id", "role", "claim", "published", "metric", "lo", "hi", "simulated", "holds", "source",
                            "band_reason", "measured"])
                for o in outcomes:
                    w.writerow([o.fact.id, o.fact.role, o.fact.claim, o.fact.published, o.fact.metric,
                                f"{o.fact.between[0]:g}", f"{o.fact.between[1]:g}", f"{o.value:.6g}", o.holds,
                                o.fact.source, o.fact.band_reason, o.detail])

        atomic_write(stage / "validate.csv", write_csv)
        doc = _document(outcomes, out)
        atomic_write(stage / "validate.json",
                     lambda p: p.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"))
    failed = [o.fact.id for o in outcomes if not o.holds]
    if as_json:
        print_json(doc)
    else:
        tables = []
        for role in ROLES:
            group = [o for o in outcomes if o.fact.role == role]
            if not group:
                continue
            table = new_table(f"{role} fact", "published", "band", "simulated", "holds", plain=plain(_out()),
                              numeric=("simulated",))
            for o in group:
                table.add_row(f"{o.fact.id}: {o.fact.claim}", o.fact.published, band_text(o.fact), number_text(o.value),
                              "yes" if o.holds else "NO")
            tables.append(table)
        print_tables(tables, console=_out())
        for role in ROLES:
            group = [o for o in outcomes if o.fact.role == role]
            bad = [o.fact.id for o in group if not o.holds]
            if group:
                _out().print(f"{role}: {len(group) - len(bad)} of {len(group)} facts hold"
                             + (f"; not: {', '.join(bad)}" if bad else ""), markup=False)
    if failed:
        if not as_json:
            _out().print(f"{len(failed)} of {len(outcomes)} facts do not hold: {', '.join(failed)} "
                         f"(details in {out}/validate.md)", markup=False)
            wrote(out)
        raise typer.Exit(1)
    if not as_json:
        _out().print(f"all {len(outcomes)} facts hold (details in {out}/validate.md)", markup=False)
        wrote(out)


def _document(outcomes: list[Outcome], out: Path) -> dict[str, object]:
    """validate.json: the outcomes grouped by role, each with its band and source."""
    from sim.model.validate import ROLES

    def one(o: Outcome) -> dict[str, object]:
        value = o.value if o.value == o.value else None  # NaN is not JSON
        return {"id": o.fact.id, "claim": o.fact.claim, "published": o.fact.published, "metric": o.fact.metric,
                "between": list(o.fact.between), "band_reason": o.fact.band_reason, "simulated": value,
                "holds": o.holds, "source": o.fact.source, "mechanism": o.fact.mechanism, "measured": o.detail}

    groups = {role: [one(o) for o in outcomes if o.fact.role == role] for role in ROLES}
    return {
        "path": str(out),
        "ok": all(o.holds for o in outcomes),
        **groups,
        "summary": {role: {"facts": len(g), "hold": sum(1 for x in g if x["holds"])} for role, g in groups.items()},
    }


def register(app: typer.Typer) -> None:
    """Adds `validate` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("validate")(validate)
