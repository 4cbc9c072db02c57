"""`coordsim calibrate --from RUN_DIR`: a latency profile built from what a real
`coordsim compare` run recorded — each backend's round trips per cell
(`summary.json` `cells[].backend`) and the Python CPU each coordinator handler
spent (`cells[].handler_cpu`) — so that `coordsim compare --latency-profile`
in virtual mode can predict that very run (issue 35, "one profile, two
predictions").

The profile describes THIS host's Python coordinator on this Postgres, not the
published system: its `[costs."<configuration>"]` are the run's modeled costs
(which real mode sleeps on its modeled cores) plus the Python CPU measured per
handler, and `[meta] describes` says so. Every latency names the run, the
cells and the samples it was fitted from; what the run did not record (Blob,
the replica, the catalog feed, the frontend) is carried from a base profile
and says that too.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, final

from coordinator.config import Costs
from sim.runtime.errors import CoordsimError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = [
    "DESCRIBES",
    "FROM_KINDS",
    "RunProfile",
    "costs_from_handlers",
    "interpreter_from_cells",
    "profile_from_run",
    "read_real_run",
    "render_run_profile",
]

#: What a profile built from a run is a profile of (in its `[meta]`).
DESCRIBES: Final = (
    "this host's Python coordinator (coordsim real mode) on this host's Postgres, NOT the published "
    "system: use it to predict real-mode runs here, never to judge the published facts"
)

#: Profile latency name -> the recorded backend kinds it is fitted from (a
#: `<prefix>*` group where the model draws one latency for every transaction
#: of a store: `stash.txn` for each timestamp-store transaction, and so on).
FROM_KINDS: Final[Mapping[str, tuple[str, ...]]] = {
    "oracle.pg.read_ts": ("oracle.pg.read_ts",),
    "oracle.pg.peek_write_ts": ("oracle.pg.peek_write_ts",),
    "oracle.pg.write_ts": ("oracle.pg.write_ts",),
    "oracle.pg.apply_write": ("oracle.pg.apply_write",),
    "stash.txn": ("stash.*",),
    "catalog.stash.txn": ("catalog.stash.*",),
    "consensus.cas": ("consensus.cas",),
    "consensus.head": ("consensus.head",),
    "consensus.scan": ("consensus.scan",),
    "consensus.truncate": ("consensus.truncate",),
}

#: z of the 99th percentile of a normal: a log-normal's sigma from its p50 and p99.
_Z99: Final = 2.3263
_MIN_SIGMA: Final = 0.05
_MAX_SIGMA: Final = 4.0  # sim.load.limits.MAX_SIGMA


def _refuse(run_dir: Path, why: str) -> CoordsimError:
    return CoordsimError(f"calibrate --from {run_dir}: {why}")


def read_real_run(run_dir: Path) -> dict[str, Any]:
    """`run_dir`'s summary.json, checked to be a real-mode compare that recorded
    backend round trips.

    Raises:
        CoordsimError: not a compare run directory, not real mode, or no cell
            with backend stats (one line; the CLI exits 2).
    """
    path = run_dir / "summary.json"
    if not path.is_file():
        raise _refuse(run_dir, "no summary.json: not the output directory of a `coordsim compare` run")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(run_dir, f"summary.json is unreadable: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("generator") != "coordsim compare":
        raise _refuse(run_dir, "summary.json was not written by `coordsim compare`")
    if doc.get("mode") != "real":
        raise _refuse(run_dir, f"a {doc.get('mode')!r}-mode run; a profile is built from a real-mode run's measurements")
    cells = doc.get("cells")
    if not isinstance(cells, list) or not any(isinstance(c, dict) and c.get("backend") for c in cells):
        raise _refuse(run_dir, "no cell recorded backend round trips (a run from before issue 35, or a scenario run)")
    return doc


def _run_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.toml ({} if absent): its configurations' effective knobs."""
    path = run_dir / "config.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _fit(entries: Sequence[tuple[int, float, float, float | None]]) -> tuple[float, float, int, str]:
    """(median ms, sigma, samples, how) of a log-normal pooled from cells'
    (count, p50 ms, p99 ms, mean ms): the median is the count-weighted
    geometric mean of the p50s. Sigma keeps the pooled mean where every cell
    has one (mean = median exp(sigma^2 / 2)): a closed loop's throughput
    follows the mean, and a p99 from a few stalls of a busy host would put
    the mean of a p99 fit several times too high. Without means (an older
    run) sigma comes from the log spread p99/p50 (ln(p99/p50) = 2.326 sigma)."""
    n = sum(e[0] for e in entries)
    median = math.exp(sum(c * math.log(max(p50, 1e-4)) for c, p50, _, _ in entries) / n)
    means = [(c, m) for c, _, _, m in entries if m is not None]
    if len(means) == len(entries):
        mean = sum(c * m for c, m in means) / n
        sigma, how = math.sqrt(2 * math.log(max(mean / median, 1.0))), "median and mean"
    else:
        spread = sum(c * math.log(max(p99, p50, 1e-4) / max(p50, 1e-4)) for c, p50, p99, _ in entries) / n
        sigma, how = spread / _Z99, "median and p99"
    return round(median, 4), round(min(_MAX_SIGMA, max(_MIN_SIGMA, sigma)), 3), n, how


