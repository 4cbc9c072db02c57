"""No part of a password ever reaches an output (issue 38, item 6).

URLs whose passwords hold each reserved character (`@ : / ? # % [ ]`), raw and
percent-encoded, are given to the commands that take a Postgres URL — against
the embedded server with a wrong password, and against a dead server (a
closed port). Nothing of the password (no run of three or more of its
characters, as written in the URL or decoded) may appear in stdout, stderr or
any file written. The drivers parse such URLs otherwise than we do and echo
pieces of them (`bad query field: 'Xv?Zw@…'`): `sim.runtime.redact.redact_error`
is what hides those.

Each command runs in process with the redaction's memory emptied first, as in a
fresh process (`forget_secrets`); one case of three commands also runs as a
real subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlsplit

import pytest

from sim.cli.main import main
from sim.runtime.redact import REDACTED, forget_secrets, redact_error, redact_url, remember_secret

if TYPE_CHECKING:
    from pathlib import Path

RESERVED: Final = "@:/?#%[]"
_COORDSIM: Final = [sys.executable, "-c", "from sim.cli.entry import main; main()"]


def _password(c: str) -> str:
    # Every three consecutive characters of it hold `c`: an innocent line
    # cannot hold one by chance, so any found is a leak.
    return f"Qj{c}Xv{c}Zw"


def _pieces(*forms: str) -> set[str]:
    return {f[i:j] for f in forms for i in range(len(f)) for j in range(i + 3, len(f) + 1)}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: nothing listens there




def _commands(url: str, out: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """(argv, environment) of every command that takes a Postgres URL."""
    return {
        "compare": (["compare", "--mode", "real", "-w", "select-one", "--configs", "decoupled",
                     "--concurrency", "1", "--repeat", "1", "-T", "0.1", "--warmup", "0", "-o", str(out / "cmp")],
                    {"COORDSIM_POSTGRES_URL": url}),
        "calibrate": (["calibrate", "--samples", "5", "--force", "-o", str(out / "p.toml")],
                      {"COORDSIM_POSTGRES_URL": url}),
        "location": (["location", "check", url, "--kind", "consensus"], {}),
        "catalog": (["catalog", "dump", "--location", f"persist+{url}?blob=file://{out / 'blob'}",
                     "--target", str(out / "dump.json")], {}),
    }


def _leaks(pieces: set[str], texts: dict[str, str]) -> list[str]:
    return sorted(f"{where}: {p!r}" for where, text in texts.items() for p in pieces if p in text)


def _written(root: Path) -> dict[str, str]:
    return {str(p): p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()}


CASES: Final = [(c, encoded) for c in RESERVED for encoded in (False, True)]


@pytest.mark.postgres
@pytest.mark.parametrize("server", ["wrong-password", "dead"])
@pytest.mark.parametrize(("c", "encoded"), CASES, ids=[f"{c}-{'enc' if e else 'raw'}" for c, e in CASES])
def test_no_piece_of_a_password_reaches_any_output(
    c: str, encoded: bool, server: str, pg_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:
    password = _password(c)
    in_url = quote(password, safe="") if encoded else password
    port = urlsplit(pg_url).port if server == "wrong-password" else _closed_port()
    url = f"postgresql://coordsim:{in_url}@127.0.0.1:{port}/postgres"
    pieces = _pieces(password, in_url)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    for name, (args, env) in _commands(url, tmp_path / "out").items():
        if name == "calibrate":
            continue  # compare's way to the server, and a second of host sampling: once, below
        (tmp_path / "out").mkdir(exist_ok=True)
        forget_secrets()  # as a fresh process: no help from an earlier command
        with monkeypatch.context() as m:
            m.delenv("COORDSIM_POSTGRES_URL", raising=False)
            for k, v in env.items():
                m.setenv(k, v)
            m.setattr(sys, "argv", ["coordsim", *args])
            with pytest.raises(SystemExit) as exit_:
                main()
        got = capfd.readouterr()
        assert exit_.value.code not in (0, None), f"{name}: {got.err}"
        assert got.err.strip(), f"{name} failed without a word"
        assert "Traceback" not in got.err, got.err
        leaks = _leaks(pieces, {f"{name} stdout": got.out, f"{name} stderr": got.err, **_written(tmp_path)})
        assert not leaks, f"{url}: {leaks}\n{got.err}"


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["compare", "location", "calibrate"])
def test_no_piece_leaks_from_a_fresh_process(command: str, pg_url: str, tmp_path: Path) -> None:
    """The same, as the user runs it: the process has remembered nothing."""
    password = _password("?")  # raw: asyncpg and urllib echo `Xv?Zw@…`
    url = f"postgresql://coordsim:{password}@127.0.0.1:{urlsplit(pg_url).port}/postgres"
    args, env = _commands(url, tmp_path)[command]
    run_env = {k: v for k, v in os.environ.items() if k not in ("COORDSIM_POSTGRES_URL", "PGPASSWORD")}
    r = subprocess.run([*_COORDSIM, *args], env={**run_env, **env, "COLUMNS": "300"}, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode in (1, 2), r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "postgres" in r.stderr.strip().splitlines()[-1].lower(), r.stderr
    assert not _leaks(_pieces(password), {"stdout": r.stdout, "stderr": r.stderr, **_written(tmp_path)}), r.stderr


# --- the function itself ---------------------------------------------------------------------


@pytest.fixture
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COORDSIM_POSTGRES_URL", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)


@pytest.mark.usefixtures("_clean_env")
def test_a_piece_a_parser_cut_out_is_hidden() -> None:
    redact_url("postgresql://u:Zq?Wv?Kx@h:5/db")  # shown once: remembered
    assert redact_error("bad query field: 'Wv?Kx@h:5/db'") == f"bad query field: '{REDACTED}@h:5/db'"
    assert redact_error(ValueError("invalid literal for int() with base 10: 'Zq?Wv'")) == (
        f"ValueError: invalid literal for int() with base 10: '{REDACTED}'"
    )


@pytest.mark.usefixtures("_clean_env")
def test_innocent_letters_inside_a_password_are_kept() -> None:
    """Only pieces a parser may cut (from an end or a delimiter) are hidden:
    `unt` of `Hunter2-pa@ss` is no reason to mangle every `RuntimeError`."""
    remember_secret("Hunter2-pa@ss")
    assert redact_error(RuntimeError("boom")) == "RuntimeError: boom"
    assert redact_error("Hunter2-pa and ss") == f"{REDACTED} and ss"


@pytest.mark.usefixtures("_clean_env")
def test_encoded_and_decoded_forms_are_hidden() -> None:
    redact_url("postgresql://u:Zq%40Wv%3AKx@h/db")
    assert redact_error("saw Zq@Wv:Kx and Zq%40Wv%3AKx") == f"saw {REDACTED} and {REDACTED}"


@pytest.mark.usefixtures("_clean_env")
def test_the_environment_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", "postgresql://u:Ab/Cd/Ef@h/db")
    monkeypatch.setenv("PGPASSWORD", "Gh#Ij#Kl")
    assert redact_error("port 'Ab' and 'Gh#Ij' and fine") == f"port 'Ab' and '{REDACTED}' and fine"
    assert redact_error("host Cd/Ef@h") == f"host {REDACTED}@h"


@pytest.mark.usefixtures("_clean_env")
def test_short_secrets_are_left_to_the_patterns() -> None:
    remember_secret("ab")
    assert redact_error("ab abc") == "ab abc"
