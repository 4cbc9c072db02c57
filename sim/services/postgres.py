"""The real external components coordsim runs against, started on demand.

`EmbeddedPostgres` is a throwaway PostgreSQL cluster in a private (0700)
temporary directory, listening only on 127.0.0.1 and a private unix socket and
admitting only clients that know its per-cluster random password (SCRAM); it
is stopped and its directory deleted when the process exits — normally, on an
exception or Ctrl-C, and through a watchdog process even on SIGKILL. A watcher
thread notices within `WATCH_S` when its postmaster dies other than by our own
hand (the OOM killer, a stray `kill -9`) and tells the owner (`on_death`). An
environment variable (`COORDSIM_POSTGRES_URL`) points at an existing server
instead.

This module is the server's lifecycle (start, stop, crash, restart); finding
its binaries is `sim.services.pg_bindir`, making its data directory
`sim.services.pg_initdb`, finding, waiting for and cleaning up after its
processes `sim.services.pg_processes`, and the packaged binaries used when the
system has none `sim.services.binaries`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final, final
from urllib.parse import urlsplit

from sim.runtime import owners
from sim.runtime.errors import InvalidUsage
from sim.runtime.urls import redact_url
from sim.services import binaries, pg_initdb, pg_processes
from sim.services.errors import BackendUnavailable
from sim.services.pg_bindir import find_postgres
from sim.services.processes import free_port, run_group

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import TracebackType

    from sim.services.binaries import Found

__all__ = [
    "POSTGRES_URL_ENV",
    "WATCH_S",
    "BackendUnavailable",
    "EmbeddedPostgres",
    "embedded_serving",
    "open_postgres",
    "postgres_server",
    "postgres_url_from_env",
    "redact_url",
]

#: An existing Postgres (or CockroachDB) server to use instead of an embedded one.
POSTGRES_URL_ENV: Final = "COORDSIM_POSTGRES_URL"

_START_ATTEMPTS: Final = 3  # another process may take the free port we picked before we bind it
#: How long a dead postmaster's backends may linger before they are SIGKILLed,
#: and then how long they get to vanish before `restart()` gives up.
_LINGER_S: Final = 10.0
_REAP_S: Final = 5.0
_POLL_S: Final = 0.02
#: How often the watcher checks that the postmaster is alive: its death is
#: noticed within this, whatever the clients are (or are not) waiting on.
WATCH_S: Final = 0.25

def _pid_alive(pid: int) -> bool:
    """The process exists (and, where /proc tells, is no zombie)."""
    if Path("/proc").is_dir():
        return pg_processes.alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def postgres_url_from_env() -> str | None:
    """The URL in `$COORDSIM_POSTGRES_URL`, or None if it is unset or empty."""
    return os.environ.get(POSTGRES_URL_ENV) or None


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(tail) or "(empty server log)"


# Servers not yet stopped: stopped at interpreter exit, so nothing outlives
# the process (and their watchdogs take them down should the process die
# without running atexit handlers).
_LIVE: set[EmbeddedPostgres] = set()


@atexit.register
def _cleanup() -> None:
    for pg in list(_LIVE):
        with contextlib.suppress(Exception):
            pg.stop()
    pg_initdb.remove_templates()
    binaries.remove_staged()


def embedded_serving(url: str) -> EmbeddedPostgres | None:
    """The running `EmbeddedPostgres` of this process that `url` reaches (same
    host and port; any database), or None — e.g. for `$COORDSIM_POSTGRES_URL`."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return None
    return next((pg for pg in list(_LIVE) if pg._port == parts.port and pg.running), None)


