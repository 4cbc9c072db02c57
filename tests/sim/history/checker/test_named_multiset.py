"""The named checker's element rules take a value to name its one write; on a
table where a value is inserted twice that premise fails, and they must stay
silent there (the `table` checker judges it as a multiset)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.history.checker import check_history, check_named
from sim.history.import_edn import read_edn

if TYPE_CHECKING:
    from pathlib import Path

#: Two inserts of 1: the read between them sees one copy, the one after, two.
#: Legal for a multiset; the named rules used to call the first read
#: read-from-future (its value's "writer" was the second insert).
TWICE = """\
{:index 0, :time 0, :type :invoke, :process 0, :f :add, :value ["t" 1]}
{:index 1, :time 10, :type :ok, :process 0, :f :add, :value ["t" 1]}
{:index 2, :time 15, :type :invoke, :process 1, :f :read, :value ["t" nil]}
{:index 3, :time 20, :type :ok, :process 1, :f :read, :value ["t" #{1}]}
{:index 4, :time 30, :type :invoke, :process 2, :f :add, :value ["t" 1]}
{:index 5, :time 40, :type :ok, :process 2, :f :add, :value ["t" 1]}
{:index 6, :time 45, :type :invoke, :process 3, :f :read, :value ["t" nil]}
{:index 7, :time 50, :type :ok, :process 3, :f :read, :value ["t" [1 1]]}
"""


def test_named_skips_tables_where_a_value_is_written_twice(tmp_path: Path) -> None:
    (tmp_path / "h.edn").write_text(TWICE)
    h, events = read_edn(tmp_path / "h.edn")
    named = check_named(h)
    assert named.outcome.value == "valid", named.anomalies
    assert named.stats["multiset-tables"] == 1
    report = check_history(h, events)
    assert report.outcome.value == "valid", report.names


def test_the_same_history_with_a_missing_copy_is_caught_by_the_table_checker(tmp_path: Path) -> None:
    (tmp_path / "h.edn").write_text(TWICE.replace("[1 1]", "#{1}"))
    h, events = read_edn(tmp_path / "h.edn")
    report = check_history(h, events)
    assert report.outcome.value == "invalid"
    assert "not-linearizable" in report.names
