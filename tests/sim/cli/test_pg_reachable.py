"""The exit code of a configured Postgres that cannot be used (issue 38, item 1;
DESIGN.md §9): a malformed COORDSIM_POSTGRES_URL is bad input, exit 2; a
well-formed one whose server is down, unknown or refuses the password is an
external dependency that failed, exit 1. Either way one line, no traceback, the
password redacted. `sim.cli.pg.check_reachable` is what decides, before any
run starts."""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import pytest

from sim.cli.main import main
from sim.cli.pg import check_reachable
from sim.runtime.errors import Determinate, InvalidUsage

if TYPE_CHECKING:
    from pathlib import Path

_PASSWORD: Final = "Zq7-s3cret-Vw"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # closed again: connecting is refused at once


def _dead() -> str:
    return f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:{_dead_port()}/postgres"


#: Malformed: not a Postgres URL, a port that is no port, a parameter the
#: driver refuses, a URL that does not split.
MALFORMED: Final = [
    pytest.param(f"http://coordsim:{_PASSWORD}@127.0.0.1:5432/postgres", "postgres:// or postgresql://", id="scheme"),
    pytest.param("localhost:5432", "postgres:// or postgresql://", id="no-scheme"),
    pytest.param(f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:notaport/postgres", "its port is not a number",
                 id="port-not-a-number"),
    pytest.param(f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:99999/postgres", "its port is not a number",
                 id="port-out-of-range"),
    pytest.param(f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:1/postgres?sslmode=bogus", "sslmode",
                 id="driver-refuses-a-parameter"),
    pytest.param(f"postgresql://coordsim:{_PASSWORD}@[::1/postgres", "malformed URL", id="does-not-split"),
]


def test_a_dead_server_is_an_external_failure() -> None:
    with pytest.raises(Determinate, match=r"cannot reach Postgres at postgresql://coordsim:\*\*\*@127\.0\.0\.1") as e:
        check_reachable(_dead(), timeout=5, verb="reach")
    assert _PASSWORD not in str(e.value)


def test_an_unknown_host_is_an_external_failure() -> None:
    """Well-formed, but nothing answers to the name (DNS): the user's typo
    and a resolver that is down look the same from here."""
    with pytest.raises(Determinate, match="cannot reach Postgres"):
        check_reachable("postgresql://coordsim@coordsim-no-such-host.invalid/postgres", timeout=5, verb="reach")


@pytest.mark.parametrize(("url", "why"), MALFORMED)
def test_a_malformed_url_is_bad_input(url: str, why: str) -> None:
    with pytest.raises(InvalidUsage, match="malformed") as e:
        check_reachable(url, timeout=5, verb="reach")
    assert why in str(e.value)
    assert _PASSWORD not in str(e.value)


def _coordsim(args: list[str], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              capfd: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`coordsim ARGS` with COORDSIM_POSTGRES_URL=`url`, in process (the CLI's
    own exit-code mapping, sim/cli/main.py): its exit code and stderr lines."""
    monkeypatch.setenv("COORDSIM_POSTGRES_URL", url)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["coordsim", *args])
    capfd.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    assert _PASSWORD not in err, err
    code = exit_.value.code
    assert isinstance(code, int), code
    return code, err.strip().splitlines()


#: The commands that check the configured server before they run.
COMMANDS: Final = [
    pytest.param(["anomalies", "run", "seed001", "--mode", "real", "-o", "out"], "cannot use Postgres", id="anomalies"),
    pytest.param(["compare", "--mode", "real", "-w", "select-one", "--configs", "decoupled", "--concurrency", "1",
                  "--repeat", "1", "-T", "0.1", "--warmup", "0", "-o", "out"], "cannot reach Postgres", id="compare"),
]


@pytest.mark.parametrize(("args", "needle"), COMMANDS)
def test_a_dead_configured_server_exits_1(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    code, lines = _coordsim(args, _dead(), tmp_path, monkeypatch, capfd)
    assert code == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("coordsim: error: "), lines
    assert needle in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing is written for a run that did not start"


@pytest.mark.parametrize(("args", "needle"), COMMANDS)
def test_a_malformed_configured_url_exits_2(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    url = f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:notaport/postgres"
    code, lines = _coordsim(args, url, tmp_path, monkeypatch, capfd)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("coordsim: invalid input: malformed Postgres URL"), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.postgres
@pytest.mark.parametrize(("args", "needle"), COMMANDS)
def test_a_refused_password_exits_1(
    args: list[str], needle: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A live server that refuses the password: the server is there, the
    dependency still failed (not a malformed URL)."""
    url = f"postgresql://coordsim:{_PASSWORD}@127.0.0.1:{urlsplit(pg_url).port}/postgres"
    code, lines = _coordsim(args, url, tmp_path, monkeypatch, capfd)
    assert code == 1, lines
    assert len(lines) == 1, lines
    assert needle in lines[0], lines
    assert "password" in lines[0].lower(), lines
