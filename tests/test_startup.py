"""Start-up stays cheap (issue 37): `import coordinator.config` loads at most 15
project modules, which holds only while package `__init__` files re-export
nothing they do not need. Counted in a fresh interpreter; not timed, since CPU
time on a shared machine is noise (bench/startup.py measures it)."""

from __future__ import annotations

import subprocess
import sys

PROJECT = ("coordinator", "oracle", "catalog", "persist", "controllers", "sim")


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
