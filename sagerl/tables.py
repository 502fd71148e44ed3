"""Terminal tables that fit the terminal: no cell is ever wrapped onto two lines.

Every table sagerl prints (``make demo``'s before/after table, ``sagerl eval``, ``sagerl compare``,
``sagerl study``) is a :class:`FittedTable`: rows with a label, columns with a header, and cells that are
text, numbers or :class:`Estimate` values (a value with its 95% CI). The layout is chosen when the table
is printed, for the width it is printed at (an 80-column terminal, a wide one, a file):

1. one line per row, each estimate as ``4.3 [1.6, 7.8]``, when that fits;
2. else each estimate's CI on a row of its own under the values (``4.3`` over ``[1.6, 7.8]``), which
   about halves the width;
3. else the columns split into consecutive tables, each repeating the row labels; ``groups`` keeps
   columns that belong together (one data set's pass@k) in one table where they fit.

Headers wrap at spaces only, never inside a word, and never wider than their column needs. A caller
builds the table once and prints it with ``console.print(table)``; tests render it at a given width
with :func:`render_text`.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Estimate", "FittedTable", "format_cell", "render_text"]


@dataclass(frozen=True)
class Estimate:
    """A value with an optional 95% interval, printed with ``digits`` decimals (in the caller's units)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    digits: int = 1

    @property
    def has_interval(self) -> bool:
        return (
            self.low is not None
            and self.high is not None
            and not (math.isnan(self.low) or math.isnan(self.high))
            and (self.low, self.high) != (self.value, self.value)
        )

    def value_text(self) -> str:
        if self.value is None or math.isnan(self.value):
            return "—"
        return f"{self.value:.{self.digits}f}"

    def interval_text(self) -> str:
        return f"[{self.low:.{self.digits}f}, {self.high:.{self.digits}f}]" if self.has_interval else ""


Cell = Estimate | str | int | float | None
"""What a table cell may hold: an :class:`Estimate`, text, a number, or None (printed ``—``)."""


def format_cell(cell: Cell, inline: bool = True) -> tuple[str, str]:
    """(text on the value row, text on the CI row); inline puts an estimate's CI beside its value."""
    if isinstance(cell, Estimate):
        value, interval = cell.value_text(), cell.interval_text()
        if inline:
            return (f"{value} {interval}" if interval and value != "—" else value), ""
        return value, interval if value != "—" else ""
    if cell is None:
        return "—", ""
    if isinstance(cell, float):
        return ("—" if math.isnan(cell) else f"{cell:g}"), ""
    return str(cell), ""


class FittedTable:
    """A table whose layout fits the width it is printed at (see the module docstring).

    Args:
        title: printed above the table (bold); with the column split, each part's title says which part.
        label: the header of the row-label column.
        columns: one header per data column; ``\\n`` forces a line break.
        rows: (row label, cells), each row with one cell per column.
        groups: optional sizes of consecutive column groups to keep together (they must add up to the
            number of columns); default: any split.
        caption: printed under the last table (dim), e.g. a note on units.

    Raises:
        ValueError: a row with another number of cells than columns, or groups that do not add up.
    """

    def __init__(
        self,
        title: str,
        label: str,
        columns: Sequence[str],
        rows: Sequence[tuple[str, Sequence[Cell]]],
        *,
        groups: Sequence[int] | None = None,
        caption: str | None = None,
    ) -> None:
        self.title, self.label, self.caption = title, label, caption
        self.columns = list(columns)
        self.rows = [(str(name), list(cells)) for name, cells in rows]
        for name, cells in self.rows:
            if len(cells) != len(self.columns):
                raise ValueError(f"row {name!r} has {len(cells)} cells for {len(self.columns)} columns")
        self.groups = list(groups) if groups else [1] * len(self.columns)
        if sum(self.groups) != len(self.columns) or any(g < 1 for g in self.groups):
            raise ValueError(f"column groups {self.groups} do not add up to {len(self.columns)} columns")

    # -- layout -------------------------------------------------------------------------------------
    def _table(self, indices: Sequence[int], inline: bool) -> Table:
        texts = {i: [format_cell(cells[i], inline) for _, cells in self.rows] for i in indices}
        table = Table(show_edge=False, pad_edge=False, header_style="bold", box=_box())
        table.add_column(self.label, no_wrap=True, style="bold")
        for i in indices:
            widest = max((len(t) for pair in texts[i] for t in pair), default=1)
            table.add_column(_wrap_header(self.columns[i], widest), justify="right", no_wrap=True)
        for r, (name, _) in enumerate(self.rows):
            table.add_row(name, *(texts[i][r][0] for i in indices))
            intervals = [texts[i][r][1] for i in indices]
            if any(intervals):
                table.add_row("", *(Text(t, style="dim") for t in intervals))
        return table

    def _parts(self, console: Console, width: int, inline: bool) -> list[list[int]] | None:
        """Consecutive column index lists whose tables fit ``width``; None when one column alone does not."""
        units, start = [], 0
        for size in self.groups:
            units.append(list(range(start, start + size)))
            start += size
        parts: list[list[int]] = []
        current: list[int] = []
        for unit in units:
            if self._fits(console, current + unit, width, inline):
                current += unit
                continue
            if current and self._fits(console, unit, width, inline):
                parts.append(current)
                current = list(unit)
                continue
            for i in unit:  # a group too wide on its own is split column by column
                if self._fits(console, current + [i], width, inline):
                    current.append(i)
                    continue
                if current:
                    parts.append(current)
                if not self._fits(console, [i], width, inline):
                    return None
                current = [i]
        if current:
            parts.append(current)
        return parts

    def _fits(self, console: Console, indices: Sequence[int], width: int, inline: bool) -> bool:
        return natural_width(console, self._table(indices, inline)) <= width

    def tables(self, console: Console, width: int) -> list[tuple[str, Table]]:
        """The (title, table) parts of the layout for ``width`` columns."""
        every = list(range(len(self.columns)))
        for inline in (True, False):
            if self._fits(console, every, width, inline):
                return [(self.title, self._table(every, inline))]
        parts = self._parts(console, width, inline=False)
        if parts is None:  # narrower than one column: one column a table, rich crops what is left
            parts = [[i] for i in every]
        n = len(parts)
        return [(f"{self.title} ({k}/{n})", self._table(p, False)) for k, p in enumerate(parts, start=1)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        parts = self.tables(console, options.max_width)
        for k, (title, table) in enumerate(parts):
            if k:
                yield Text("")
            yield Text(title, style="bold")
            yield table
        if self.caption:
            yield Text(self.caption, style="dim")


def natural_width(console: Console, table: Table) -> int:
    """The width ``table`` takes when nothing wraps (rich's maximum measurement at unlimited width)."""
    options = console.options.update(max_width=10_000)
    return Measurement.get(console, options, table).maximum


def render_text(renderable, width: int = 80) -> str:
    """Plain text of ``renderable`` printed on a terminal of ``width`` columns (no colours)."""
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue()


def _wrap_header(header: str, width: int) -> str:
    """``header`` wrapped at spaces to ``width`` (at least its longest word); explicit ``\\n`` kept."""
    lines = []
    for part in header.split("\n"):
        longest = max((len(w) for w in part.split()), default=0)
        lines += textwrap.wrap(part, max(width, longest), break_long_words=False) or [""]
    return "\n".join(lines)


def _box():
    from rich import box

    return box.SIMPLE_HEAD
