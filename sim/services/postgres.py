"""The real external components coordsim runs against, started on demand.

`EmbeddedPostgres` is a throwaway PostgreSQL cluster in a private (0700)
temporary directory, listening only on 127.0.0.1 and a private unix socket and
admitting only clients that know its per-cluster random password (SCRAM); it
is stopped and its directory deleted when the process exits — normally, on an
exception or Ctrl-C, and through a watchdog process even on SIGKILL. An
environment variable (`COORDSIM_POSTGRES_URL`) points at an existing server
instead.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, final
from urllib.parse import urlsplit

from sim.runtime.errors import CoordsimError, InvalidUsage
from sim.runtime.urls import redact_url

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

__all__ = [
    "PG_BINDIR_ENV",
    "POSTGRES_URL_ENV",
    "BackendUnavailable",
    "EmbeddedPostgres",
    "embedded_serving",
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
#: The superuser every embedded cluster has (its password is per cluster).
_SUPERUSER: Final = "coordsim"
#: How long a dead postmaster's backends may linger before they are SIGKILLed,
#: and then how long they get to vanish before `restart()` gives up.
_LINGER_S: Final = 10.0
_REAP_S: Final = 5.0
_POLL_S: Final = 0.02
#: Seconds `stop()` waits for its watchdog to exit after telling it to.
_WATCHDOG_EXIT_S: Final = 5.0


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


def _scram_verifier(password: str, *, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802/7677,
    the `rolpassword` format). Storing the verifier rather than the password
    means the password never reaches the server, and `password_encryption`
    (md5 by default before PostgreSQL 14) cannot turn it into an md5 hash that
    scram-sha-256 authentication would reject. `password` is ASCII, for which
    SASLprep is the identity."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


# --- the processes of a cluster ------------------------------------------------------------
# A postmaster and every process it forks run with the data directory as their
# working directory, which /proc shows even after the postmaster died (its
# backends linger until they notice) and cannot be confused with an unrelated
# process that reused a stale `postmaster.pid`'s pid.


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never
    reap an orphaned postmaster; a zombie holds no memory, files or ports)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = stat.rpartition(b")")[2].split()
    return bool(fields) and fields[0] != b"Z"


def _cluster_pids(datadir: Path) -> list[int]:
    """The live processes whose working directory is `datadir` (Linux /proc;
    elsewhere none are found, and the caller relies on pg_ctl alone)."""
    want = str(datadir)
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cwd = os.readlink(f"/proc/{entry.name}/cwd")
            except OSError:  # gone, a zombie, or not ours to inspect
                continue
            if cwd.removesuffix(" (deleted)") == want and _alive(int(entry.name)):
                pids.append(int(entry.name))
    return sorted(pids)


# The watchdog: a separate interpreter (stdlib only, `-I -S`, so nothing in the
# working tree can break it) that blocks reading a pipe whose only write end
# the owner holds. EOF without the owner's "q" means the owner died — even by
# SIGKILL, which no atexit handler survives — so it takes the cluster down
# (SIGQUIT to the postmaster: an immediate shutdown that still frees the shared
# memory; SIGKILL for whatever remains), deletes the directory coordsim created,
# and exits. It mirrors `_cluster_pids` because it cannot import this module.
_WATCHDOG_SRC: Final = r"""# coordsim: embedded PostgreSQL watchdog
import os, shutil, signal, sys, time

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(fields) and fields[0] != b"Z"

def members(datadir):
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd.removesuffix(" (deleted)") == datadir and alive(int(name)):
            pids.append(int(name))
    return pids

def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass

def take_down(datadir):
    pids = members(datadir)
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            postmaster = int(f.readline())
    except (OSError, ValueError):
        postmaster = None
    if postmaster is not None and (postmaster in pids or not os.path.isdir("/proc")):
        signal_all([postmaster], signal.SIGQUIT)
    deadline, sig = time.monotonic() + 5, None
    while pids:
        if time.monotonic() > deadline:
            if sig is not None:
                return
            sig, deadline = signal.SIGKILL, time.monotonic() + 5
        if sig is not None:
            signal_all(pids, sig)
        time.sleep(0.05)
        pids = members(datadir)

def main():
    fd, root, datadirs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    got = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    if b"q" in got:
        return
    for datadir in datadirs:
        take_down(datadir)
    shutil.rmtree(root, ignore_errors=True)
    for datadir in datadirs:
        take_down(datadir)