def _cell_name(c: Mapping[str, Any]) -> str:
    return f"{c['workload']}/{c['config']}@{c['concurrency']}"


def _mean_s(cpu: Mapping[str, tuple[int, float]], kind: str) -> float | None:
    n, total = cpu.get(kind, (0, 0.0))
    return total / n if n else None


def costs_from_handlers(architecture: str, cpu: Mapping[str, tuple[int, float]]) -> dict[str, float]:
    """The Python CPU (seconds) to add to each `Costs` field, from handler kind
    -> (calls, CPU seconds) as real mode records them.

    The handlers charge the model's costs as follows (coordinator/event_loop*.py,
    coordinator/decoupled.py), so each field takes the handler that charges it:
    the statement's first handler charges `parse_plan` alone for the cheapest
    statement kind (its least mean), `peek_sequence` / `write_sequence` /
    `ddl_sequence` the excess of SELECT / INSERT / DDL over it; the staged
    messages `catalog_snapshot`, `commit`, `peek_stage`; a controller response
    `controller_response` (the confirm flushes' CPU, which no cost models, is
    spread over the responses); a group commit's trigger and completion
    handlers, per commit, `group_commit`. Not mapped, so as modeled:
    `loop_dispatch` (the loop's own code between handlers, not timed) and an
    UPDATE's own loop messages (`internal.read_then_write.*`).
    """
    out: dict[str, float] = {}

    def add(name: str, seconds: float | None) -> None:
        if seconds is not None and seconds > 0:
            out[name] = out.get(name, 0.0) + seconds

    first = "client." if architecture == "event-loop" else "statement."
    stmts = {k.removeprefix(first): m for k in cpu if k.startswith(first) and (m := _mean_s(cpu, k)) is not None}
    if stmts:
        base = min(stmts.values())
        add("parse_plan", base)
        add("peek_sequence", stmts["Select"] - base if "Select" in stmts else None)
        add("write_sequence", stmts["Insert"] - base if "Insert" in stmts else None)
        add("ddl_sequence", stmts["ddl"] - base if "ddl" in stmts else None)
    if architecture == "event-loop":
        add("catalog_snapshot", _mean_s(cpu, "command.catalog_snapshot"))
        add("commit", _mean_s(cpu, "command.commit"))
        stages = [cpu[k] for k in ("internal.stage.ready", "internal.timestamp_ready") if k in cpu]
        if stages:
            add("peek_stage", sum(t for _, t in stages) / sum(n for n, _ in stages))
        responses, response_s = cpu.get("response", (0, 0.0))
        if responses:
            add("controller_response", (response_s + cpu.get("confirm_flush", (0, 0.0))[1]) / responses)
        done = [k for k in ("internal.downgrade_on_loop", "internal.group_commit_done") if k in cpu]
        commits = sum(cpu[k][0] for k in done)
        gc = [k for k in cpu if k in done or "group_commit" in k]
        if commits:
            add("group_commit", sum(cpu[k][1] for k in gc) / commits)
    else:
        add("group_commit", _mean_s(cpu, "group_commit"))
    return out


