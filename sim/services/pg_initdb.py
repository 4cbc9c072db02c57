"""Making an embedded PostgreSQL cluster's data directory: a copy of a pristine
cluster that initdb made once per process (initdb takes a second or more; a
copy, milliseconds), whose superuser then gets a password of its own.

Protects: no cluster ever listens with `trust` authentication or with another
cluster's password, and no password reaches a file or a command line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import shutil
from typing import TYPE_CHECKING, Final, Protocol

from sim.runtime import owners
from sim.services.errors import BackendUnavailable
from sim.services.pg_processes import Watchdog
from sim.services.processes import run_group

if TYPE_CHECKING:
    import pwd
    import subprocess
    from collections.abc import Sequence
    from pathlib import Path

__all__ = [
    "SUPERUSER",
    "TEMPLATE_DIRS",
    "RunBinary",
    "copy_template",
    "remove_templates",
    "scram_verifier",
    "set_password",
    "template",
]

#: The superuser every embedded cluster has (its password is per cluster).
SUPERUSER: Final = "coordsim"

# initdb templates, by (bindir, account): removed at interpreter exit
# (`remove_templates`), and by their watchdogs should the process die without
# running atexit handlers.
_TEMPLATES: dict[tuple[str, str], Path] = {}
#: Each template's parent directory, with the watchdog that deletes it.
TEMPLATE_DIRS: list[tuple[Path, Watchdog]] = []


class RunBinary(Protocol):
    """Runs a PostgreSQL binary of the cluster's installation (as its account)."""

    def __call__(
        self, argv: Sequence[str], *, input: str | None = None
    ) -> subprocess.CompletedProcess[str]: ...


def template(bindir: Path, run_as: pwd.struct_passwd | None, run: RunBinary) -> Path:
    """The data directory of a pristine cluster made by `bindir`'s initdb as
    `run_as` (made on first use, then reused).

    Raises:
        BackendUnavailable: initdb failed (the message carries its last lines).
    """
    key = (str(bindir), run_as.pw_name if run_as is not None else "")
    made = _TEMPLATES.get(key)
    if made is not None and made.is_dir():
        return made
    parent = owners.private_tmpdir("coordsim-pg-template-", "postgres-template")
    made = parent / "data"
    try:
        watchdog = Watchdog(parent, [made])
    except BaseException:
        shutil.rmtree(parent, ignore_errors=True)
        raise
    TEMPLATE_DIRS.append((parent, watchdog))
    if run_as is not None:
        os.chown(parent, run_as.pw_uid, run_as.pw_gid)
    # initdb wants a superuser password to set up password authentication;
    # this one is random and forgotten at once: every cluster copied from
    # the template gets its own (`set_password`) before it first listens.
    pwfile = parent / "pwfile"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        if run_as is not None:
            os.chown(pwfile, run_as.pw_uid, run_as.pw_gid)
        result = run(
            [
                "initdb",
                "-D",
                str(made),
                "-U",
                SUPERUSER,
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
        raise BackendUnavailable(
            f"initdb failed (exit {result.returncode}): {_output_tail(result)}"
        )
    _TEMPLATES[key] = made
    return made


def copy_template(made: Path, datadir: Path) -> None:
    """Creates `datadir` as a copy of the template `made`.

    Raises:
        BackendUnavailable: the copy failed.
    """
    # `cp -a` keeps owners and modes (the data directory's 0700 among them),
    # and is ~10x faster than shutil.copytree here.
    cp = run_group(["cp", "-a", str(made), str(datadir)])
    if cp.returncode != 0:
        raise BackendUnavailable(f"cannot copy the initdb template: {cp.stderr.strip()}")


def remove_templates() -> None:
    """Deletes every template and dismisses its watchdog (at interpreter exit)."""
    for d, watchdog in TEMPLATE_DIRS:
        owners.remove_tree(d)  # its owner record last
        watchdog.dismiss()
    TEMPLATE_DIRS.clear()
    _TEMPLATES.clear()


def set_password(run: RunBinary, datadir: Path, *, fsync: bool) -> str:
    """Gives the superuser of the cluster in `datadir` (not running) a fresh
    random password, and returns it.

    Done with the single-user backend on the copied data directory, before
    the server first starts: no window in which the cluster listens with
    another password (the template's), no client binary or connection
    needed, and the verifier goes in on stdin (never a command line).

    Raises:
        BackendUnavailable: the single-user backend failed.
    """
    password = secrets.token_urlsafe(24)  # URL-safe: no quoting in a URL
    verifier = scram_verifier(password)
    sql = f"ALTER ROLE {SUPERUSER} PASSWORD '{verifier}'\n"
    argv = ["postgres", "--single", "-D", str(datadir), "-c", "exit_on_error=on"]
    if not fsync:
        argv += ["-c", "fsync=off"]
    result = run([*argv, "postgres"], input=sql)
    if result.returncode != 0:
        raise BackendUnavailable(
            f"cannot set the cluster's password (postgres --single exit "
            f"{result.returncode}): {_output_tail(result, hide=verifier)}"
        )
    return password


def scram_verifier(password: str, *, iterations: int = 4096) -> str:
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


def _output_tail(result: subprocess.CompletedProcess[str], *, hide: str | None = None) -> str:
    """The last three non-empty lines a binary wrote (stderr, else stdout),
    leaving out any line that contains `hide`."""
    lines = [
        ln.strip()
        for ln in (result.stderr or result.stdout).splitlines()
        if ln.strip() and (hide is None or hide not in ln)
    ]
    return " | ".join(lines[-3:]) or "no output"
