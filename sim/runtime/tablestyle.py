"""The one table style of every coordsim command (issue 33): headers over a
rule, no frame, numbers right-aligned, text wrapped rather than cut; off a
terminal, ASCII borders and one line per row. It lives in the foundation, not
in `sim.cli`, because compare's tables are built in `sim.compare` and nothing
outside `sim.cli` may import it (DESIGN.md §3); commands reach it through
`sim.cli.tables`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from rich import box
from rich.table import Table
from rich.text import Text

from sim.runtime.errors import InvalidUsage

if TYPE_CHECKING:
    from collections.abc import Collection

    from rich.console import RenderableType
    from rich.style import StyleType

__all__ = ["new_table"]


def new_table(
    *headers: str,
    title: str | None = None,
    caption: str | None = None,
    plain: bool = False,
    numeric: Collection[str] = (),
) -> Table:
    """A table in the house style.

    On a terminal: no frame and one space of padding (collapsed, so columns
    are two apart) — width is what an 80-column terminal lacks. `plain`
    (stdout is a pipe, a file or a log): psql's aligned format, `|` between
    columns and `-+-` under the headers, and no cell wrapped, so every row
    stays one line for grep and the reader of a log of any width. Text is
    taken as it is, never as rich markup: cells hold URLs, SQL and anomaly
    names, whose brackets are not styles.

    Args:
        headers: column headers; a newline breaks one over two lines on a
            terminal and is a space when `plain`.
        title: printed above the table.
        caption: printed below it (a legend of the markers used).
        plain: the format for output that is not a terminal.
        numeric: the headers (as given) of columns of numbers:
            right-aligned and never wrapped.

    Raises:
        InvalidUsage: `numeric` names a header the table does not have.
    """
    unknown = sorted(set(numeric) - set(headers))
    if unknown:
        raise InvalidUsage(f"numeric columns {unknown} are not among the headers {list(headers)}")
    table = _HouseTable(
        title=None if title is None else Text(title, style="table.title"),
        caption=None if caption is None else Text(caption, style="table.caption"),
        box=box.ASCII if plain else box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=not plain,
    )
    for h in headers:
        number = h in numeric
        table.add_column(
            h.replace("\n", " ") if plain else h,
            justify="right" if number else "left",
            no_wrap=number or plain,
            overflow="fold",  # never an ellipsis: a cut value reads as a different one
        )
    return table


@final
class _HouseTable(Table):
    """A table whose string cells are plain text (`new_table`)."""

    def add_row(
        self, *renderables: RenderableType | None, style: StyleType | None = None, end_section: bool = False
    ) -> None:
        cells = [Text(r) if isinstance(r, str) else r for r in renderables]
        super().add_row(*cells, style=style, end_section=end_section)
