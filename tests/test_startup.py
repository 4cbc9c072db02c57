"""Start-up stays cheap (issue 37): `import coordinator.config` loads at most 15
project modules, which holds only while package `__init__` files re-export
nothing they do not need; and `coordsim CMD --help` loads none of the heavy
modules, which holds only while command modules import what a command runs
inside the command. Counted in a fresh interpreter; not timed, since CPU time
on a shared machine is noise (bench/startup.py measures it)."""

from __future__ import annotations

import subprocess
import sys
from typing import Final

import pytest

from sim.cli.main import LAZY_COMMANDS

PROJECT = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim")
#: What no `coordsim CMD --help` may load: each costs a large share of the
#: help's 0.3 CPU-s, or pulls in the harness. pydantic: typer coerces option
#: values through it, and a help needs none (sim/cli/main.py).
HEAVY: Final = ("pyarrow", "numpy", "matplotlib", "pyspark", "asyncpg", "pydantic", "sim.nemesis",
                "sim.load.deployment", "controllers")
#: sim.nemesis's data modules, no harness in them: the scenario table
#: (`coordsim anomalies run --help` names its scenarios) and the fault kinds it uses.
LIGHT: Final = frozenset({"sim.nemesis", "sim.nemesis.anomaly_scenarios", "sim.nemesis.plan"})
#: Builds `coordsim CMD --help` as the CLI does (the command's module imported
#: lazily), checks it was the help, and prints every module then loaded.
_HELP = """
import contextlib, io, sys
from sim.cli.main import app
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = app([{name!r}, "--help"], standalone_mode=False, prog_name="coordsim")
assert code == 0 and out.getvalue().startswith("Usage: coordsim {name} "), (code, out.getvalue()[:300])
print("\\n".join(sorted(sys.modules)))
"""


def _loaded_by(statement: str) -> list[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in {set(PROJECT)!r})))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def test_importing_the_configuration_loads_at_most_15_project_modules() -> None:
    loaded = _loaded_by("import coordinator.config")
    assert len(loaded) <= 15, loaded


def test_the_cli_module_imports_no_command_module() -> None:
    """`coordsim --help` imports a command's module only when it is resolved."""
    loaded = _loaded_by("import sim.cli.main")
    commands = {"sim.cli." + m for m in ("anomalies", "calibrate", "catalog", "check", "compare", "export",
                                          "isolation", "spark", "validate")}
    assert not commands & set(loaded), sorted(commands & set(loaded))


def _heavy(module: str) -> bool:
    return module not in LIGHT and any(module == h or module.startswith(h + ".") for h in HEAVY)


@pytest.mark.parametrize("name", sorted({c.name for c in LAZY_COMMANDS}))
def test_a_commands_help_loads_no_heavy_module(name: str) -> None:
    """`coordsim CMD --help` imports the command's module and what its options
    need (types, defaults, help texts), not what running it needs."""
    out = subprocess.run([sys.executable, "-c", _HELP.format(name=name)], check=True, capture_output=True,
                         text=True, timeout=60)
    loaded = [m for m in out.stdout.split() if _heavy(m)]
    assert loaded == [], f"coordsim {name} --help loads {[m for m in loaded if m.rpartition('.')[0] not in loaded]}"


def test_the_heavy_rule_names_what_it_forbids() -> None:
    names = ("numpy", "pyarrow.parquet", "sim.nemesis.sweep", "controllers", "numpyro", "sim.nemesis.plan",
             "sim.load.limits")
    assert [m for m in names if _heavy(m)] == ["numpy", "pyarrow.parquet", "sim.nemesis.sweep", "controllers"]
