"""A throwaway S3-compatible server on 127.0.0.1 (moto's server mode), opened
with `open_s3`, for the tests and the benchmarks.

The server runs as a child process that never outlives its owner: `stop()`,
the context manager and an atexit hook all end it, and it only ever listens on
the loopback interface.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import subprocess
import sys
import tempfile
import time
from typing import IO, TYPE_CHECKING, Final, Self, final

from sim.runtime.errors import CoordsimError
from sim.services.processes import free_port, wait_or_kill

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

__all__ = [
    "DUMMY_AWS_CREDENTIALS",
    "LocalS3Server",
    "LocalS3Unavailable",
    "client_environment",
    "open_s3",
]

#: Credentials for a local server that checks none; set only where none are set.
DUMMY_AWS_CREDENTIALS: Final = {
    "AWS_ACCESS_KEY_ID": "coordsim-test",
    "AWS_SECRET_ACCESS_KEY": "coordsim-test",
}

_HOST: Final = "127.0.0.1"
_STDERR_TAIL: Final = 2000

# `python -m moto.server`, except that moto's own `server: amazon.com` header is
# dropped: werkzeug adds its `Server` too, and aiohttp's strict HTTP parser (used
# under `python -X dev` or without its C extension) rejects the duplicate. If
# moto renames its app class the patch is skipped, not fatal.
_BOOTSTRAP: Final = """
import sys
import moto.server as ms

app = getattr(ms, "DomainDispatcherApplication", None)
if app is not None:
    call = app.__call__

    def __call__(self, environ, start_response):
        def start(status, headers, exc_info=None):
            headers = [(k, v) for k, v in headers if k.lower() != "server"]
            return start_response(status, headers, exc_info)

        return call(self, environ, start)

    app.__call__ = __call__
ms.main(sys.argv[1:])
"""


class LocalS3Unavailable(CoordsimError):
    """The local S3 server could not be started (the message says why)."""


@final
class LocalS3Server:
    """Moto's S3-compatible server in a child process on a free loopback port.

    Starts (and waits until it answers HTTP) in the constructor; raises
    `LocalS3Unavailable` with one line, including the tail of the server's
    stderr, if it does not come up within `startup_timeout` seconds.

    Notes:
        Moto keeps everything in memory; a stopped server's data is gone.
    """

    def __init__(self, *, startup_timeout: float = 20.0, attempts: int = 3) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._port = 0
        # A free port can be taken between our probe and the child's bind, so a
        # child that dies at once is retried on a fresh port.
        failure = "no attempt made"
        for _ in range(max(1, attempts)):
            failure = self._try_start(startup_timeout)
            if not failure:
                atexit.register(self.stop)
                return
            self._reap()
        raise LocalS3Unavailable(f"local S3 server (moto) did not start: {failure}")

    @property
    def endpoint(self) -> str:
        """The server's URL, e.g. `http://127.0.0.1:45123`."""
        return f"http://{_HOST}:{self._port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Ends the server (SIGTERM, then SIGKILL after 5 s). Idempotent."""
        atexit.unregister(self.stop)
        self._reap()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals ----------------------------------------------------------------------

    def _try_start(self, timeout: float) -> str:
        """Starts one child; returns "" once it answers, else why it did not."""
        self._port = free_port(_HOST)
        env = dict(os.environ)
        for name, value in DUMMY_AWS_CREDENTIALS.items():
            env.setdefault(name, value)
        # A file, not a pipe: nobody drains a pipe while the server runs, and a
        # full pipe would stall the server on its request log.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child; _reap closes it
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, "-H", _HOST, "-p", str(self._port)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env=env,
                start_new_session=True,  # a ^C at the terminal is the owner's to handle
            )
        except OSError as exc:
            return f"cannot run {sys.executable} (moto.server): {exc}"
        # Wall-clock time is right here: this waits for a real process, outside any
        # simulation.
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                return f"it exited with code {code}{self._stderr_tail()}"
            if _answers(self._port):
                return ""
            if time.monotonic() >= deadline:
                return f"no answer on {self.endpoint} within {timeout:g}s{self._stderr_tail()}"
            time.sleep(0.05)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            tail = self._stderr.read().decode("utf-8", "replace")
        except OSError:
            return ""
        tail = " | ".join(line.strip() for line in tail.splitlines() if line.strip())
        return f"; stderr: {tail}" if tail else ""

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            wait_or_kill(proc, 5)
        stderr, self._stderr = self._stderr, None
        if stderr is not None:
            stderr.close()


@contextlib.contextmanager
def open_s3(*, startup_timeout: float = 20.0, attempts: int = 3) -> Iterator[LocalS3Server]:
    """The one way to start the local S3 server: yields a running
    `LocalS3Server` (its arguments are the constructor's) with, for the
    duration, the AWS variables its clients need (`client_environment`), and
    ends it on exit. Entering it raises `LocalS3Unavailable` (one line) if the
    server does not come up."""
    with LocalS3Server(startup_timeout=startup_timeout, attempts=attempts) as server, client_environment():
        yield server


@contextlib.contextmanager
def client_environment() -> Iterator[None]:
    """Sets, for the duration, the AWS variables a client of the local server
    needs and the caller has not set: the server checks no credentials but
    botocore wants some, and with none it would ask the EC2 metadata service,
    which is not on this machine."""
    wanted = {**DUMMY_AWS_CREDENTIALS, "AWS_EC2_METADATA_DISABLED": "true"}
    added = [name for name in wanted if name not in os.environ]
    os.environ.update({name: wanted[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _answers(port: int) -> bool:
    """True iff an HTTP server answers a request on 127.0.0.1:`port`."""
    conn = http.client.HTTPConnection(_HOST, port, timeout=1.0)
    try:
        conn.request("GET", "/moto-api/")
        conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        with contextlib.suppress(OSError):
            conn.close()
    return True
