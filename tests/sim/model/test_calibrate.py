"""`coordsim calibrate` covers every latency the model draws, and the shipped
profile is one of its outputs verbatim.

The model's latency names are collected from the source (every `delay`,
`sample`, `replica_cost` call with a literal or f-string name), so a new
latency name fails here until it is either measured (`sim.model.calibrate.MEASURED`)
or listed with its source as unmeasured (`sim.model.unmeasured`).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from controllers.replica_costs import REPLICA_LATENCIES
from coordinator.config import Costs
from sim.compare.host import usable_cores
from sim.load.latency_profile import load_profile
from sim.load.run_config import DEFAULT_PROFILE
from sim.model.calibrate import (
    MEASURED,
    Calibration,
    Environment,
    calibrate_profile,
    render_profile,
)
from sim.model.unmeasured import (
    COST_SOURCES,
    LATENCY_SOURCES,
    PROFILE_LATENCIES,
    render,
    unmeasured,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("catalog", "controllers", "coordinator", "oracle", "persist", "sim")
#: Calls that draw a latency by name, and the position of the name.
DRAWS = {"delay": 0, "sample": 0, "replica_cost": 1}


def _name_of(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _literal_args(tree: ast.AST, function: str, position: int, where: str) -> set[str]:
    """The literal arguments at `position` (after `self`) of every call of `function`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name_of(node) == function and len(node.args) > position:
            arg = node.args[position]
            literal = arg.value if isinstance(arg, ast.Constant) else None
            assert isinstance(literal, str), (
                f"{where}: {function}() is called with a non-literal; cannot tell which latency names it draws"
            )
            out.add(literal)
    return out


def _expand(tree: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: ast.JoinedStr, where: str) -> set[str]:
    """`f"prefix.{param}"` inside `fn`: one name per literal `param` that `fn` is called with."""
    match name.values:
        case [ast.Constant(value=str(prefix)), ast.FormattedValue(value=ast.Name(id=param))]:
            pass
        case _:
            raise AssertionError(f"{where}: a latency name built as {ast.unparse(name)}; expand it in this test")
    params = [a.arg for a in fn.args.args if a.arg != "self"]
    assert param in params, f"{where}: {ast.unparse(name)} does not name a parameter of {fn.name}"
    return {f"{prefix}{v}" for v in _literal_args(tree, fn.name, params.index(param), where)}


def model_latency_names() -> set[str]:
    """Every latency name the product code draws (tests excluded)."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            if where == "sim/runtime/":
                continue  # defines delay/sample: its names are its callers'
            tree = ast.parse(path.read_text(), where)
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Call) or _name_of(node) not in DRAWS:
                        continue
                    position = DRAWS[_name_of(node) or ""]
                    if len(node.args) <= position:
                        continue
                    arg = node.args[position]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.add(arg.value)
                    elif isinstance(arg, ast.JoinedStr):
                        names |= _expand(tree, fn, arg, where)
                    elif _name_of(node) == "delay":
                        raise AssertionError(f"{where}: delay({ast.unparse(arg)}) draws a name this test cannot see")
    return names


def _under(name: str, names: Iterable[str]) -> bool:
    """`name` is one of `names` or more specific than one (`catalog.stash.txn.read`
    under `catalog.stash.txn`): a profile's entry covers the names under it."""
    return any(name == n or name.startswith(n + ".") for n in names)


def test_every_latency_the_model_draws_is_measured_or_named_unmeasured() -> None:
    drawn = model_latency_names()
    # The scan sees the names it must (else it proves nothing).
    assert {"oracle.pg.read_ts", "oracle.pg.apply_write", "stash.txn", "catalog.stash.txn.write", "consensus.truncate",
            "blob.list", "controller.catalog_feed", "replica.peek"} <= drawn
    undecided = {d for d in drawn if not _under(d, MEASURED) and not _under(d, LATENCY_SOURCES)}
    assert not undecided, (
        f"latency names neither measured by coordsim calibrate (sim.model.calibrate.MEASURED) nor listed with a "
        f"source in sim/model/unmeasured.py: {sorted(undecided)}"
    )
    assert not set(MEASURED) & set(LATENCY_SOURCES), "a name is either measured or unmeasured"
    never = {m for m in MEASURED if not any(_under(d, [m]) for d in drawn)}
    assert not never, f"calibrate measures names the model never draws: {sorted(never)}"


