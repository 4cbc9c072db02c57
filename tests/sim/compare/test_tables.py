"""Tables (issue 33): compare's default table fits 80 columns without folding
or cutting a value, `--wide` has every measure, output that is not a terminal
gets every column at full width, and every command builds its tables in the
one house style (`sim.runtime.tablestyle`)."""

from __future__ import annotations

import ast
import io
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pytest
import typer
from rich.console import Console
from rich.text import Text

from sim.cli.main import app
from sim.cli.tables import new_table, print_tables
from sim.compare.rows import LevelRow
from sim.compare.tables import DEFAULT_HEADERS, WIDE_HEADERS, tables
from sim.runtime.errors import InvalidUsage

ROOT: Final = Path(__file__).resolve().parents[3]
CONFIGS: Final = ("event-loop", "event-loop+pg-oracle", "decoupled")
LEVELS: Final = (1, 4, 16, 64, 256)
STYLE: Final = "sim/runtime/tablestyle.py"


def _row(config: str, c: int, **changes: Any) -> LevelRow:
    """A level with realistic numbers (README's largest: 22,653 ± 1,439 ops/s;
    real mode's slowest milliseconds)."""
    row = LevelRow(
        "insert", config, "virtual", c, 3, 0.2, 123_456, 0, (), 22_653.4, 1_439.2, (22_000.0,), 123_456,
        1_310.72, 2_621.44, 3_145.73, (), (), 1.02, 0.97, 1.02, "valid", mean_ms=1_311.2, stddev_ms=210.33,
        censored=3, littles_law_ratio=0.99,
    )
    return replace(row, **changes)


def _rows() -> list[LevelRow]:
    rows = [_row(cfg, c) for cfg in CONFIGS for c in LEVELS]
    rows[3] = _row("event-loop", 64, steady=False, steady_note="halves differ by 12 %")
    rows[9] = _row("event-loop+pg-oracle", 256, host_bound="coordsim CPU 97 %", errors=1_234,
                   errors_by_code=(("40001", 1_234),))
    return rows


