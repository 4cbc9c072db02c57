"""What has no effect is refused (issue 37): a known-bad variant that changes
nothing in the chosen configuration, a configuration field its architecture
ignores, and a `--baseline` that is not a compare run are each exit 2 with one
line saying why, before anything runs or is written."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from coordinator.config import CONFIGURATIONS, KNOWN_BAD_INERT, check_known_bad
from sim.cli.main import main as cli_main
from sim.nemesis.anomaly_spec import coordinator_config, parse_known_bad
from sim.nemesis.matrix import MATRIX
from sim.runtime.staging import staged_dir

if TYPE_CHECKING:
    from pathlib import Path


def _refused(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """Runs `coordsim ARGV`; it must exit 2 with one line on stderr, which is returned."""
    monkeypatch.setattr(sys, "argv", ["coordsim", *argv])
    with pytest.raises(SystemExit) as exc:
        cli_main()
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2, err
    assert len(err) == 1, err
    return err[0]


def test_every_matrix_row_switches_on_a_variant_that_acts() -> None:
    for e in MATRIX:
        if e.variant is not None:
            check_known_bad(coordinator_config(e.config).with_overrides(known_bad=parse_known_bad([e.variant])))


#: (variant, configuration, why): each where the toggle's only reader never runs.
INERT = [
    ("fifo-event-loop", "decoupled", "the decoupled architecture has no event loop"),
    ("skip-confirm-leadership", "event-loop+pg-oracle", "confirm_leadership = false"),
    ("skip-confirm-leadership", "decoupled", "confirm_leadership = false"),
    ("batching-joins-in-flight", "event-loop", "batch_read_ts = false"),
    ("unbounded-group-commits", "event-loop", "commits_in_flight = 0"),
    ("blind-catalog-append", "event-loop+pg-oracle", "only the decoupled architecture appends DDL itself"),
    ("ack-lost-race", "decoupled", "adapters = 1"),
]


def test_every_inert_rule_refuses_somewhere_and_spares_its_matrix_rows() -> None:
    """Each rule names a configuration where its toggle does nothing (else it
    is dead), and none where the matrix shows the toggle caught."""
    assert {v.replace("-", "_") for v, _, _ in INERT} <= set(KNOWN_BAD_INERT)
    configs = [*CONFIGURATIONS, "decoupled-2-adapters"]
    for name, rule in KNOWN_BAD_INERT.items():
        assert any(rule(coordinator_config(c)) for c in configs), f"{name}: refused nowhere"
        assert not [e.config for e in MATRIX if e.variant == name and rule(coordinator_config(e.config))]


@pytest.mark.parametrize(("variant", "config", "why"), INERT)
def test_a_known_bad_variant_without_effect_is_refused(
    variant: str, config: str, why: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    line = _refused(["anomalies", "run", "seed001", "--config", config, "--known-bad", variant], monkeypatch, capsys)
    assert line.startswith(f"coordsim: invalid input: known-bad {variant} has no effect on {config}: "), line
    assert why in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "command",
    [
        ["anomalies", "sweep", "seed001", "--seeds", "2"],
        ["shrink", "seed001"],
        ["spark", "sweep", "seed001", "--seeds", "2"],
    ],
    ids=["anomalies sweep", "shrink", "spark sweep"],
)
def test_every_command_taking_known_bad_refuses_one_without_effect(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    line = _refused([*command, "--known-bad", "fifo-event-loop"], monkeypatch, capsys)
    assert "known-bad fifo-event-loop has no effect on decoupled" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("toml", "expect"),
    [
        ('configurations = ["mine"]\n[variants.mine]\nbase = "decoupled"\nmax_batch = 8\n',
         "max_batch does not apply to mine (decoupled); only to event-loop"),
        ('configurations = ["mine"]\n[variants.mine]\nbase = "event-loop"\ncores = 4\n',
         "cores does not apply to mine (event-loop); only to decoupled"),
        ('configurations = ["decoupled"]\n[overrides.known_bad]\nfifo_event_loop = true\n',
         "known-bad fifo-event-loop has no effect on decoupled"),
        ('configurations = ["mine"]\n[variants.mine]\nbase = "event-loop"\nknown_bad = {ack_lost_race = true}\n',
         "known-bad ack-lost-race has no effect on mine"),
    ],
    ids=["event-loop field on decoupled", "decoupled field on event-loop", "override", "variant"],
)
def test_a_config_file_field_without_effect_is_refused(
    toml: str, expect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    for command in (["config", "show"], ["compare", "--quick"]):
        line = _refused([*command, "-c", "mine.toml"], monkeypatch, capsys)
        assert expect in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


def test_a_baseline_that_is_not_a_compare_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with staged_dir(tmp_path / "checked", "anomalies run") as stage:
        (stage / "results.csv").write_text("not a comparison\n")
    (tmp_path / "mine").mkdir()
    line = _refused(["compare", "--quick", "--baseline", "checked"], monkeypatch, capsys)
    assert line == ("coordsim: invalid input: --baseline checked is not a compare run (it is a `coordsim anomalies "
                    "run` output): name a compare output directory (the newest is coordsim-out/latest-compare)")
    line = _refused(["compare", "--quick", "--baseline", "mine"], monkeypatch, capsys)
    assert "--baseline mine is not a compare run (it is not a coordsim output)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked", "mine"]
