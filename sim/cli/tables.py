"""How a command prints a table: built in the house style (`new_table`, from
`sim.runtime.tablestyle`) and printed with `print_tables`, which gives a pipe
or a log every column at full width instead of folding it at 80. Commands make
tables only through this module (tests/sim/compare/test_tables.py holds them to it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rich.console import Console

from sim.runtime.tablestyle import new_table

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.table import Table

__all__ = ["FULL_WIDTH", "new_table", "plain", "print_tables"]

#: The width a table gets off a terminal: wide enough that none is folded or cut.
FULL_WIDTH: Final = 10_000


def plain(console: Console) -> bool:
    """Whether `console` writes to something other than a terminal, so its
    tables take `new_table(plain=True)`."""
    return not console.is_terminal


def print_tables(tables: Iterable[Table], *, console: Console) -> None:
    """Prints `tables` on `console`. Off a terminal they are printed at their
    natural width, however wide: a console there assumes 80 columns and would
    fold or cut them, and a log is read later at any width."""
    out = console if console.is_terminal else Console(file=console.file, width=FULL_WIDTH, highlight=False)
    for t in tables:
        out.print(t)
