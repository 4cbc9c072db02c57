"""`coordsim compare`, `coordsim run`, `coordsim calibrate` and `coordsim config
show`: the architecture comparison users run (DESIGN.md §1).

Outputs go to a staging directory beside the output directory and are renamed
into place only when complete, so an interrupted or failed run leaves nothing
half-written under the output name.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from persist.location import CoordsimError, InvalidUsage
from sim.config import Config
from sim.outputs import atomic_write, claim_file, staged_dir
from sim.report import (
    compare_baseline,
    plot,
    read_results,
    summary,
    tables,
    write_csv,
    write_markdown,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sim.runner import LevelRow

__all__ = ["register"]

_out = Console()
_err = Console(stderr=True)

config_app = typer.Typer(help="The run configuration of `coordsim compare`.")


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the `coordsim` app."""
    app.command("compare")(compare)
    app.command("run")(run_scenario)
    app.command("calibrate")(calibrate)
    app.add_typer(config_app, name="config")


# --- shared options -------------------------------------------------------------------

ConfigFile = Annotated[Path | None, typer.Option("--config-file", "-c", help="TOML file of `Config` keys.")]
ModeOpt = Annotated[str | None, typer.Option("--mode", help="real (default; embedded Postgres unless COORDSIM_POSTGRES_URL) or virtual.")]
ConfigsOpt = Annotated[str | None, typer.Option("--configs", help="Comma-separated configurations.")]
WorkloadsOpt = Annotated[str | None, typer.Option("--workloads", "-w", help="Comma-separated workloads.")]
ConcOpt = Annotated[str | None, typer.Option("--concurrency", help="Comma-separated client counts, e.g. 1,4,16.")]
OpsOpt = Annotated[int | None, typer.Option("--ops", help="Operations at concurrency 1 (scaled with sqrt(clients)).")]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Open loop: Poisson arrivals per second (latency from intended start).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed (every configuration gets the same).")]
OutOpt = Annotated[str | None, typer.Option("--output", "-o", help="Output directory.")]
ProfileOpt = Annotated[str | None, typer.Option("--latency-profile", help="Latency profile TOML/JSON (virtual mode).")]


def build_config(
    config_file: Path | None = None, **flags: Any
) -> Config:
    """The effective `Config`: defaults, then the TOML file, then flags."""
    cfg = Config.from_toml(config_file) if config_file is not None else Config()
    cfg = cfg.with_overrides(**flags)
    cfg.latency()  # a bad profile fails now, before anything starts
    return cfg


@config_app.command("show")
def config_show(
    config_file: ConfigFile = None,
    mode: ModeOpt = None,
    configs: ConfigsOpt = None,
    workloads: WorkloadsOpt = None,
    concurrency: ConcOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
) -> None:
    """Print the effective configuration (defaults < --config-file < flags) as TOML."""
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
    )
    sys.stdout.write(cfg.to_toml(redact=True))


# --- Postgres for real mode -----------------------------------------------------------


@contextlib.contextmanager
def postgres_for(cfg: Config, *, fsync: bool = True) -> Iterator[Config]:
    """Real mode: checks the configured Postgres answers, or starts an embedded
    one for the duration — with fsync on by default, because the oracle and the
    stash being compared are durable stores (CockroachDB in the seeds), and a
    commit's fsync is exactly the round trip the update path pays serially;
    virtual mode: nothing."""
    if cfg.mode != "real":
        yield cfg
        return
    from sim.backends import EmbeddedPostgres

    url = cfg.effective_postgres_url()
    if url is not None:
        _check_reachable(url)
        yield cfg.with_overrides(postgres_url=url)
        return
    pg = EmbeddedPostgres(fsync=fsync).start()
    try:
        yield cfg.with_overrides(postgres_url=pg.url)
    finally:
        pg.stop()


def _check_reachable(url: str) -> None:
    import asyncpg

    from persist.urls import redact_text, redact_url
    from sim.runtime import Runtime, run

    async def probe(rt: Runtime) -> None:
        conn = await asyncpg.connect(url, timeout=5)
        await conn.close()

    try:
        run(probe, virtual=False)
    except Exception as exc:
        raise CoordsimError(
            f"cannot reach Postgres at {redact_url(url)} (COORDSIM_POSTGRES_URL): "
            + redact_text(f"{type(exc).__name__}: {exc}")
        ) from exc


# --- compare --------------------------------------------------------------------------


