"""The error tiers every layer raises and every caller relies on: misuse
(`InvalidUsage`, never retried), a deposed leader (`Fenced`, never retried)
and external failures that definitely did not take effect (`Determinate`) or
may have (`Indeterminate`), DESIGN.md §9."""

from __future__ import annotations

__all__ = ['CoordsimError', 'Determinate', 'ExternalError', 'Fenced', 'Indeterminate', 'InvalidUsage']

# --- Errors -----------------------------------------------------------------------------


class CoordsimError(Exception):
    """Root of every error coordsim raises on purpose.

    The CLI turns any `CoordsimError` into one line on stderr and exit code 2;
    anything else escaping is a bug in coordsim.
    """


class InvalidUsage(CoordsimError, ValueError):
    """The caller broke an interface's contract (a bug in the caller).

    Raised at once and never retried: retrying a misuse cannot succeed.
    """


class Fenced(CoordsimError):
    """A newer process took over: it bumped the epoch of a store this process
    holds (the oracle's timestamp store, the durable catalog), so this process
    is no longer the leader, must stop serving (Materialize halts) and never
    writes again. An answer, not a failure: never retried, and nothing was
    written by the call that raised it.

    One class whichever store fenced: every caller reacts the same way (it
    answers its statements with the fenced error and stops), and the catalog,
    whose appends also call the oracle, need not tell the two apart.
    """


class ExternalError(CoordsimError):
    """Something outside the process (a server, a disk, the network) failed.

    Only the two subclasses are ever raised; catch this to handle both.
    """


class Determinate(ExternalError):
    """The operation definitely did not take effect; retrying it is safe.

    Implementations raise this only from an explicit allow-list of causes
    (SQLSTATE 40001, a refused connection, any failed read, ...).
    """


class Indeterminate(ExternalError):
    """The operation may or may not have taken effect (a timeout, a connection
    lost mid-statement). The default classification of an unknown failure.

    Idempotent operations may be retried blindly; a non-idempotent write must
    not be, and its outcome is surfaced (a history records it as `info`).
    """


