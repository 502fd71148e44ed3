"""Terminal tables that fit the terminal: no cell is ever wrapped onto two lines.

Every table sagerl prints (``make demo``'s before/after table, ``sagerl eval``, ``sagerl compare``,
``sagerl study``) is a :class:`FittedTable`: rows with a label, columns with a header, and cells that are
text, numbers or :class:`Estimate` values (a value with its 95% CI). The layout is chosen when the table
is printed, for the width it is printed at (an 80-column terminal, a wide one, a file):

1. one line per row, each estimate as ``4.3 [1.6, 7.8]``, when that fits;
2. else each estimate's CI on a row of its own under the values (``4.3`` over ``[1.6, 7.8]``), which
   about halves the width;
3. else each row label on a line of its own above the row's values, when the labels are what is wide;
4. else the columns split into consecutive tables, each repeating the row labels; ``groups`` keeps
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
from rich.text import Text

__all__ = ["Estimate", "FittedTable", "format_cell", "render_text"]

GAP = "   "
"""Between two columns."""


@dataclass(frozen=True)
class Estimate:
    """A value with an optional 95% interval, printed with ``digits`` decimals (in the caller's units);
    ``undefined``: the interval is undefined (one run), printed ``[n/a]``; ``mark`` follows the value."""

    value: float | None
    low: float | None = None
    high: float | None = None
    digits: int = 1
    undefined: bool = False
    mark: str = ""

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
        return f"{self.value:.{self.digits}f}{self.mark}"

    def interval_text(self) -> str:
        if self.undefined:
            return "[n/a]"
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
    def _texts(self, inline: bool) -> list[list[tuple[str, str]]]:
        return [[format_cell(c, inline) for c in cells] for _, cells in self.rows]

    def _widths(self, texts, indices: Sequence[int]) -> list[int]:
        """Each column's width: its widest cell, and its header wrapped at spaces no wider than that."""
        widths = []
        for i in indices:
            widest = max((len(t) for row in texts for t in row[i]), default=1)
            header = max(len(line) for line in _wrap_header(self.columns[i], widest).split("\n"))
            widths.append(max(widest, header))
        return widths

    def _label_width(self, label_lines: bool) -> int:
        if label_lines:
            return len(self.label)
        return max([len(self.label), *(len(name) for name, _ in self.rows)])

    def _width(self, texts, indices: Sequence[int], label_lines: bool) -> int:
        widths = self._widths(texts, indices)
        return self._label_width(label_lines) + sum(w + len(GAP) for w in widths)

    def _lines(self, texts, indices: Sequence[int], label_lines: bool) -> list[Text]:
        widths = self._widths(texts, indices)
        label_width = self._label_width(label_lines)
        headers = [_wrap_header(self.columns[i], w).split("\n") for i, w in zip(indices, widths, strict=True)]
        height = max((len(h) for h in headers), default=1)
        lines = []
        for level in range(height):
            label = self.label if level == height - 1 else ""
            cells = [(h[level - (height - len(h))] if level >= height - len(h) else "") for h in headers]
            line = label.ljust(label_width) + "".join(
                GAP + c.rjust(w) for c, w in zip(cells, widths, strict=True)
            )
            lines.append(Text(line.rstrip(), style="bold"))
        lines.append(Text("─" * (label_width + sum(w + len(GAP) for w in widths))))
        for (name, _), row in zip(self.rows, texts, strict=True):
            values = "".join(GAP + row[i][0].rjust(w) for i, w in zip(indices, widths, strict=True))
            if label_lines:
                lines.append(Text(name, style="bold"))
                lines.append(Text((" " * label_width + values).rstrip()))
            else:
                line = Text(name.ljust(label_width), style="bold")
                line.append(values)
                lines.append(line)
            intervals = [row[i][1] for i in indices]
            if any(intervals):
                ci = "".join(GAP + t.rjust(w) for t, w in zip(intervals, widths, strict=True))
                lines.append(Text((" " * label_width + ci).rstrip(), style="dim"))
        return lines

    def _parts(self, texts, width: int, label_lines: bool) -> list[list[int]] | None:
        """Consecutive column index lists that fit ``width``; None when one column alone does not."""

        def fits(indices: Sequence[int]) -> bool:
            return self._width(texts, indices, label_lines) <= width

        units, start = [], 0
        for size in self.groups:
            units.append(list(range(start, start + size)))
            start += size
        parts: list[list[int]] = []
        current: list[int] = []
        for unit in units:
            if fits(current + unit):
                current += unit
                continue
            if current and fits(unit):
                parts.append(current)
                current = list(unit)
                continue
            for i in unit:  # a group too wide on its own is split column by column
                if fits(current + [i]):
                    current.append(i)
                    continue
                if current:
                    parts.append(current)
                if not fits([i]):
                    return None
                current = [i]
        if current:
            parts.append(current)
        return parts

    def layout(self, width: int) -> list[tuple[str, list[Text]]]:
        """The (title, lines) parts of the table printed ``width`` columns wide."""
        every = list(range(len(self.columns)))
        for inline, label_lines in ((True, False), (False, False), (False, True)):
            texts = self._texts(inline)
            if self._width(texts, every, label_lines) <= width:
                return [(self.title, self._lines(texts, every, label_lines))]
        texts = self._texts(False)
        label_lines = self._label_width(False) > width // 3
        parts = self._parts(texts, width, label_lines) or [[i] for i in every]
        n = len(parts)
        return [
            (f"{self.title} ({k}/{n})", self._lines(texts, part, label_lines))
            for k, part in enumerate(parts, 1)
        ]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for k, (title, lines) in enumerate(self.layout(options.max_width)):
            if k:
                yield Text("")
            yield Text(title, style="bold")
            yield from lines
        if self.caption:
            yield Text(self.caption, style="dim")


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