def test_every_unmeasured_cost_is_listed_once_with_its_source() -> None:
    assert set(COST_SOURCES) == {f.name for f in fields(Costs)}
    assert set(LATENCY_SOURCES) == set(REPLICA_LATENCIES) | set(PROFILE_LATENCIES)
    listed = [u.name for u in unmeasured()]
    assert len(listed) == len(set(listed))
    assert "costs.loop_dispatch" in listed
    assert all(u.source and u.value and u.defined_in for u in unmeasured())
    text = render()
    assert all(name in text for name in listed)


def _environment(fsync: str = "on") -> Environment:
    return Environment(
        date="2026-01-01 00:00 UTC", machine="Some CPU, 2 cores", os="Linux", python="3.12.0",
        postgres="16.0", postgres_server="embedded (started by coordsim), 127.0.0.1", fsync=fsync,
        synchronous_commit="on", blob="files", samples=5, load_average=(0.5, 0.6),
    )


def _rebuilt(text: str) -> Calibration:
    """The `Calibration` a TOML profile was rendered from (its [meta] and [latency])."""
    data = tomllib.loads(text)
    meta, latency = data["meta"], data["latency"]
    env = {f.name: meta[f.name] for f in fields(Environment)}
    env["load_average"] = tuple(env["load_average"])
    fits = {
        name: (latency[name]["median_ms"], latency[name]["sigma"], n)
        for name, n in meta["samples_per_operation"].items()
    }
    return Calibration(fits, p99_ms=meta["p99_ms"], environment=Environment(**env), provenance=meta.get("provenance"))


def test_a_rendered_profile_loads_and_says_where_it_was_measured(tmp_path: Path) -> None:
    measured = Calibration(
        {name: (0.5, 0.2, 5) for name in MEASURED}, p99_ms=dict.fromkeys(MEASURED, 1.0), environment=_environment()
    )
    text = render_profile(measured)
    assert text.startswith("# A coordsim latency profile written by `coordsim calibrate`")
    for fact in ("2026-01-01 00:00 UTC", "Some CPU, 2 cores", "PostgreSQL 16.0", "fsync=on", "5 samples"):
        assert fact in text
    assert _rebuilt(text) == measured
    assert render_profile(_rebuilt(text)) == text
    for suffix, body in ((".toml", text), (".json", render_profile(measured, json_format=True))):
        path = tmp_path / f"p{suffix}"
        path.write_text(body)
        model = load_profile(path)
        for name in set(MEASURED) | set(PROFILE_LATENCIES):
            assert model.configures(name), (suffix, name)
        assert not any(model.configures(name) for name in REPLICA_LATENCIES)  # their code defaults apply
    assert json.loads(render_profile(measured, json_format=True))["meta"]["tool"] == "coordsim calibrate"
    assert "fsync off" in render_profile(
        Calibration(dict(measured), p99_ms=measured.p99_ms, environment=_environment("off"))
    )


@pytest.mark.postgres
def test_calibrate_measures_every_measurable_latency(pg_url: str, tmp_path: Path) -> None:
    measured = calibrate_profile(pg_url, samples=5)
    assert list(measured) == list(MEASURED)
    assert all(median > 0 and n == 5 for median, _, n in measured.values())
    env = measured.environment
    assert env.fsync in ("on", "off")
    assert env.date.endswith("UTC")
    assert env.postgres
    assert env.machine
    path = tmp_path / "p.toml"
    path.write_text(render_profile(measured))
    model = load_profile(path)
    for name in model_latency_names() - set(REPLICA_LATENCIES):
        assert model.configures(name), name


def test_the_shipped_profile_is_a_calibrate_output_verbatim() -> None:
    text = DEFAULT_PROFILE.read_text()
    measured = _rebuilt(text)
    assert render_profile(measured) == text, (
        "sim/model/profiles/default.toml must be `coordsim calibrate -o sim/model/profiles/default.toml` output, unedited"
    )
    assert set(measured) == set(MEASURED)
    env = measured.environment
    # Real-mode runs start the embedded Postgres with fsync on (sim/cli/pg.py postgres_for).
    assert env.fsync == "on"
    assert env.synchronous_commit == "on"
    assert env.samples >= 100
    assert env.date
    assert env.machine
    assert env.postgres
    model = load_profile(DEFAULT_PROFILE)
    for name in model_latency_names() - set(REPLICA_LATENCIES):
        assert model.configures(name), name


