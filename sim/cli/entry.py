"""The `coordsim` executable. Its first act routes SIGINT, SIGTERM and SIGHUP
(sim/runtime/interrupts.py), before the second or so of imports, so a signal that
arrives while the program is still loading stops it too."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Entry point (pyproject's `[project.scripts]`)."""
    from sim.runtime import interrupts
    interrupts.install(defer=True)
    from sim.cli.main import main as cli_main

    cli_main()
