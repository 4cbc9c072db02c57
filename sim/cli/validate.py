"""`coordsim validate`: run the published facts (`sim/model/facts.toml`) against the
model and print `fact | published | simulated | holds`.

Exit codes: 0 every fact held, 1 one did not (a finding about the model),
2 bad input. The table, each fact's source and the measurements behind each
value go to `validate.md` and `validate.csv` in the output directory.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path  # noqa: TC003 - typer reads the annotations at run time
from typing import Annotated

import typer
from rich.console import Console

from sim.cli import options  # noqa: TC001 - typer reads the annotations at run time
from sim.cli.options import wrote
from sim.cli.tables import new_table, plain, print_tables
from sim.model.validate import FACTS, Outcome, load_facts, run_fact, table_lines
from sim.runtime.errors import InvalidUsage
from sim.runtime.outputs import atomic_write, run_dir, staged_dir

__all__ = ["register", "validate"]

_out = Console(highlight=False, soft_wrap=True)


def validate(
    output: options.Output = None,
    quick: Annotated[bool, typer.Option("--quick", help="Only the fast subset (the facts marked quick).")] = False,
    only: Annotated[
        str | None, typer.Option("--only", metavar="IDS", help="Comma-separated fact ids to run (see the facts file).")
    ] = None,
    facts: Annotated[Path, typer.Option("--facts", metavar="FILE", help="The facts file.")] = FACTS,
) -> None:
    """Hold the model to published facts about the seeds' system (virtual mode, fixed seeds, the shipped calibrated profile); exit 1 if one does not hold.

    Prints `fact | published | simulated | holds`; writes validate.md and validate.csv and prints the directory last.

    Examples:
      coordsim validate --quick
      coordsim validate --only oracle-batching -o validate-out
    """
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
    wall0 = time.perf_counter()
    out = run_dir(output, "validate").absolute()
    with staged_dir(out, "validate") as stage:
        for i, fact in enumerate(chosen, start=1):
            t0 = time.perf_counter()
            o = run_fact(fact)
            outcomes.append(o)
            print(f"[{i}/{len(chosen)}] {fact.id}: {o.value:,.3g} ({'holds' if o.holds else 'DOES NOT HOLD'}, "  # noqa: T201
                  f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)  # fmt: skip
        lines = table_lines(outcomes)
        details = ["", "## Each fact: source, mechanism, measurements", ""]
        for o in outcomes:
            details += [f"- **{o.fact.id}** ({'holds' if o.holds else 'does not hold'}): {o.fact.claim}.",
                        f"  Source: {o.fact.source}.", f"  Mechanism (model): {o.fact.mechanism}.",
                        f"  Measured: {o.detail}."]  # fmt: skip
        head = ["# coordsim validate", "",
                f"{len(outcomes)} facts, virtual mode, fixed seeds, the shipped profile; "
                f"{time.perf_counter() - wall0:.0f} s of wall time.", ""]  # fmt: skip
        atomic_write(stage / "validate.md", lambda p: p.write_text("\n".join(head + lines + details) + "\n"))

        def write_csv(p: Path) -> None:
            with p.open("w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["id", "claim", "published", "metric", "simulated", "holds", "source", "measured"])
                for o in outcomes:
                    w.writerow([o.fact.id, o.fact.claim, o.fact.published, o.fact.metric, f"{o.value:.6g}",
                                o.holds, o.fact.source, o.detail])  # fmt: skip

        atomic_write(stage / "validate.csv", write_csv)
    table = new_table("fact", "published", "simulated", "holds", plain=plain(_out), numeric=("simulated",))
    for o in outcomes:
        table.add_row(f"{o.fact.id}: {o.fact.claim}", o.fact.published, f"{o.value:,.3g}", "yes" if o.holds else "NO")
    print_tables([table], console=_out)
    failed = [o.fact.id for o in outcomes if not o.holds]
    if failed:
        _out.print(f"{len(failed)} of {len(outcomes)} facts do not hold: {', '.join(failed)} "
                   f"(details in {out}/validate.md)", markup=False)  # fmt: skip
        wrote(out)
        raise typer.Exit(1)
    _out.print(f"all {len(outcomes)} facts hold (details in {out}/validate.md)", markup=False)
    wrote(out)


def register(app: typer.Typer) -> None:
    """Adds `validate` to the `coordsim` app (sim/cli/main.py calls this)."""
    app.command("validate")(validate)
