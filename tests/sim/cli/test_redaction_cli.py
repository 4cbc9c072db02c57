"""The CLI never prints or stores a password: `coordsim config show`, the
config's own TOML, and the one-line errors of `coordsim`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from sim.cli.main import app, main
from sim.load.run_config import RunConfig

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "Hunter2-pa@ss:w/rd"  # raw '@', ':' and '/' in the userinfo
URL = f"postgresql://coordsim:{SECRET}@db.example:5432/app?sslpassword=k3y-Hunter2&sslmode=require"
REDACTED = "postgresql://coordsim:***@db.example:5432/app?sslpassword=***&sslmode=require"


def _config_file(tmp_path: Path) -> Path:
    f = tmp_path / "f.toml"
    f.write_text(f'mode = "virtual"\npostgres_url = "{URL}"\nblob_url = "s3://b/p?endpoint=http://AKIA:Hunter2@minio:9000"\n')
    return f


def test_config_show_prints_the_redacted_url(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["config", "show", "--config-file", str(_config_file(tmp_path))])
    assert r.exit_code == 0, r.output
    assert "Hunter2" not in r.output
    assert f'postgres_url = "{REDACTED}"' in r.output
    assert 'blob_url = "s3://b/p?endpoint=http://AKIA:***@minio:9000"' in r.output
    assert 'mode = "virtual"' in r.output


def test_the_config_redacts_itself(tmp_path: Path) -> None:
    cfg = RunConfig.from_toml(_config_file(tmp_path))
    assert cfg.postgres_url == URL  # the value itself keeps the password
    assert "Hunter2" not in cfg.to_toml()
    assert cfg.redacted().postgres_url == REDACTED
    assert "Hunter2" in cfg.to_toml(redact=False)


def test_errors_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad location URL: the one-line error names it without the password."""
    monkeypatch.setattr(sys, "argv", ["coordsim", "location", "check", URL.replace("sslmode", "nope")])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown parameter 'nope'" in err
    assert "Hunter2" not in err
    assert "coordsim:***@db.example" in err


def test_compare_stores_the_redacted_config(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        ["compare", "--config-file", str(_config_file(tmp_path)), "--workloads", "select-one",
         "--configs", "event-loop", "--concurrency", "1", "--ops", "1", "--warmup", "1", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert "Hunter2" not in r.output
    stored = (out / "config.toml").read_text()
    assert f'postgres_url = "{REDACTED}"' in stored
    leaks = [p for p in out.rglob("*") if p.is_file() and b"Hunter2" in p.read_bytes()]
    assert leaks == []
