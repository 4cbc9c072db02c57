"""`coordsim doctor` reports Java the way Spark will start it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typer.testing import CliRunner

from sim.cli.main import app

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_a_java_home_without_java_is_reported_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A `java` on PATH does not help: Spark's launcher starts $JAVA_HOME/bin/java.
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nonexistent"))
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"})
    line = next(row for row in result.stdout.splitlines() if "java (spark)" in row)
    assert "missing" in line
    assert "has no bin/java" in line


def test_java_on_path_is_reported_with_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "200"})
    line = next(row for row in result.stdout.splitlines() if "java (spark)" in row)
    assert " ok " in line, line
    assert "version" in line, line


def test_spark_refuses_a_java_home_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`coordsim replay` says why before the JVM would fail with a raw
    `[JAVA_GATEWAY_EXITED]`."""
    from sim.spark.session import java_problem

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nonexistent"))
    assert java_problem() == f"JAVA_HOME={tmp_path / 'nonexistent'} has no bin/java, and Spark starts that one: fix or unset JAVA_HOME"
    monkeypatch.delenv("JAVA_HOME")
    assert java_problem() is None  # the java on PATH