def compare(
    config_file: ConfigFile = None,
    mode: ModeOpt = None,
    configs: ConfigsOpt = None,
    workloads: WorkloadsOpt = None,
    concurrency: ConcOpt = None,
    ops: OpsOpt = None,
    rate: RateOpt = None,
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
    warmup: Annotated[int | None, typer.Option("--warmup", help="Warm-up operations before the sweep.")] = None,
    tables_: Annotated[int | None, typer.Option("--tables", help="Tables in the schema.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A short sweep (1,4,16,64 clients, few ops).")] = False,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="A previous output directory: flag >20% throughput drops (exit 1).")] = None,
) -> None:
    """Run workloads under each configuration with the same seed; print tables,
    write plots, report.md, results.csv and the traces to the output directory."""
    cfg = build_config(
        config_file, mode=mode, configurations=configs, workloads=workloads, concurrency=concurrency,
        ops_per_level=ops, open_loop_rate=rate, seed=seed, output=output, latency_profile=latency_profile,
        warmup_ops=warmup, tables=tables_,
    )
    if quick:
        cfg = cfg.with_overrides(
            concurrency=concurrency or [1, 4, 16, 64], ops_per_level=ops or 4, warmup_ops=warmup or 8
        )
    base_rows = read_results(baseline) if baseline is not None else None
    wall0 = time.perf_counter()
    with staged_dir(Path(cfg.output), "compare") as stage, postgres_for(cfg) as cfg:
        rows = _sweep(cfg, stage)
        regressions = compare_baseline(rows, base_rows) if base_rows is not None else []
        plots = plot(stage, rows)
        write_csv(stage / "results.csv", rows)
        (stage / "config.toml").write_text(_redacted(cfg).to_toml())
        header = (
            f"mode `{cfg.mode}`, seed {cfg.seed}, configurations {', '.join(cfg.configurations)}; "
            + (
                f"open loop at {cfg.open_loop_rate:g} ops/s (Poisson; latency from intended start; "
                "clients = connection pool); "
                if cfg.open_loop_rate
                else "closed loop; "
            )
            + f"wall time {time.perf_counter() - wall0:.0f} s. Columns: throughput = ops / elapsed; "
            "latencies from HdrHistograms; oracle q/op = backing oracle queries per operation; "
            "loop busy = modeled coordinator CPU / (elapsed x cores)."
        )
        write_markdown(stage / "report.md", rows, plots, header=header, regressions=regressions)
    for t in tables(rows):
        _out.print(t)
    _out.print("[bold]peak throughput / p50 at most clients[/bold]")
    for wl, c, peak, p50 in summary(rows):
        _out.print(f"  {wl:20} {c:22} {peak:10,.0f} ops/s  {p50:9.2f} ms")
    _out.print(f"wrote {Path(cfg.output).absolute()}/report.md ({time.perf_counter() - wall0:.0f} s)")
    if regressions:
        _out.print("[bold red]regressions against the baseline (> 20 % slower):[/bold red]")
        for line in regressions:
            _out.print(f"  {line}")
        raise typer.Exit(1)


def _redacted(cfg: Config) -> Config:
    return cfg.redacted()


def _sweep(cfg: Config, stage: Path) -> list[LevelRow]:
    from sim.runner import run_pair

    rows: list[LevelRow] = []
    total = len(cfg.workloads) * len(cfg.configurations) * len(cfg.concurrency)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_err, transient=True,
    ) as progress:
        task = progress.add_task("compare", total=total)
        for wl in cfg.workloads:
            for name in cfg.configurations:
                progress.update(task, description=f"{wl} / {name}")

                def on_level(row: LevelRow) -> None:
                    progress.advance(task)

                out = run_pair(cfg, name, wl, stage / "traces" / wl / name, on_level=on_level)
                rows.extend(out.rows)
    return rows


# --- run ------------------------------------------------------------------------------


def run_scenario(
    scenario: Annotated[str, typer.Argument(help="Shipped scenario name, workload name, or a .py/.toml path.")],
    config: Annotated[str, typer.Option("--config", help="Coordinator configuration.")] = "decoupled",
    mode: Annotated[str, typer.Option("--mode", help="virtual (default) or real.")] = "virtual",
    seed: SeedOpt = None,
    output: OutOpt = None,
    latency_profile: ProfileOpt = None,
) -> None:
    """Run one scenario under one configuration; write its trace (and, for a
    Python scenario, the checker's verdicts)."""
    from sim.scenarios import PythonScenario, load

    sc = load(scenario)
    cfg = build_config(
        None, mode=mode, configurations=[config], seed=seed, latency_profile=latency_profile,
        output=output or f"coordsim-run-{sc.name}",
    )
    if isinstance(sc, PythonScenario):
        with staged_dir(Path(cfg.output), "run") as stage, postgres_for(cfg) as cfg:
            verdict = _run_python(cfg, config, sc, stage)
        _out.print(verdict, markup=False, highlight=False)
        if verdict.rstrip().endswith("FAIL"):
            raise typer.Exit(1)
        return
    cfg = cfg.with_overrides(**sc.params).with_overrides(workloads=[sc.workload], configurations=[config])
    with staged_dir(Path(cfg.output), "run") as stage, postgres_for(cfg) as cfg:
        rows = _sweep(cfg, stage)
        write_csv(stage / "results.csv", rows)
    for t in tables(rows):
        _out.print(t)


