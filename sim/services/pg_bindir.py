"""Where the PostgreSQL server binaries (`initdb`, `pg_ctl`) the embedded server
(`sim.services.postgres`) runs are: a directory named explicitly, which is
authoritative, else the system's, else pgserver's packaged PostgreSQL
(`sim.services.binaries`). Each answer says where it came from, for
`coordsim doctor`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

from sim.services import binaries
from sim.services.binaries import Found
from sim.services.errors import BackendUnavailable

__all__ = ["PG_BINDIR_ENV", "find_postgres", "find_postgres_bindir"]

#: The directory holding `initdb` and `pg_ctl`, when they are not found by themselves.
PG_BINDIR_ENV: Final = "COORDSIM_PG_BINDIR"
_PG_MISSING: Final = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found; install them "
    "(e.g. `apt-get install postgresql`) or set COORDSIM_POSTGRES_URL to an existing server"
)
_PG_NOWHERE: Final = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found on the system, and the packaged "
    "ones (pgserver, a dependency) are not installed: there is no wheel for this platform "
    "or Python; install the system's (e.g. `apt-get install postgresql`) or set "
    "COORDSIM_POSTGRES_URL to an existing server"
)
_PG_LIB_ROOT: Final = Path("/usr/lib/postgresql")  # Debian/Ubuntu: one bin/ per major version


def _has_pg_binaries(d: Path) -> bool:
    return all(os.access(d / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def _version_key(d: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: compare versions numerically (10 > 9.6).
    try:
        return tuple(int(part) for part in d.parent.name.split("."))
    except ValueError:
        return (-1,)


def _system_postgres(explicit: str | None) -> Found | None:
    """The system's PostgreSQL server binaries (see `find_postgres_bindir`), or None.

    Raises:
        BackendUnavailable: a directory named explicitly lacks the binaries.
    """
    for source, named in (("bindir", explicit), (PG_BINDIR_ENV, os.environ.get(PG_BINDIR_ENV))):
        if named:
            if _has_pg_binaries(Path(named)):
                return Found("postgres", "system", source, Path(named))
            raise BackendUnavailable(
                f"{source}={named} holds no PostgreSQL server binaries (initdb, pg_ctl); "
                "point it at the right directory or set COORDSIM_POSTGRES_URL to an existing server"
            )
    candidates: list[tuple[str, Path]] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(("pg_config", Path(out.stdout.strip())))
    candidates.extend(
        (str(_PG_LIB_ROOT), d)
        for d in sorted(_PG_LIB_ROOT.glob("*/bin"), key=_version_key, reverse=True)
    )
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(("PATH", Path(initdb).resolve().parent))
    for source, candidate in candidates:
        if _has_pg_binaries(candidate):
            return Found("postgres", "system", source, candidate)
    return None


def find_postgres_bindir(explicit: str | None = None) -> Path:
    """Returns the directory holding the system's PostgreSQL server binaries.

    Looks at, in order: `explicit`, `$COORDSIM_PG_BINDIR`, `pg_config --bindir`,
    the newest `/usr/lib/postgresql/*/bin`, and the directory of `initdb` on PATH.
    A directory named explicitly (argument or variable) is authoritative: if it
    lacks the binaries, the search stops there. The embedded server also falls
    back to packaged binaries: `find_postgres` is what it runs.

    Raises:
        BackendUnavailable: no candidate holds both `initdb` and `pg_ctl`.
    """
    found = _system_postgres(explicit)
    if found is None:
        raise BackendUnavailable(_PG_MISSING)
    return found.path


def find_postgres(explicit: str | None = None) -> Found:
    """The PostgreSQL server binaries the embedded server runs, and why those:
    the system's (`find_postgres_bindir`'s search, a directory named
    explicitly being authoritative), else pgserver's packaged PostgreSQL 16.

    Raises:
        BackendUnavailable: a directory named explicitly lacks the binaries, or
            there are none on the system and no packaged ones.
    """
    found = _system_postgres(explicit)
    if found is not None:
        return found
    packaged = binaries.packaged_pg_bindir()
    if packaged is None:
        raise BackendUnavailable(_PG_NOWHERE)
    return Found("postgres", "packaged", "pgserver", packaged)