@final
class EmbeddedPostgres:
    """A throwaway PostgreSQL cluster in a temporary directory.

    `start()` creates a cluster (a copy of one initdb made once per process) and
    starts it with pg_ctl — the system's binaries, else the packaged ones
    (`find_postgres`, reported by `binaries`) — as an unprivileged user when
    running as root, because PostgreSQL refuses root (only the PostgreSQL
    binaries run as that user, from a copy it can reach if need be). The
    server listens on 127.0.0.1 at a free port and on a unix socket inside the
    temporary directory; the temporary, data and socket directories are 0700.
    Every connection, local or TCP, authenticates with SCRAM-SHA-256 as the
    superuser `coordsim` with a random password made for this cluster alone,
    which only `url` carries (never `repr`, logs or files). `stop()` (or
    leaving the `with` block, or process exit) stops it and deletes the
    directory; if the process dies without doing so (SIGKILL), a watchdog
    process started with the cluster does it (the postmaster, daemonized by
    pg_ctl, does not die with us); should the watchdog die too, the
    directory's owner record (`sim.runtime.owners`) lets the next start of
    coordsim stop the orphaned postmaster and reclaim it
    (`sim.services.leftovers`).

    `kill_server()` (pg_ctl's immediate shutdown) and `sigkill_postmaster()` (a
    real SIGKILL: no shutdown at all) crash the server; `restart()` starts it
    again on the same port and data directory, for fault tests: `url` stays
    valid across them. The lifecycle methods are thread-safe (a fault injector
    may call them from a worker thread).
    """

    def __init__(
        self,
        *,
        fsync: bool = True,
        serializable: bool = False,
        bindir: str | None = None,
        max_connections: int = 200,
        on_death: Callable[[int], None] | None = None,
    ) -> None:
        """
        Args:
            fsync: False trades durability across OS crashes for speed (tests).
            serializable: make SERIALIZABLE the default isolation, to behave like
                CockroachDB (40001 serialization failures under contention).
            bindir: the directory holding initdb and pg_ctl (else `find_postgres`).
            max_connections: the server's connection limit.
            on_death: called (from the watcher thread) with the postmaster's
                pid when it dies while running other than through this
                object's `kill_server`, `sigkill_postmaster` or `stop`.
        """
        if max_connections < 1:
            raise InvalidUsage(f"max_connections must be >= 1, got {max_connections}")
        self._fsync = fsync
        self._serializable = serializable
        self._bindir_arg = bindir
        self._max_connections = max_connections
        self._bindir: Path | None = None
        self._found: Found | None = None
        self._tmp: Path | None = None
        self._port: int | None = None
        self._password: str | None = None
        self._running = False
        #: SIGKILLed and not restarted since: its shared memory is still allocated.
        self._crashed = False
        self._run_as: pwd.struct_passwd | None = None
        self._watchdog: pg_processes.Watchdog | None = None
        self._lock = threading.RLock()
        self._on_death = on_death
        #: The running postmaster's pid (None while it is not running).
        self._postmaster: int | None = None
        #: The pid of a postmaster that died under us (see `died`).
        self._died: int | None = None
        self._unwatch = threading.Event()

    # --- properties

    @property
    def url(self) -> str:
        """`postgresql://coordsim:PASSWORD@127.0.0.1:PORT/postgres` (a secret:
        print it through `redact_url`)."""
        port = self.port
        if self._password is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        return f"postgresql://{pg_initdb.SUPERUSER}:{self._password}@127.0.0.1:{port}/postgres"

    @property
    def port(self) -> int:
        if self._port is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        return self._port

    @property
    def datadir(self) -> Path:
        return self._require_tmp() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._require_tmp() / "sock"

    @property
    def log_path(self) -> Path:
        return self._require_tmp() / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    @property
    def died(self) -> int | None:
        """The pid of a postmaster that died while running, other than by our
        own hand (noticed by the watcher); None if none did."""
        return self._died

    @property
    def binaries(self) -> Found:
        """The PostgreSQL binaries this server runs (system or packaged, and why).
        As root these may run from a copy the unprivileged account can reach."""
        if self._found is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        return self._found

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
        with self._lock:
            if self._tmp is not None:
                raise InvalidUsage("EmbeddedPostgres.start() called twice; use restart()")
            self._found = find_postgres(self._bindir_arg)
            self._run_as = self._unprivileged_user()
            self._bindir = binaries.runnable_pg_bindir(self._found, self._run_as)
            # Resolved: the watchdog and `cluster_pids` compare it with /proc's
            # view of the server's working directory.
            # Claimed (an owner record): should both this process and its
            # watchdog die, the next start of coordsim reclaims it.
            self._tmp = owners.private_tmpdir("coordsim-pg-", "postgres")
            _LIVE.add(self)
            try:
                self._watchdog = pg_processes.Watchdog(self._tmp, [self.datadir])
                self.socket_dir.mkdir(mode=0o700)
                if self._run_as is not None:
                    for path in (self._tmp, self.socket_dir):
                        os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
                self._initdb()
                self._password = pg_initdb.set_password(self._run, self.datadir, fsync=self._fsync)
                for attempt in range(_START_ATTEMPTS):
                    self._port = free_port()
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
            threading.Thread(target=self._watch, name="coordsim-pg-watcher", daemon=True).start()
            return self

    def stop(self) -> None:
        """Stops the server (immediately) and deletes its directory. Idempotent."""
        with self._lock:
            if self._tmp is None:
                return
            try:
                if self._crashed:
                    # A SIGKILLed postmaster leaves its shared memory allocated
                    # (it outlives the directory); only a server start on the
                    # same directory frees it. Best effort: stopping must work.
                    with contextlib.suppress(BackendUnavailable):
                        self.restart()
                self.kill_server()
                # A start interrupted after pg_ctl launched the postmaster
                # leaves one that `kill_server` does not know of: quit it now
                # (SIGQUIT: PostgreSQL's immediate shutdown) rather than wait.
                for pid in pg_processes.cluster_pids(self.datadir):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGQUIT)
                with contextlib.suppress(BackendUnavailable):
                    self._wait_cluster_exited()
            finally:
                self._unwatch.set()
                owners.remove_tree(self._tmp)  # its owner record last
                if self._watchdog is not None:
                    self._watchdog.dismiss()
                self._watchdog = None
                self._tmp = None
                self._port = None
                self._password = None
                self._crashed = False
                _LIVE.discard(self)

    def kill_server(self) -> None:
        """Stops the server abruptly (`pg_ctl -m immediate`: like a crash, every
        connection drops), keeping the data directory and port. Idempotent."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            self._postmaster = None
            # If this fails the server is already gone; should one survive anyway, it
            # shuts itself down once `stop()` has deleted its data directory.
            self._run(["pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop"])

    def sigkill_postmaster(self) -> int | None:
        """Kills the postmaster with SIGKILL, as the OOM killer would: no
        shutdown at all, every connection drops, its backends linger until they
        notice, and `postmaster.pid` stays behind. The data directory and port
        are kept for `restart()`.

        Returns:
            The killed postmaster's pid; None if the server was not running.

        Raises:
            BackendUnavailable: the server runs but its `postmaster.pid` names
                no live postmaster of this cluster.
        """
        with self._lock:
            if not self._running:
                return None
            pid = pg_processes.postmaster_pid(self.datadir)
            if pid is None:
                raise BackendUnavailable(
                    f"no live postmaster found in {self.datadir / 'postmaster.pid'}"
                )
            self._running = False
            self._postmaster = None
            self._crashed = True
            # As root we may signal the unprivileged server; otherwise it is ours.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return pid

    def restart(self) -> None:
        """Crashes the server if it runs (`kill_server`), waits for the old
        server's processes to exit (a SIGKILLed postmaster's backends may
        linger a moment; SIGKILLed after a bounded wait), then starts it again
        on the same port and data directory (after crash recovery), so `url`
        stays valid.

        Raises:
            BackendUnavailable: the old processes would not exit, or the server
                failed to start.
        """
        with self._lock:
            self._require_tmp()
            self.kill_server()
            self._wait_cluster_exited()
            self._pg_ctl_start()
            self._crashed = False

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

    def _run(
        self, argv: Sequence[str], *, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs a PostgreSQL binary (as the unprivileged user when we are root)."""
        if self._bindir is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        cmd = [str(self._bindir / argv[0]), *argv[1:]]
        if self._run_as is not None:
            cmd = ["runuser", "-u", self._run_as.pw_name, "--", *cmd]
        # PG* variables (PGPORT, PGDATA, ...) of the caller must not steer our cluster.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        try:
            return run_group(cmd, cwd=self._require_tmp(), env=env, input=input)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendUnavailable(f"{argv[0]} could not run: {exc}") from exc

    def _initdb(self) -> None:
        """Creates the data directory: a copy of a pristine cluster that initdb made
        once per process (initdb takes a second or more; a copy, milliseconds)."""
        if self._bindir is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        made = pg_initdb.template(self._bindir, self._run_as, self._run)
        pg_initdb.copy_template(made, self.datadir)

    def _wait_cluster_exited(self) -> None:
        """Waits until no process of this cluster is left: `_LINGER_S` for them
        to exit by themselves, then SIGKILL and `_REAP_S` more. Then removes the
        stale `postmaster.pid` and socket lock file: a new postmaster refuses
        to start while the pid they name exists, and an unreaped zombie does
        (a container's init may never reap the orphaned postmaster).

        Raises:
            BackendUnavailable: some process would not exit.
        """
        pg_processes.wait_exited(self.datadir, linger_s=_LINGER_S, reap_s=_REAP_S, poll_s=_POLL_S)
        if Path("/proc").is_dir() and self._port is not None:  # else stale = live?
            (self.datadir / "postmaster.pid").unlink(missing_ok=True)
            (self.socket_dir / f".s.PGSQL.{self._port}.lock").unlink(missing_ok=True)

    def _pg_ctl_start(self) -> None:
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-p {self.port}",
            f"-k {shlex.quote(str(self.socket_dir))}",
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
        self._postmaster = pg_processes.postmaster_pid(self.datadir)
        if self._postmaster is None:
            # pg_ctl -w saw it accept connections, and now no process of the
            # cluster is its postmaster: it died at once (killed during set-up).
            self.kill_server()
            raise BackendUnavailable(
                f"PostgreSQL died right after starting on 127.0.0.1:{self.port}: {_log_tail(self.log_path)}"
            )

    def _watch(self) -> None:
        """The watcher thread: every `WATCH_S`, is the running postmaster still
        alive? If not (and we did not stop it), records it and calls `on_death`.
        Never blocks on the lifecycle lock: a start, restart or stop in
        progress skips a round."""
        while not self._unwatch.wait(WATCH_S):
            if not self._lock.acquire(blocking=False):
                continue
            try:
                pid = self._postmaster
                if not self._running or pid is None or _pid_alive(pid):
                    continue
                self._running = False
                self._postmaster = None
                self._died = pid
            finally:
                self._lock.release()
            if self._on_death is not None:
                self._on_death(pid)


