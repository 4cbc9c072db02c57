"""The error every service raises when it cannot be had, so callers (the CLI,
the test fixtures) tell "not installed or cannot start" from a bug.
"""

from __future__ import annotations

from sim.runtime.errors import CoordsimError

__all__ = ["BackendUnavailable"]


class BackendUnavailable(CoordsimError):
    """A required external component is missing or cannot start.

    The message is one line: what is missing and how to fix it.
    """
