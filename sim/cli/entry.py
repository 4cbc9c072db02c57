"""The `coordsim` executable. Its first act routes SIGINT, SIGTERM and SIGHUP
(sim/runtime/interrupts.py), before the second or so of imports, so a signal that
arrives while the program is still loading stops it too. Its second refuses an
interpreter that virtual time's patches to asyncio were not verified on
(`sim.runtime.patches.VERIFIED_PYTHON`, the versions CI runs and
pyproject's `requires-python` declares): one line, exit 2."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Entry point (pyproject's `[project.scripts]`)."""
    from sim.runtime import interrupts
    interrupts.install(defer=True)
    import sys

    from sim.runtime.verified import VERIFIED_PYTHON

    if sys.version_info[:2] not in VERIFIED_PYTHON:
        verified = ", ".join(f"{a}.{b}" for a, b in VERIFIED_PYTHON)
        sys.stderr.write(f"coordsim: Python {sys.version_info.major}.{sys.version_info.minor} is untested: "
                         f"coordsim's virtual time patches asyncio internals verified on CPython {verified} only\n")
        raise SystemExit(2)
    from sim.cli.main import main as cli_main

    cli_main()