def _render(ts: list[Any], width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    for t in ts:
        console.print(t)
    return console.export_text()


def test_the_default_table_fits_80_columns_and_cuts_nothing() -> None:
    text = _render(tables(_rows(), plain=False, wide=False), 80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    assert "…" not in text
    body = [ln for ln in lines if ln.startswith(CONFIGS)]
    assert len(body) == len(CONFIGS) * len(LEVELS), text  # one line per level: nothing folded
    for ln in body:
        assert ln.split()[0] in CONFIGS, ln
        for value in ("22,653 ± 1,439", " 1,311 ", " 2,621 ", "1,311 ± 210"):
            assert value in ln, ln


def test_the_default_table_marks_a_level_not_to_conclude_from() -> None:
    text = _render(tables(_rows(), plain=False, wide=False), 80)
    line = {ln.split()[0] + " " + ln.split()[1]: ln for ln in text.splitlines() if ln.startswith(CONFIGS)}
    assert line["event-loop 64"].split()[2] == "*"
    assert line["event-loop+pg-oracle 256"].split()[2] == "!"
    assert "1,234" in line["event-loop+pg-oracle 256"]
    assert line["decoupled 64"].split()[2] == "22,653"  # no mark
    assert "* not steady, ! host-bound" in text


def test_numbers_are_right_aligned_and_text_left() -> None:
    for wide in (False, True):
        (t,) = tables(_rows(), plain=False, wide=wide)
        justify = {str(c.header): c.justify for c in t.columns}
        assert justify.pop("config") == "left"
        for head in ("verdict", "steady", "host-bound", "errors"):
            if wide:
                assert justify.pop(head) == "left", head
        assert set(justify.values()) == {"right"}, justify


def test_the_wide_table_has_every_column() -> None:
    (t,) = tables(_rows(), plain=False, wide=True)
    heads = [str(c.header) for c in t.columns]
    assert heads == list(WIDE_HEADERS)
    assert set(DEFAULT_HEADERS) <= set(heads)
    for want in ("ops", "p99.9\nms", "lat. n", "censored", "Little's\nlaw", "oracle\nq/op", "loop\nbusy",
                 "loop\nmsg/op", "verdict", "steady", "host-bound"):
        assert want in heads, want
    text = _render([t], 400)
    for value in ("123,456", "3,146", "0.99", "97%", "no: halves differ by 12 %", "coordsim CPU 97 %",
                  "1,234 (1.00%: 40001 1234)", "valid"):
        assert value in text, value


def test_off_a_terminal_the_tables_are_printed_whole() -> None:
    """The CLI gives a pipe the wide, plain table; `print_tables` prints it at
    its own width, one line per row, however narrow the console thought it was."""
    buf = io.StringIO()
    console = Console(file=buf, width=80)
    assert not console.is_terminal
    print_tables(tables(_rows(), plain=True, wide=True), console=console)
    lines = buf.getvalue().splitlines()
    assert max(map(len, lines)) > 200
    assert "…" not in buf.getvalue()
    header = next(ln for ln in lines if ln.startswith("config"))
    assert [c.strip() for c in header.split("|")] == [h.replace("\n", " ") for h in WIDE_HEADERS]
    assert lines[lines.index(header) + 1].startswith("-----")
    body = [ln for ln in lines if ln.startswith(CONFIGS)]
    assert len(body) == len(CONFIGS) * len(LEVELS)
    assert all(ln.count("|") == len(WIDE_HEADERS) - 1 for ln in body)
    assert any("no: halves differ by 12 %" in ln and ln.startswith("event-loop ") for ln in body)


def test_a_terminal_table_is_printed_at_the_terminal_width() -> None:
    console = Console(file=io.StringIO(), width=80, force_terminal=True, record=True)
    print_tables(tables(_rows(), plain=False, wide=False), console=console)
    assert max(map(len, console.export_text().splitlines())) <= 80


def test_the_house_style() -> None:
    t = new_table("name", "two\nlines", plain=True, numeric=("two\nlines",), title="[not markup]")
    assert [str(c.header) for c in t.columns] == ["name", "two lines"]
    t.add_row("[bold]x[/bold]", "1")
    t.add_row(Text("styled", style="red"), "2")  # a renderable is kept as it is
    text = _render([t], 80)
    for shown in ("[bold]x[/bold]", "[not markup]", "styled"):  # cells are data, not markup
        assert shown in text
    with pytest.raises(InvalidUsage, match="numeric"):
        new_table("a", numeric=("b",))


def test_compare_and_run_take_wide() -> None:
    root = typer.main.get_group(app)
    load_all = getattr(root, "load_all", None)
    if load_all is not None:
        load_all()  # the commands' modules are imported lazily
    for name in ("compare", "run"):
        cmd = root.commands[name]
        assert any("--wide" in p.opts for p in cmd.params), name


def _table_calls(path: Path) -> list[str]:
    """Where `path` builds a rich table or picks a box itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == "Table":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: Table(...)")
        elif isinstance(node, ast.ImportFrom) and node.module == "rich" and any(a.name == "box" for a in node.names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from rich import box")
    return found


def test_every_command_uses_the_house_style() -> None:
    """Only the style module makes a `rich.table.Table`; commands go through
    `sim.cli.tables` (print_tables gives a pipe the full width)."""
    found = [hit for p in sorted((ROOT / "sim").rglob("*.py")) if p != ROOT / STYLE for hit in _table_calls(p)]
    assert not found, "\n".join(found)
    assert _table_calls(ROOT / STYLE)  # the check sees a Table( where there is one
    for p in sorted((ROOT / "sim" / "cli").glob("*.py")):
        text = p.read_text()
        if "new_table(" in text and p.name != "tables.py":
            assert "print_tables(" in text, f"{p.name} builds a table but does not print it with print_tables"
        # A Markdown table printed by hand is the third style issue 33 removed.
        assert '" | ".join(' not in text, f"{p.name} prints a Markdown table by hand"