@final
@dataclass(frozen=True)
class RunProfile:
    """A profile built from a run: latency name -> distribution and source;
    configuration -> costs (seconds) and their source; the coordinator's cores;
    and the run's provenance."""

    latency: dict[str, dict[str, Any]]
    latency_sources: dict[str, str]
    costs: dict[str, dict[str, float]]
    cost_sources: dict[str, str]
    cores: int
    meta: dict[str, Any]
    #: configuration -> workload -> `coordinator.config.Interpreter` fields.
    interpreter: dict[str, dict[str, dict[str, float]]] | None = None
    #: How the run's host realized a timer (`sim.compare.timer`): the
    #: selector's granularity and the overshoot, in ms; None if not recorded.
    timer: dict[str, Any] | None = None


def profile_from_run(
    run_dir: Path, *, base_profile: Path, levels: Sequence[int] | None = None
) -> RunProfile:
    """The profile of `run_dir` (see the module docstring).

    Args:
        base_profile: where the latencies the run did not record come from.
        levels: the concurrency levels whose cells the round trips are fitted
            from (default: the run's lowest, where the loop adds the least
            waiting to a measured round trip; the model adds queueing itself).
            Handler CPU is pooled over every level (it is CPU time, which
            waiting does not inflate).

    Raises:
        CoordsimError: `read_real_run`'s refusals, or `levels` not in the run.
    """
    doc = read_real_run(run_dir)
    cells = [c for c in doc["cells"] if isinstance(c, dict)]
    run_levels = sorted({int(c["concurrency"]) for c in cells})
    chosen = sorted(set(levels)) if levels else run_levels[:1]
    missing = [lv for lv in chosen if lv not in run_levels]
    if missing:
        raise _refuse(run_dir, f"no cells at concurrency {missing}; the run has {run_levels}")
    fit_cells = [c for c in cells if int(c["concurrency"]) in chosen and c.get("backend")]
    where = f"run {run_dir.resolve()}"
    base = _load_table(base_profile)
    latency: dict[str, dict[str, Any]] = dict(base.get("latency", {}))
    sources: dict[str, str] = {name: f"carried from {base_profile} (not recorded by the run)" for name in latency}
    for name, kinds in FROM_KINDS.items():
        entries: list[tuple[int, float, float, float | None]] = []
        used: list[str] = []
        for c in fit_cells:
            for kind in kinds:
                k = c["backend"].get(kind)
                if k and k.get("count") and k.get("p50_ms") is not None and k.get("p99_ms") is not None:
                    mean = k.get("mean_ms")
                    entries.append((int(k["count"]), float(k["p50_ms"]), float(k["p99_ms"]),
                                    None if mean is None else float(mean)))
                    used.append(_cell_name(c))
        if not entries:
            continue
        median, sigma, n, how = _fit(entries)
        latency[name] = {"kind": "lognormal", "median_ms": median, "sigma": sigma}
        sources[name] = (f"{where}: {'+'.join(kinds)} in cells {', '.join(dict.fromkeys(used))} "
                         f"({n} round trips; log-normal of the cells' pooled {how})")
    config = _run_config(run_dir)
    knobs = config.get("configuration", {}) if isinstance(config.get("configuration"), dict) else {}
    costs: dict[str, dict[str, float]] = {}
    cost_sources: dict[str, str] = {}
    interpreter: dict[str, dict[str, dict[str, float]]] = {}
    cores = 1
    run_prov = doc["provenance"] if isinstance(doc.get("provenance"), dict) else {}
    probe = run_prov.get("timer")
    overshoot_ms = float(probe.get("overshoot_ms", 0.0)) if isinstance(probe, dict) else 0.0
    for name in doc.get("configurations", []):
        mine = [c for c in cells if c.get("config") == name]
        cpu: dict[str, tuple[int, float]] = {}
        for c in mine:
            for kind, h in (c.get("handler_cpu") or {}).items():
                n0, t0 = cpu.get(kind, (0, 0.0))
                cpu[kind] = (n0 + int(h["count"]), t0 + float(h["total_ms"]) / 1000)
        k = knobs.get(name, {}) if isinstance(knobs.get(name), dict) else {}
        arch = str(k.get("architecture", "decoupled" if "decoupled" in name else "event-loop"))
        if arch == "decoupled":
            cores = max(cores, int(k.get("cores", 1)))
        if not cpu:
            continue
        modeled: dict[str, Any] = k["costs"] if isinstance(k.get("costs"), dict) else {}
        defaults = {f.name: float(modeled.get(f.name, getattr(Costs(), f.name))) for f in fields(Costs)}
        extra = costs_from_handlers(arch, cpu)
        costs[name] = {f: defaults[f] + extra.get(f, 0.0) for f in defaults}
        calls = sum(n for n, _ in cpu.values())
        cost_sources[name] = (f"{where}: the run's modeled costs (slept by real mode) + the Python CPU of "
                              f"{calls} handler calls in {len(mine)} cells, mapped by "
                              "sim.model.from_run.costs_from_handlers; loop_dispatch as modeled")
        python, total = sum(extra.values()), sum(costs[name].values())
        share = python / total if total > 0 else 0.0
        for wl in sorted({str(c["workload"]) for c in mine}):
            fitted = interpreter_from_cells([c for c in mine if c.get("workload") == wl], share,
                                            timer_overshoot_ms=overshoot_ms)
            if fitted is not None:
                interpreter.setdefault(name, {})[wl] = fitted
                cost_sources[f"interpreter.{name}.{wl}"] = (
                    f"{where}: the coordsim process's CPU (cores) against throughput over the "
                    f"{wl}/{name} cells, least squares (sim.model.from_run.interpreter_from_cells)")
    prov: dict[str, Any] = doc["provenance"] if isinstance(doc.get("provenance"), dict) else {}
    meta: dict[str, Any] = {
        "tool": "coordsim calibrate --from",
        "describes": DESCRIBES,
        "run_dir": str(run_dir.resolve()),
        "machine": f"{prov.get('cpu_model', 'unknown CPU')}, {prov.get('cores', '?')} cores",
        "fitted_levels": chosen,
        "fitted_cells": [_cell_name(c) for c in fit_cells],
        "base_profile": str(base_profile),
        "host_busy": bool(prov.get("busy", False)),
        "busy_reason": prov.get("busy_reason") or "",
        "run": {k: doc[k] for k in ("mode", "seed", "configurations", "workloads", "passes", "window_s",
                                   "warmup_s", "wall_s", "pg_isolation") if doc.get(k) is not None},
        "provenance": prov,
    }
    timer = prov.get("timer") if isinstance(prov.get("timer"), dict) else None
    if timer is not None:
        timer = {k: timer[k] for k in ("granularity_ms", "overshoot_ms") if k in timer}
        meta["timer_source"] = (f"{where}: its provenance's timer probe (sim.compare.timer; "
                            f"{prov['timer'].get('n')} sleeps of {prov['timer'].get('probe_ms')} ms, "
                            f"{prov['timer'].get('selector')}); applied to the latencies real mode "
                            "realizes as timers (sim.model.unmeasured.REAL_MODE_TIMERS)")
    return RunProfile(latency, sources, costs, cost_sources, cores, meta, interpreter or None, timer)