@pytest.mark.postgres
@pytest.mark.s3
def test_calibrate_on_s3_times_blob_there_and_leaves_nothing(pg_url: str, s3_endpoint: str, s3_bucket: str) -> None:
    import asyncio
    import uuid

    from persist.open import open_blob

    url = f"s3://{s3_bucket}/calibrate-{uuid.uuid4().hex[:12]}?endpoint={s3_endpoint}"
    measured = calibrate_profile(pg_url, samples=5, s3_url=url)
    assert measured.environment.blob == "S3 (--s3)"
    assert all(measured[name][0] > 0 for name in MEASURED if name.startswith("blob."))

    async def left() -> list[str]:
        blob = await open_blob(url)
        try:
            return await blob.list_keys()
        finally:
            await blob.close()

    assert asyncio.run(left()) == []


# --- a busy host (issue 35): refused unless --force, and the profile says so -------------

_ENTRY: Final = Path(sys.executable).parent / "coordsim"
_COORDSIM: Final = [str(_ENTRY)] if _ENTRY.exists() else [sys.executable, "-c", "from sim.cli.main import main; main()"]


@contextlib.contextmanager
def _busy_host() -> Iterator[int]:
    """CPU-burning processes, one more than the cores (so both the load and the
    other processes' CPU are above the busy rule); children of the test, so
    siblings, not descendants, of the coordsim process under test: its host
    check counts them as other processes'. Yields how many."""
    n = usable_cores() + 1
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()


def _calibrate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_COORDSIM, "calibrate", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)


def test_check_host_sees_a_busy_host() -> None:
    """The check runs in a child of its own: the burners are then its
    siblings, as they would be another user's, not its descendants (whose
    CPU a process counts as its own)."""
    probe = ("import json; from dataclasses import asdict; from sim.model.calibrate import check_host; "
             "print(json.dumps(asdict(check_host())))")
    with _busy_host() as n:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    check = json.loads(out.stdout)
    assert check["busy_reason"], check
    assert check["other_cpu_cores"] is not None
    assert check["other_cpu_cores"] > 0.25, (n, check)
    assert "other processes used" in check["busy_reason"]


def test_calibrate_refuses_on_a_busy_host(tmp_path: Path) -> None:
    out = tmp_path / "p.toml"
    with _busy_host():
        r = _calibrate("--samples", "5", "-o", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("coordsim: error: the host is busy (other processes used"), lines[0]
    assert "--force" in lines[0]
    assert not out.exists()


@pytest.mark.postgres
def test_calibrate_forced_on_a_busy_host_marks_the_profile(tmp_path: Path, pg_url: str) -> None:
    out = tmp_path / "p.toml"
    with _busy_host():
        r = _calibrate("--samples", "5", "-o", str(out), "--force", env={"COORDSIM_POSTGRES_URL": pg_url})
    assert r.returncode == 0, r.stderr
    assert "--force on a busy host" in r.stderr
    text = out.read_text()
    assert "# FORCED ON A BUSY HOST (--force)" in text
    prov = tomllib.loads(text)["meta"]["provenance"]
    assert prov["forced_on_busy_host"] is True
    assert prov["host_busy"] is True
    assert prov["other_cpu_cores_before"] > 0.25
    assert "other processes used" in prov["busy_reason"]
    for key in ("started_utc", "cpu_model", "usable_cores", "load_avg_1m_before", "command", "pg_isolation"):
        assert key in prov, key
    assert prov["pg_isolation"] == "serializable"
    assert render_profile(_rebuilt(text)) == text
    model = load_profile(out)
    assert model.distribution("oracle.pg.read_ts").mean() > 0


def test_a_profile_records_its_provenance_and_round_trips() -> None:
    prov = {"started_utc": "2026-01-01T00:00:00Z", "host_busy": False, "forced_on_busy_host": False,
            "other_cpu_cores_before": 0.01, "load_avg_1m_before": 0.2, "pg_isolation": "read-committed"}
    measured = Calibration({name: (0.5, 0.2, 5) for name in MEASURED}, p99_ms=dict.fromkeys(MEASURED, 1.0),
                           environment=_environment(), provenance=prov)
    text = render_profile(measured)
    assert "# The host was quiet when calibration started" in text
    assert _rebuilt(text).provenance == prov
    assert render_profile(_rebuilt(text)) == text
    assert json.loads(render_profile(measured, json_format=True))["meta"]["provenance"] == prov
