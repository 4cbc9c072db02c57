"""The one scenario registry: the shipped programs (`builtin.PROGRAMS`, seed
001's scenarios among them; the anomaly runs use the same ones), TOML files
naming a workload and its parameters (`workload = "insert"`, plus any
`sim.load.run_config.RunConfig` key), and a user's Python file exposing
`async def scenario(sim)` — a program like the shipped ones, driving a
`sim.load.driver.Sim` (sessions, SQL, waits, results to branch on, a
coordinator restart).

`coordsim run SCENARIO --config NAME` and `coordsim compare -w` accept a
shipped program's name, a shipped TOML file's name (without its suffix), a
workload name, or a path.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from sim.load.scenarios.builtin import PROGRAMS
from sim.load.workloads import WORKLOADS
from sim.runtime.errors import CoordsimError, InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sim.load.driver import Sim

__all__ = [
    "SCENARIO_DIR",
    "PythonScenario",
    "ScenarioError",
    "TomlScenario",
    "load",
    "raised_by_scenario",
    "scenario_error",
    "shipped",
]

SCENARIO_DIR: Final = Path(__file__).parent


class ScenarioFailed(CoordsimError):
    """A scenario's own `sim.expect` did not hold."""


class ScenarioError(CoordsimError):
    """A Python scenario raised (on import or while running): its own bug, told
    in one line with the scenario's file and line (`scenario_error`)."""


def raised_by_scenario(exc: BaseException) -> bool:
    """Whether `exc`, caught around a scenario's own code, is the scenario's
    doing: any exception, and also `sys.exit`, a `KeyboardInterrupt` it
    raised itself and any other `BaseException` subclass of its own. Not a
    cancellation (the harness's), and not a signal coordsim received (its
    `Interrupted`, which stops the run as any signal does)."""
    import asyncio

    from sim.runtime import interrupts

    if isinstance(exc, BaseExceptionGroup):
        return all(raised_by_scenario(e) for e in exc.exceptions)
    if isinstance(exc, asyncio.CancelledError | GeneratorExit | interrupts.Interrupted):
        return False
    return interrupts.received() is None


def scenario_error(path: Path, exc: BaseException) -> ScenarioError:
    """`scenario my.py:12: ZeroDivisionError: division by zero` for `exc`,
    raised by the scenario at `path`: the line is the innermost frame in that
    file (where the scenario called whatever failed), else the innermost one."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # a task group's: the first failure is the story
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        where = f"{path.name}:{exc.lineno}"
    else:
        target = path.resolve()
        own = [f for f in frames if f.filename and Path(f.filename).resolve() == target]
        frame = own[-1] if own else None
        where = f"{path.name}:{frame.lineno}" if frame is not None else path.name
    message = " ".join(str(exc).split())
    return ScenarioError(f"scenario {where}: {type(exc).__name__}{': ' + message if message else ''}")


@final
@dataclass(frozen=True)
class TomlScenario:
    """A workload with parameters (`RunConfig` keys, e.g. `concurrency = [1, 8]`)."""

    name: str
    workload: str
    params: dict[str, Any] = field(default_factory=dict)


@final
@dataclass(frozen=True)
class PythonScenario:
    name: str
    main: Callable[[Sim], Awaitable[None]]
    path: Path | None = None  # the file, to name it in errors


def shipped() -> list[str]:
    """Names of the shipped scenarios: the programs and this package's TOML files."""
    return sorted([*PROGRAMS, *(_kebab(p.stem) for p in SCENARIO_DIR.iterdir() if p.suffix == ".toml")])


def _kebab(stem: str) -> str:
    """A shipped file's scenario name: names have one spelling, kebab-case
    (`select_one.toml` is the scenario `select-one`)."""
    return stem.replace("_", "-")


def load(spec: str) -> TomlScenario | PythonScenario:
    """Resolves `spec` (shipped name, workload name or path); `InvalidUsage` if none fits."""
    path = Path(spec)
    if not path.is_file():
        if spec.replace("_", "-") in PROGRAMS:
            name = spec.replace("_", "-")
            return PythonScenario(name, PROGRAMS[name])
        for suffix in (".toml",):
            candidate = SCENARIO_DIR / f"{spec.replace('-', '_')}{suffix}"
            if candidate.is_file():
                path = candidate
                break
        else:
            if spec in WORKLOADS:
                return TomlScenario(spec, spec)
            raise InvalidUsage(
                f"unknown scenario {spec!r}; shipped: {', '.join(shipped())}; "
                f"workloads: {', '.join(WORKLOADS)}; or a .py/.toml path"
            )
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidUsage(f"cannot read scenario {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise InvalidUsage(f"scenario {path} is not UTF-8 text (byte {exc.start})") from exc
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise InvalidUsage(f"bad TOML in {path}: {' '.join(str(exc).split())}") from exc
        wl = data.pop("workload", None)
        if not isinstance(wl, str):
            raise InvalidUsage(f"{path}: a TOML scenario needs `workload = \"<name>\"`")
        if wl not in WORKLOADS:
            raise InvalidUsage(f"{path}: unknown workload {wl!r}; known: {', '.join(WORKLOADS)}")
        data.pop("description", None)
        return TomlScenario(_kebab(path.stem) if path.parent == SCENARIO_DIR else path.stem, wl, data)
    if path.suffix != ".py":
        raise InvalidUsage(f"{path}: a scenario is a .py or .toml file")
    mod_spec = importlib.util.spec_from_file_location(f"coordsim_scenario_{path.stem}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise InvalidUsage(f"cannot load scenario {path}")
    module = importlib.util.module_from_spec(mod_spec)
    # No __pycache__ beside the user's file: coordsim leaves nothing behind
    # that it was not asked to write.
    wrote_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        mod_spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise InvalidUsage(f"{path}: {' '.join(str(exc).split())}") from exc
    except OSError as exc:
        raise InvalidUsage(f"cannot read scenario {path}: {exc.strerror or exc}") from exc
    except BaseException as exc:
        # The scenario's own code failed on import (a bad import, a typo at
        # module level, a sys.exit): its error, where it happened, not our
        # traceback, and never our exit code.
        if not raised_by_scenario(exc):
            raise
        raise scenario_error(path, exc) from exc
    finally:
        sys.dont_write_bytecode = wrote_bytecode
    main = getattr(module, "scenario", None)
    if main is None or not callable(main):
        raise InvalidUsage(f"{path} has no `async def scenario(sim)`")
    return PythonScenario(path.stem, main, path)