def interpreter_from_cells(
    cells: Sequence[Mapping[str, Any]], python_share: float, *, timer_overshoot_ms: float = 0.0
) -> dict[str, float] | None:
    """`coordinator.config.Interpreter` fields for one (configuration,
    workload) of a real run, or None without two cells that measured the
    process's CPU.

    Real mode runs all its Python on one thread, so the process's CPU
    (`coordsim_cpu`, cores) is interpreter time. Fitted over the levels as
    `cpu = base + k * throughput` (least squares): `base_cores` is what it
    spends whatever the load, and `per_op_s` is `k` less the handlers' own
    Python per statement (which the profile's costs already carry, with
    `python_share` of each cost on the interpreter). Both are clipped to
    their ranges (0 <= base < 0.9, per-op >= 0).

    The split needs throughput that varies over the levels: where it varies
    by less than `SPREAD_TO_SPLIT` (a workload whose rate a lock fixes, such
    as UPDATE's), base and per-statement time cannot be told apart, and the
    fit goes through the origin: all of it per statement, the load the
    statements themselves bring (a flat line through few points would
    otherwise call it all background and no statement would pay for it).
    `slice_s` comes from the cells' loop lag (`Interpreter.slice_s`)."""
    pts: list[tuple[float, float]] = []
    handler_s = statements = 0.0
    for c in cells:
        cpu, thr = c.get("coordsim_cpu"), c.get("throughput_ops_s")
        if isinstance(cpu, int | float) and isinstance(thr, int | float) and math.isfinite(cpu) and thr > 0:
            pts.append((float(thr), float(cpu)))
        # Handler CPU is recorded over the whole level (warm-up and drain too),
        # so it is divided by the statements it saw, not the window's ops.
        for kind, h in (c.get("handler_cpu") or {}).items():
            handler_s += float(h.get("total_ms", 0.0)) / 1000
            if kind.startswith(("client.", "statement.")):
                statements += float(h.get("count", 0))
    if len(pts) < 2:
        return None
    if max(x for x, _ in pts) < SPREAD_TO_SPLIT * min(x for x, _ in pts):
        k = sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
        return _interpreter(python_share, 0.0, k, handler_s, statements, cells, timer_overshoot_ms)
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    k = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else 0.0
    k = max(k, 0.0)
    base = my - k * mx
    if base < 0:  # through the origin instead: all of it per statement
        base, k = 0.0, sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
    return _interpreter(python_share, base, k, handler_s, statements, cells, timer_overshoot_ms)


