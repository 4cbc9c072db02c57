"""The error every service raises when it cannot be had, so callers (the CLI,
the test fixtures) tell "not installed or cannot start" from a bug.
"""

from __future__ import annotations

from sim.runtime.errors import CoordsimError, Indeterminate

__all__ = ["BackendUnavailable", "ServiceDied"]


class BackendUnavailable(CoordsimError):
    """A required external component is missing or cannot start.

    The message is one line: what is missing and how to fix it.
    """


class ServiceDied(Indeterminate):
    """A component coordsim started (the embedded postmaster) died under a run.

    Indeterminate: the writes in flight when it died may or may not have
    taken effect. The message is one line naming what died.
    """
