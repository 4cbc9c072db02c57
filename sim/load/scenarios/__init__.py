"""Scenario scripts: a Python file exposing `async def scenario(sim)` (with the
`Sim` helpers below to open sessions, run SQL, wait, branch on results and
inject a coordinator restart), or a TOML file naming a workload and its
parameters (`workload = "insert"`, plus any `sim.load.config.Config` key).

`coordsim run SCENARIO --config NAME` accepts a shipped scenario's name (a file
in this package without its suffix), a workload name, or a path.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from coordinator.factory import build_coordinator
from sim.load.workloads import WORKLOADS
from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.tasks import AsyncExitStack

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from coordinator.config import CoordinatorConfig
    from coordinator.environment import Environment
    from coordinator.session import Coordinator, Result
    from sim.history.recorder import HistoryRecorder
    from sim.history.recording import RecordingSession
    from sim.runtime.core import Runtime

__all__ = [
    "SCENARIO_DIR",
    "PythonScenario",
    "ScenarioError",
    "Sim",
    "TomlScenario",
    "load",
    "scenario_error",
    "shipped",
]

SCENARIO_DIR: Final = Path(__file__).parent


class ScenarioFailed(CoordsimError):
    """A scenario's own `sim.expect` did not hold."""


class ScenarioError(CoordsimError):
    """A Python scenario raised (on import or while running): its own bug, told
    in one line with the scenario's file and line (`scenario_error`)."""


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
    """A workload with parameters (`Config` keys, e.g. `concurrency = [1, 8]`)."""

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
    """Names of the scenarios shipped in this package."""
    return sorted(p.stem for p in SCENARIO_DIR.iterdir() if p.suffix in (".py", ".toml") and p.stem != "__init__")


def load(spec: str) -> TomlScenario | PythonScenario:
    """Resolves `spec` (shipped name, workload name or path); `InvalidUsage` if none fits."""
    path = Path(spec)
    if not path.is_file():
        for suffix in (".py", ".toml"):
            candidate = SCENARIO_DIR / f"{spec.replace('-', '_')}{suffix}"
            if candidate.is_file() and candidate.stem != "__init__":
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
        return TomlScenario(path.stem, wl, data)
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
    except Exception as exc:
        # The scenario's own code failed on import (a bad import, a typo at
        # module level): its error, where it happened, not our traceback.
        raise scenario_error(path, exc) from exc
    finally:
        sys.dont_write_bytecode = wrote_bytecode
    main = getattr(module, "scenario", None)
    if main is None or not callable(main):
        raise InvalidUsage(f"{path} has no `async def scenario(sim)`")
    return PythonScenario(path.stem, main, path)


@final
class Sim:
    """What a Python scenario drives: one coordinator on one deployment,
    recorded as a history (`RecordingSession`s and the coordinator's events)."""

    def __init__(
        self, rt: Runtime, env: Environment, config: CoordinatorConfig, recorder: HistoryRecorder
    ) -> None:
        from sim.history.recording import event_sink

        self.rt = rt
        self.env = env
        self.config = config
        self.recorder = recorder
        self._sink = event_sink(recorder)
        self._sessions: list[RecordingSession] = []
        self._stack: AsyncExitStack | None = None
        self.coord: Coordinator | None = None
        self.failures: list[str] = []
        self.restarts = 0

    async def start(self) -> None:
        stack = AsyncExitStack()
        self.coord = await stack.enter_async_context(
            build_coordinator(self.config, self.env, self.rt, events=self._sink, actor=f"coordinator{self.restarts}")
        )
        self._stack = stack

    async def stop(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    def session(self, client: str | None = None) -> RecordingSession:
        """A new client connection, recorded under `client` (default c<n>)."""
        from sim.history.recording import RecordingSession

        if self.coord is None:
            raise InvalidUsage("the coordinator is not running")
        s = RecordingSession(self.coord.connect(), self.recorder, client=client or f"c{len(self._sessions) + 1}")
        self._sessions.append(s)
        return s

    async def sql(self, session: RecordingSession, text: str) -> Result:
        """Runs one statement on `session`; the result (with `.ok`, `.rows`,
        `.error`) is for the scenario to branch on."""
        return await session.execute(text)

    async def wait(self, seconds: float) -> None:
        await self.rt.sleep(seconds)

    async def concurrently(self, *calls: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Runs the calls concurrently and returns when all have."""
        async with anyio.create_task_group() as tg:
            for call in calls:
                tg.start_soon(call)

    async def restart(self) -> None:
        """Fault: the coordinator process crashes and a new one opens the same
        stores; every session continues on the new one as a fresh process."""
        await self.stop()
        self.restarts += 1
        await self.start()
        assert self.coord is not None
        for s in self._sessions:
            s.rebind(self.coord.connect())

    def expect(self, condition: bool, message: str) -> None:
        """Records a scenario-level failure (reported; the history is still checked)."""
        if not condition:
            self.failures.append(message)