#: Throughput must vary over the levels by this factor for the CPU fit to
#: tell background load from per-statement load (`interpreter_from_cells`).
SPREAD_TO_SPLIT: Final = 1.5


def _interpreter(
    python_share: float, base: float, k: float, handler_s: float, statements: float,
    cells: Sequence[Mapping[str, Any]], timer_overshoot_ms: float,
) -> dict[str, float]:
    per_handler = handler_s / statements if statements else 0.0
    fitted = {
        "python_share": round(min(max(python_share, 0.0), 1.0), 4),
        "base_cores": round(min(base, 0.9), 4),
        "per_op_s": round(max(k - per_handler, 0.0), 7),
    }
    # A ready step waits about half a background step: twice the median
    # loop lag (less the probe timer's own overshoot) is the step.
    lags = sorted(float(c["loop_lag_ms"]) for c in cells if isinstance(c.get("loop_lag_ms"), int | float))
    if lags:
        lag_ms = lags[len(lags) // 2] - timer_overshoot_ms
        fitted["slice_s"] = round(min(max(2 * lag_ms / 1000, 2e-5), 0.1), 7)
    return fitted


def _load_table(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    return data if isinstance(data, dict) else {}


def _toml(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _tables(prefix: str, table: Mapping[str, Any]) -> list[str]:
    """`table` as TOML under `[prefix]`: scalars and lists first, sub-tables after
    (None values left out: TOML has no null)."""
    lines = [f"[{prefix}]"]
    subs: list[str] = []
    for k, v in table.items():
        if isinstance(v, dict):
            subs += ["", *_tables(f"{prefix}.{json.dumps(k)}", v)]
        elif v is not None:
            lines.append(f"{json.dumps(k)} = {_toml(v)}")
    return lines + subs


def render_run_profile(profile: RunProfile, *, json_format: bool = False) -> str:
    """The profile file text (TOML, or JSON): `[meta]` (what it describes, the
    run and its provenance, every source), `[cpu] cores`, `[costs."<config>"]`
    and `[latency]`, as `sim.load.latency_profile` reads them."""
    meta = {**profile.meta, "latency_sources": profile.latency_sources, "cost_sources": profile.cost_sources}
    doc: dict[str, Any] = {"meta": meta, "cpu": {"cores": profile.cores}, "costs": profile.costs,
                           "latency": profile.latency}
    if profile.interpreter:
        doc["interpreter"] = profile.interpreter
    if profile.timer:
        doc["timer"] = profile.timer
    if json_format:
        return json.dumps(doc, indent=2) + "\n"
    m = profile.meta
    head = [
        "# A coordsim latency profile written by `coordsim calibrate --from` from a real compare run.",
        f"# It describes {DESCRIBES}.",
        f"# Run: {m['run_dir']}; round trips fitted from its cells at concurrency {m['fitted_levels']};",
        "# coordinator CPU: the run's modeled costs plus the Python CPU it measured per handler.",
    ]
    if m["host_busy"]:
        head.append(f"# THE RUN'S HOST WAS BUSY ({m['busy_reason']}): these numbers carry its load.")
    lines = [*head, ""]
    for key in ("meta", "cpu", "costs", "interpreter", "timer"):
        if key in doc:
            lines += [*_tables(key, doc[key]), ""]
    for name, spec in profile.latency.items():
        lines += [f"[latency.{json.dumps(name)}]", *(f"{k} = {_toml(v)}" for k, v in spec.items()), ""]
    return "\n".join(lines)