def _run_python(cfg: Config, config_name: str, sc: Any, stage: Path) -> str:
    from sim.checker import check_history
    from sim.history import HistoryRecorder
    from sim.runner import environment
    from sim.runtime import Runtime, run
    from sim.scenarios import Sim, scenario_error
    from sim.traces import write_trace

    holder: dict[str, Any] = {}

    async def main(rt: Runtime) -> None:
        recorder = HistoryRecorder(rt.now)
        async with environment(cfg, rt) as env:
            sim = Sim(rt, env, cfg.coordinator(config_name), recorder)
            holder["sim"] = sim
            await sim.start()
            try:
                await sc.main(sim)
            except Exception as exc:  # the scenario's own bug: one line, below
                holder["error"] = exc
            finally:
                await sim.stop()

    run(main, seed=cfg.seed, virtual=cfg.mode == "virtual", latency=cfg.latency())
    sim: Sim = holder["sim"]
    history, events = sim.recorder.history(), sim.recorder.events()
    error: Exception | None = holder.get("error")
    if error is not None:
        # Report the scenario's error as one line (exit 2) and keep what it
        # recorded until then. The stage is discarded when this raises, so the
        # partial trace goes out through a staging of its own; the stage is
        # still empty here, and removing it frees its name for that one.
        failure = scenario_error(Path(getattr(sc, "path", None) or sc.name), error)
        note = ""
        try:
            with contextlib.suppress(OSError):
                stage.rmdir()
            with staged_dir(Path(cfg.output), "run") as partial:
                write_trace(partial / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
                (partial / "verdict.txt").write_text(f"{failure}\nFAIL\n")
            n = len(history)
            note = f" (trace of the {n} operation{'' if n == 1 else 's'} before it: {Path(cfg.output) / 'trace'})"
        except (CoordsimError, OSError) as exc:
            note = f" (trace not written: {' '.join(str(exc).split())})"
        raise CoordsimError(f"{failure}{note}") from error
    write_trace(stage / "trace", history, events, run=sc.name, config=config_name, seed=cfg.seed)
    report = check_history(history, events)
    lines = [f"{sc.name} under {config_name} ({cfg.mode}, seed {cfg.seed}): {len(history)} operations"]
    for v in report.verdicts:
        counts = ", ".join(f"{n} x{c}" for n, c in v.counts.items())
        state = "skipped" if v.skipped else v.outcome.value
        lines.append(f"  {v.checker:<9} {state}{' - ' + counts if counts else ''}")
        lines.extend(f"    {a.name}: ops {', '.join(str(o) for o in a.ops)}: {a.explanation}" for a in v.anomalies)
    lines.append(f"checker verdict: {report.outcome.value}")
    lines.extend(f"expectation failed: {f}" for f in sim.failures)
    if sim.failures or report.outcome.value == "invalid":
        lines.append("FAIL")
    text = "\n".join(lines) + "\n"
    (stage / "verdict.txt").write_text(text)
    return text


# --- calibrate ------------------------------------------------------------------------


def calibrate(
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile file to write (.toml or .json).")] = Path(
        "latency-profile.toml"
    ),
    samples: Annotated[int, typer.Option("--samples", help="Round trips measured per operation.")] = 200,
    s3: Annotated[str | None, typer.Option("--s3", help="Measure Blob on this s3:// URL (default: files).")] = None,
    fsync: Annotated[bool, typer.Option(help="Embedded Postgres with fsync on (durable, as the oracle is).")] = True,
) -> None:
    """Measure oracle, stash and consensus round trips against the configured
    Postgres (embedded unless COORDSIM_POSTGRES_URL) and write a latency profile
    for `--mode virtual`."""
    from sim.calibrate import calibrate_profile, check_samples, render_profile

    check_samples(samples)
    if output.suffix not in (".toml", ".json"):
        raise InvalidUsage(f"{output}: a profile is a .toml or .json file")
    claim_file(output, "coordsim calibrate")  # before measuring: refuse early
    with postgres_for(Config(mode="real"), fsync=fsync) as cfg:
        assert cfg.postgres_url is not None
        measured = calibrate_profile(cfg.postgres_url, samples=samples, s3_url=s3)
    text = render_profile(measured, json_format=output.suffix == ".json")
    try:
        claim_file(output, "coordsim calibrate")
        atomic_write(output, lambda p: p.write_text(text))
    except OSError as exc:
        raise InvalidUsage(f"cannot write {output}: {exc.strerror or exc}") from exc
    for name, (median_ms, sigma, n) in sorted(measured.items()):
        _out.print(f"  {name:24} median {median_ms:7.3f} ms  sigma {sigma:.2f}  ({n} samples)")
    _out.print(f"wrote {output}")
