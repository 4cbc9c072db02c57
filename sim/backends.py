"""The real external components coordsim runs against, started on demand.

`EmbeddedPostgres` is a throwaway PostgreSQL cluster in a temporary directory,
listening only on 127.0.0.1 and a private unix socket; whatever happens (an
exception, Ctrl-C), it is stopped and its directory deleted when the process
exits. An environment variable (`COORDSIM_POSTGRES_URL`) points at an existing
server instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from persist.location import CoordsimError, InvalidUsage
from persist.urls import redact_url

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

__all__ = [
    "PG_BINDIR_ENV",
    "POSTGRES_URL_ENV",
    "BackendUnavailable",
    "EmbeddedPostgres",
    "find_postgres_bindir",
    "postgres_server",
    "postgres_url_from_env",
    "redact_url",
]

#: An existing Postgres (or CockroachDB) server to use instead of an embedded one.
POSTGRES_URL_ENV: Final = "COORDSIM_POSTGRES_URL"
#: The directory holding `initdb` and `pg_ctl`, when they are not found by themselves.
PG_BINDIR_ENV: Final = "COORDSIM_PG_BINDIR"


class BackendUnavailable(CoordsimError):
    """A required external component is missing or cannot start.

    The message is one line: what is missing and how to fix it.
    """


# --- PostgreSQL -------------------------------------------------------------------------

_PG_MISSING: Final = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found; install them "
    "(e.g. `apt-get install postgresql`) or set COORDSIM_POSTGRES_URL to an existing server"
)
_PG_LIB_ROOT: Final = Path("/usr/lib/postgresql")  # Debian/Ubuntu: one bin/ per major version
_START_ATTEMPTS: Final = 3  # another process may take the free port we picked before we bind it
_COMMAND_TIMEOUT_S: Final = 120.0


def _has_pg_binaries(d: Path) -> bool:
    return all(os.access(d / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def _version_key(d: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: compare versions numerically (10 > 9.6).
    try:
        return tuple(int(part) for part in d.parent.name.split("."))
    except ValueError:
        return (-1,)


def find_postgres_bindir(explicit: str | None = None) -> Path:
    """Returns the directory holding the PostgreSQL server binaries.

    Looks at, in order: `explicit`, `$COORDSIM_PG_BINDIR`, `pg_config --bindir`,
    the newest `/usr/lib/postgresql/*/bin`, and the directory of `initdb` on PATH.
    A directory named explicitly (argument or variable) is authoritative: if it
    lacks the binaries, the search stops there.

    Raises:
        BackendUnavailable: no candidate holds both `initdb` and `pg_ctl`.
    """
    for source, named in (("bindir", explicit), (PG_BINDIR_ENV, os.environ.get(PG_BINDIR_ENV))):
        if named:
            if _has_pg_binaries(Path(named)):
                return Path(named)
            raise BackendUnavailable(
                f"{source}={named} holds no PostgreSQL server binaries (initdb, pg_ctl); "
                f"point it at the right directory or set {POSTGRES_URL_ENV} to an existing server"
            )
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    candidates.extend(
        sorted(_PG_LIB_ROOT.glob("*/bin"), key=_version_key, reverse=True)
    )
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    for candidate in candidates:
        if _has_pg_binaries(candidate):
            return candidate
    raise BackendUnavailable(_PG_MISSING)


def postgres_url_from_env() -> str | None:
    """The URL in `$COORDSIM_POSTGRES_URL`, or None if it is unset or empty."""
    return os.environ.get(POSTGRES_URL_ENV) or None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail) or "(empty server log)"


# Servers not yet stopped, and initdb templates: removed at interpreter exit, so
# nothing outlives the process.
_LIVE: set[EmbeddedPostgres] = set()
_TEMPLATES: dict[tuple[str, str], Path] = {}
_TEMPLATE_DIRS: list[Path] = []


@atexit.register
def _cleanup() -> None:
    for pg in list(_LIVE):
        with contextlib.suppress(Exception):
            pg.stop()
    for d in _TEMPLATE_DIRS:
        shutil.rmtree(d, ignore_errors=True)


@final
class EmbeddedPostgres:
    """A throwaway PostgreSQL cluster in a temporary directory.

    `start()` creates a cluster (a copy of one initdb made once per process) and
    starts it with pg_ctl, as an unprivileged user when running as root, because
    PostgreSQL refuses root (only the PostgreSQL binaries run as that user). The
    server listens on 127.0.0.1 at a free port and on a unix socket inside the
    temporary directory, trusting local connections (superuser `coordsim`). `stop()` (or leaving the `with` block, or
    process exit) stops it and deletes the directory.

    `kill_server()` and `restart()` stop the server abruptly (like a crash) and
    start it again on the same port and data directory, for fault tests: `url`
    stays valid across them.
    """

    def __init__(
        self,
        *,
        fsync: bool = True,
        serializable: bool = False,
        bindir: str | None = None,
        max_connections: int = 200,
    ) -> None:
        """
        Args:
            fsync: False trades durability across OS crashes for speed (tests).
            serializable: make SERIALIZABLE the default isolation, to behave like
                CockroachDB (40001 serialization failures under contention).
            bindir: the directory holding initdb and pg_ctl (else searched).
            max_connections: the server's connection limit.
        """
        if max_connections < 1:
            raise InvalidUsage(f"max_connections must be >= 1, got {max_connections}")
        self._fsync = fsync
        self._serializable = serializable
        self._bindir_arg = bindir
        self._max_connections = max_connections
        self._bindir: Path | None = None
        self._tmp: Path | None = None
        self._port: int | None = None
        self._running = False
        self._run_as: pwd.struct_passwd | None = None

    # --- properties

    @property
    def url(self) -> str:
        """`postgresql://coordsim@127.0.0.1:PORT/postgres` (no password: trust auth)."""
        return f"postgresql://coordsim@127.0.0.1:{self.port}/postgres"

    @property
    def port(self) -> int:
        if self._port is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        return self._port

    @property
    def datadir(self) -> Path:
        return self._require_tmp() / "data"

    @property
    def log_path(self) -> Path:
        return self._require_tmp() / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    def _require_tmp(self) -> Path:
        if self._tmp is None:
            raise InvalidUsage("EmbeddedPostgres has not been started (or was stopped)")
        return self._tmp

    # --- lifecycle

    def start(self) -> EmbeddedPostgres:
        """Creates the cluster and starts the server; returns self.

        Raises:
            BackendUnavailable: the binaries are missing, or initdb or the server
                failed (the message carries the end of the server log).
        """
        if self._tmp is not None:
            raise InvalidUsage("EmbeddedPostgres.start() called twice; use restart()")
        self._bindir = find_postgres_bindir(self._bindir_arg)
        self._run_as = self._unprivileged_user()
        self._tmp = Path(tempfile.mkdtemp(prefix="coordsim-pg-"))
        _LIVE.add(self)
        try:
            (self._tmp / "sock").mkdir(mode=0o700)
            if self._run_as is not None:
                for path in (self._tmp, self._tmp / "sock"):
                    os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
            self._initdb()
            for attempt in range(_START_ATTEMPTS):
                self._port = _free_port()
                try:
                    self._pg_ctl_start()
                    break
                except BackendUnavailable:
                    clash = "already in use" in _log_tail(self.log_path, lines=20)
                    if not clash or attempt == _START_ATTEMPTS - 1:
                        raise
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops the server (immediately) and deletes its directory. Idempotent."""
        if self._tmp is None:
            return
        try:
            self.kill_server()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            self._port = None
            _LIVE.discard(self)

    def kill_server(self) -> None:
        """Stops the server abruptly (`pg_ctl -m immediate`: like a crash, every
        connection drops), keeping the data directory and port. Idempotent."""
        if not self._running:
            return
        self._running = False
        # If this fails the server is already gone; should one survive anyway, it
        # shuts itself down once `stop()` has deleted its data directory.
        self._run(["pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop"])

    def restart(self) -> None:
        """Kills the server if it runs, then starts it again on the same port and
        data directory (after crash recovery), so `url` stays valid."""
        self._require_tmp()
        self.kill_server()
        self._pg_ctl_start()

    def __enter__(self) -> EmbeddedPostgres:
        return self.start() if self._tmp is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"port {self._port}" if self._running else "stopped"
        return f"EmbeddedPostgres({where}, fsync={self._fsync}, serializable={self._serializable})"

    # --- helpers

    @staticmethod
    def _unprivileged_user() -> pwd.struct_passwd | None:
        """The account to run PostgreSQL as when we are root (it refuses root)."""
        if os.geteuid() != 0:
            return None
        if shutil.which("runuser") is None:
            raise BackendUnavailable(
                "running as root, PostgreSQL needs `runuser` (util-linux) to drop privileges; "
                f"install it, run as a normal user, or set {POSTGRES_URL_ENV}"
            )
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                return pwd.getpwnam(name)
        raise BackendUnavailable(
            "running as root, PostgreSQL needs an unprivileged account (postgres or nobody); "
            f"create one, run as a normal user, or set {POSTGRES_URL_ENV}"
        )

    def _run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Runs a PostgreSQL binary (as the unprivileged user when we are root)."""
        if self._bindir is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        cmd = [str(self._bindir / argv[0]), *argv[1:]]
        if self._run_as is not None:
            cmd = ["runuser", "-u", self._run_as.pw_name, "--", *cmd]
        # PG* variables (PGPORT, PGDATA, ...) of the caller must not steer our cluster.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        try:
            return subprocess.run(
                cmd,
                cwd=self._require_tmp(),
                env=env,
                capture_output=True,
                text=True,
                timeout=_COMMAND_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendUnavailable(f"{argv[0]} could not run: {exc}") from exc

    def _initdb(self) -> None:
        """Creates the data directory: a copy of a pristine cluster that initdb made
        once per process (initdb takes a second or more; a copy, milliseconds)."""
        template = self._template()
        # `cp -a` keeps owners and modes, and is ~10x faster than shutil.copytree here.
        cp = subprocess.run(
            ["cp", "-a", str(template), str(self.datadir)],
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
        if cp.returncode != 0:
            raise BackendUnavailable(f"cannot copy the initdb template: {cp.stderr.strip()}")

    def _template(self) -> Path:
        key = (str(self._bindir), self._run_as.pw_name if self._run_as is not None else "")
        template = _TEMPLATES.get(key)
        if template is not None and template.is_dir():
            return template
        parent = Path(tempfile.mkdtemp(prefix="coordsim-pg-template-"))
        _TEMPLATE_DIRS.append(parent)
        if self._run_as is not None:
            os.chown(parent, self._run_as.pw_uid, self._run_as.pw_gid)
        template = parent / "data"
        result = self._run(
            [
                "initdb",
                "-D",
                str(template),
                "--auth=trust",
                "-U",
                "coordsim",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )
        if result.returncode != 0:
            lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
            detail = " | ".join(lines[-3:]) or "no output"
            raise BackendUnavailable(f"initdb failed (exit {result.returncode}): {detail}")
        _TEMPLATES[key] = template
        return template

    def _pg_ctl_start(self) -> None:
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-p {self.port}",
            f"-k {shlex.quote(str(self._require_tmp() / 'sock'))}",
            f"-c fsync={'on' if self._fsync else 'off'}",
            f"-c max_connections={self._max_connections}",
            "-c shared_buffers=32MB",
        ]
        if self._serializable:
            options.append("-c default_transaction_isolation=serializable")
        argv = ["pg_ctl", "-D", str(self.datadir), "-l", str(self.log_path), "-w", "-t", "60"]
        result = self._run([*argv, "-o", " ".join(options), "start"])
        if result.returncode != 0:
            # pg_ctl -w may leave a postmaster behind when it times out.
            self._running = True
            with contextlib.suppress(BackendUnavailable):
                self.kill_server()
            raise BackendUnavailable(
                f"PostgreSQL failed to start on 127.0.0.1:{self.port} "
                f"(pg_ctl exit {result.returncode}): {_log_tail(self.log_path)}"
            )
        self._running = True


@contextlib.contextmanager
def postgres_server(*, fsync: bool = True, serializable: bool = False) -> Iterator[str]:
    """Yields the URL of a Postgres server: `$COORDSIM_POSTGRES_URL` if set (used
    as is, options ignored), else a fresh `EmbeddedPostgres`, stopped on exit."""
    url = postgres_url_from_env()
    if url is not None:
        yield url
        return
    with EmbeddedPostgres(fsync=fsync, serializable=serializable) as pg:
        yield pg.url


# --- S3 ---------------------------------------------------------------------------------
# (A local S3-compatible server is added here.)