@contextlib.contextmanager
def open_postgres(
    *,
    fsync: bool = True,
    serializable: bool = False,
    bindir: str | None = None,
    max_connections: int = 200,
    on_death: Callable[[int], None] | None = None,
) -> Iterator[EmbeddedPostgres]:
    """The one way to start an embedded Postgres: yields a running
    `EmbeddedPostgres` (its arguments are the constructor's), stopped and its
    directory deleted on exit. Entering it raises what `start()` raises
    (`BackendUnavailable`, after cleaning up what it started), so a caller
    that entered it through `ExitStack.enter_context` tells a failed start
    from an error of its own."""
    pg = EmbeddedPostgres(
        fsync=fsync,
        serializable=serializable,
        bindir=bindir,
        max_connections=max_connections,
        on_death=on_death,
    )
    try:
        yield pg.start()
    finally:
        pg.stop()


@contextlib.contextmanager
def postgres_server(
    *, fsync: bool = True, serializable: bool = False, on_death: Callable[[int], None] | None = None
) -> Iterator[str]:
    """Yields the URL of a Postgres server: `$COORDSIM_POSTGRES_URL` if set (used
    as is, options ignored), else one `open_postgres` starts (told `on_death`),
    stopped on exit."""
    url = postgres_url_from_env()
    if url is not None:
        yield url
        return
    with open_postgres(fsync=fsync, serializable=serializable, on_death=on_death) as pg:
        yield pg.url
