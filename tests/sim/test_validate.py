"""`coordsim validate`: the shipped facts hold (the fast subset here, all of
them in the slow test), its outputs carry the table and each fact's source,
and a bad facts file is one line and exit 2."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from sim.model.validate import EXPERIMENTS, FACTS, Fact, load_facts

COORDSIM = [str(Path(sys.executable).with_name("coordsim"))]


def _validate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COORDSIM, "validate", "-o", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, check=False, timeout=900)  # fmt: skip


def test_the_shipped_facts_are_well_formed_and_cited() -> None:
    facts = load_facts()
    assert len(facts) >= 12
    assert {f.experiment for f in facts} == set(EXPERIMENTS)  # every experiment is used
    for f in facts:
        assert all(v.strip() for v in (f.source, f.mechanism, f.published)), f.id
    ids = {f.id for f in facts}
    for must in ("peeks-faster", "inserts-faster", "updates-slower", "barely-batches",
                 "read-ts-one-query-per-round-trip", "read-ts-wait-two-round-trips",
                 "update-one-write-per-commit", "inserts-batch", "victim-on-loop"):  # fmt: skip
        assert must in ids


def test_holds_reads_the_expectation() -> None:
    def fact(**expect: object) -> Fact:
        return Fact("x", "c", "s", "m", "victim", "v", "p", expect)

    assert fact(above=1.0).holds(1.5)
    assert not fact(above=1.0).holds(1.0)
    assert fact(below=1.0).holds(0.5)
    assert not fact(below=1.0).holds(2.0)
    assert fact(between=[1, 2]).holds(2)
    assert not fact(between=[1, 2]).holds(2.1)
    assert not fact(above=0.0).holds(float("nan"))


def test_quick_subset_holds_and_writes_its_table(tmp_path: Path) -> None:
    proc = _validate(tmp_path, "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("fact"))
    assert [c.strip() for c in header.split("|")] == ["fact", "published", "simulated", "holds"]  # the house style, plain
    quick = [f for f in load_facts() if f.quick]
    with (tmp_path / "out" / "validate.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["id"] for r in rows] == [f.id for f in quick]
    assert all(r["holds"] == "True" for r in rows)
    report = (tmp_path / "out" / "validate.md").read_text()
    assert "seed 000" in report
    assert "Measured:" in report


@pytest.mark.slow
def test_every_shipped_fact_holds(tmp_path: Path) -> None:
    proc = _validate(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"all {len(load_facts())} facts hold" in proc.stdout


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[[fact]]\nid = 'a'\n", "lacks"),
        ("not toml = = 1", "cannot read facts file"),
        (FACTS.read_text().replace('experiment = "victim"', 'experiment = "nope"', 1), "unknown experiment"),
    ],
)
def test_a_bad_facts_file_is_one_line_and_exit_2(tmp_path: Path, text: str, fragment: str) -> None:
    bad = tmp_path / "facts.toml"
    bad.write_text(text)
    proc = _validate(tmp_path, "--facts", str(bad))
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_an_unknown_fact_id_is_exit_2(tmp_path: Path) -> None:
    proc = _validate(tmp_path, "--only", "no-such-fact")
    assert proc.returncode == 2
    assert "unknown fact id" in proc.stderr