for s in (signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
main()
"""


@final
class _Watchdog:
    """Deletes `root` (after taking down the clusters in `datadirs`) when the
    owner process dies without calling `dismiss()` first."""

    def __init__(self, root: Path, datadirs: Sequence[Path]) -> None:
        read_end, self._write_end = os.pipe()  # both O_CLOEXEC: no other child inherits them
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SRC, str(read_end), str(root),
                 *(str(d) for d in datadirs)],
                pass_fds=(read_end,),
                # Its own session: Ctrl-C (SIGINT to the terminal's process
                # group) or a SIGHUP must not end it before the owner.
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # nor may it hold the owner's pipes open
                stderr=subprocess.DEVNULL,
                cwd="/",
            )  # fmt: skip
        except OSError as exc:
            os.close(self._write_end)
            raise BackendUnavailable(f"cannot start the PostgreSQL watchdog: {exc}") from exc
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def dismiss(self) -> None:
        """Tells the watchdog the owner cleaned up itself, and reaps it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.write(self._write_end, b"q")
        finally:
            os.close(self._write_end)
        try:
            proc.wait(timeout=_WATCHDOG_EXIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_group(
    cmd: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a process group of its own that is killed whole if
    we are interrupted or time out: killing only `runuser` would leave the
    initdb it started writing into a directory we are about to delete."""
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, text=True, start_new_session=True,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(input, timeout=_COMMAND_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


# Servers not yet stopped, and initdb templates: removed at interpreter exit, so
# nothing outlives the process (and their watchdogs remove them should the
# process die without running atexit handlers).
_LIVE: set[EmbeddedPostgres] = set()
_TEMPLATES: dict[tuple[str, str], Path] = {}
_TEMPLATE_DIRS: list[tuple[Path, _Watchdog]] = []


@atexit.register
def _cleanup() -> None:
    for pg in list(_LIVE):
        with contextlib.suppress(Exception):
            pg.stop()
    for d, watchdog in _TEMPLATE_DIRS:
        shutil.rmtree(d, ignore_errors=True)
        watchdog.dismiss()
    _TEMPLATE_DIRS.clear()
    _TEMPLATES.clear()


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
    starts it with pg_ctl, as an unprivileged user when running as root, because
    PostgreSQL refuses root (only the PostgreSQL binaries run as that user). The
    server listens on 127.0.0.1 at a free port and on a unix socket inside the
    temporary directory; the temporary, data and socket directories are 0700.
    Every connection, local or TCP, authenticates with SCRAM-SHA-256 as the
    superuser `coordsim` with a random password made for this cluster alone,
    which only `url` carries (never `repr`, logs or files). `stop()` (or
    leaving the `with` block, or process exit) stops it and deletes the
    directory; if the process dies without doing so (SIGKILL), a watchdog
    process started with the cluster does it.

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
        self._password: str | None = None
        self._running = False
        #: SIGKILLed and not restarted since: its shared memory is still allocated.
        self._crashed = False
        self._run_as: pwd.struct_passwd | None = None
        self._watchdog: _Watchdog | None = None
        self._lock = threading.RLock()

    # --- properties

    @property
    def url(self) -> str:
        """`postgresql://coordsim:PASSWORD@127.0.0.1:PORT/postgres` (a secret:
        print it through `redact_url`)."""
        port = self.port
        if self._password is None:
            raise InvalidUsage("EmbeddedPostgres has not been started")
        return f"postgresql://{_SUPERUSER}:{self._password}@127.0.0.1:{port}/postgres"

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
            self._bindir = find_postgres_bindir(self._bindir_arg)
            self._run_as = self._unprivileged_user()
            # Resolved: the watchdog and `_cluster_pids` compare it with /proc's
            # view of the server's working directory.
            self._tmp = Path(tempfile.mkdtemp(prefix="coordsim-pg-")).resolve()
            _LIVE.add(self)
            try:
                self._watchdog = _Watchdog(self._tmp, [self.datadir])
                self.socket_dir.mkdir(mode=0o700)
                if self._run_as is not None:
                    for path in (self._tmp, self.socket_dir):
                        os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
                self._initdb()
                self._set_password()
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
                for pid in _cluster_pids(self.datadir):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGQUIT)
                with contextlib.suppress(BackendUnavailable):
                    self._wait_cluster_exited()
            finally:
                shutil.rmtree(self._tmp, ignore_errors=True)
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
            pid = self._postmaster_pid()
            if pid is None:
                raise BackendUnavailable(
                    f"no live postmaster found in {self.datadir / 'postmaster.pid'}"
                )
            self._running = False
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
            return _run_group(cmd, cwd=self._require_tmp(), env=env, input=input)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendUnavailable(f"{argv[0]} could not run: {exc}") from exc

    def _initdb(self) -> None:
        """Creates the data directory: a copy of a pristine cluster that initdb made
        once per process (initdb takes a second or more; a copy, milliseconds)."""
        template = self._template()
        # `cp -a` keeps owners and modes (the data directory's 0700 among them),
        # and is ~10x faster than shutil.copytree here.
        cp = _run_group(["cp", "-a", str(template), str(self.datadir)])
        if cp.returncode != 0:
            raise BackendUnavailable(f"cannot copy the initdb template: {cp.stderr.strip()}")

    def _template(self) -> Path:
        key = (str(self._bindir), self._run_as.pw_name if self._run_as is not None else "")
        template = _TEMPLATES.get(key)
        if template is not None and template.is_dir():
            return template
        parent = Path(tempfile.mkdtemp(prefix="coordsim-pg-template-")).resolve()
        template = parent / "data"
        try:
            watchdog = _Watchdog(parent, [template])
        except BaseException:
            shutil.rmtree(parent, ignore_errors=True)
            raise
        _TEMPLATE_DIRS.append((parent, watchdog))
        if self._run_as is not None:
            os.chown(parent, self._run_as.pw_uid, self._run_as.pw_gid)
        # initdb wants a superuser password to set up password authentication;
        # this one is random and forgotten at once: every cluster copied from
        # the template gets its own (`_set_password`) before it first listens.
        pwfile = parent / "pwfile"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            if self._run_as is not None:
                os.chown(pwfile, self._run_as.pw_uid, self._run_as.pw_gid)
            result = self._run(
                [
                    "initdb",
                    "-D",
                    str(template),
                    "-U",
                    _SUPERUSER,
                    f"--pwfile={pwfile}",
                    # Never `trust`: any local user could connect as superuser
                    # and run programs as the server's account (COPY ... PROGRAM).
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
            detail = " | ".join(lines[-3:]) or "no output"
            raise BackendUnavailable(f"initdb failed (exit {result.returncode}): {detail}")
        _TEMPLATES[key] = template
        return template

    def _set_password(self) -> None:
        """Gives this cluster's superuser a fresh random password.

        Done with the single-user backend on the copied data directory, before
        the server first starts: no window in which the cluster listens with
        another password (the template's), no client binary or connection
        needed, and the verifier goes in on stdin (never a command line).
        """
        password = secrets.token_urlsafe(24)  # URL-safe: no quoting in `url`
        verifier = _scram_verifier(password)
        sql = f"ALTER ROLE {_SUPERUSER} PASSWORD '{verifier}'\n"
        argv = ["postgres", "--single", "-D", str(self.datadir), "-c", "exit_on_error=on"]
        if not self._fsync:
            argv += ["-c", "fsync=off"]
        result = self._run([*argv, "postgres"], input=sql)
        if result.returncode != 0:
            lines = [
                ln.strip()
                for ln in (result.stderr or result.stdout).splitlines()
                if ln.strip() and verifier not in ln
            ]
            detail = " | ".join(lines[-3:]) or "no output"
            raise BackendUnavailable(
                f"cannot set the cluster's password (postgres --single exit "
                f"{result.returncode}): {detail}"
            )
        self._password = password

    def _postmaster_pid(self) -> int | None:
        """The pid in `postmaster.pid`, if it is a live process of this cluster."""
        try:
            with (self.datadir / "postmaster.pid").open() as f:
                pid = int(f.readline())
        except (OSError, ValueError):
            return None
        if Path("/proc").is_dir():
            return pid if pid in _cluster_pids(self.datadir) else None
        return pid

    def _wait_cluster_exited(self) -> None:
        """Waits until no process of this cluster is left: `_LINGER_S` for them
        to exit by themselves, then SIGKILL and `_REAP_S` more. Then removes the
        stale `postmaster.pid` and socket lock file: a new postmaster refuses
        to start while the pid they name exists, and an unreaped zombie does
        (a container's init may never reap the orphaned postmaster).

        Raises:
            BackendUnavailable: some process would not exit.
        """
        # Real sleeps, in a sync method that already waits on subprocesses: the
        # processes are real and so is their exit.
        deadline = time.monotonic() + _LINGER_S
        killed = False
        while pids := _cluster_pids(self.datadir):
            if time.monotonic() > deadline:
                if killed:
                    raise BackendUnavailable(
                        f"PostgreSQL processes {pids} of {self.datadir} would not exit"
                    )
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed, deadline = True, time.monotonic() + _REAP_S
            time.sleep(_POLL_S)
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
