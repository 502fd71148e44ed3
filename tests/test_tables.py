"""sagerl.tables.FittedTable: a table never wraps a cell; it moves CIs to their own row, then splits."""

from __future__ import annotations

import re

import pytest

from sagerl.tables import Estimate, FittedTable, render_text


def _table(n_columns: int, label: str = "grpo+branch@strong@reward") -> FittedTable:
    columns = [f"planted_common pass@{2**i} (%)" for i in range(n_columns)]
    rows = [(f"{label}-{r}", [Estimate(12.3 + i, 4.5, 100.0) for i in range(n_columns)]) for r in range(3)]
    return FittedTable("study", "cell", columns, rows)


def _assert_unwrapped(text: str, width: int, cells: list[str]) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    for cell in cells:
        assert any(cell in line for line in lines), f"{cell!r} split:\n{text}"


@pytest.mark.parametrize("n_columns", [1, 3, 6, 12])
@pytest.mark.parametrize("width", [60, 80, 200])
def test_no_cell_wraps_at_any_width(n_columns, width):
    text = render_text(_table(n_columns), width)
    cells = [f"{12.3 + i:.1f}" for i in range(n_columns)] + ["[4.5, 100.0]", "grpo+branch@strong@reward-2"]
    _assert_unwrapped(text, width, cells)
    # every column header word is whole, and every column appears exactly once
    assert text.count("planted_common") == n_columns
    for i in range(n_columns):
        assert len(re.findall(rf"pass@{2**i}\b", text)) == 1


def test_layouts_in_order_inline_then_ci_rows_then_parts():
    wide = render_text(_table(2), 200)
    assert "12.3 [4.5, 100.0]" in wide and "(1/" not in wide
    narrow = render_text(_table(3), 80)
    assert "12.3 [4.5, 100.0]" not in narrow and "[4.5, 100.0]" in narrow and "(1/" not in narrow
    split = render_text(_table(12), 80)
    assert "study (1/" in split and split.count("grpo+branch@strong@reward-0") >= 2


def test_groups_stay_together_where_they_fit():
    columns = [f"{d}\npass@{k}" for d in ("aime24", "amc23", "math500") for k in (1, 16, 256)]
    rows = [("base", [Estimate(10.0, 1.0, 20.0)] * 9)]
    text = render_text(FittedTable("t", "run", columns, rows, groups=[3, 3, 3]), 80)
    parts = text.split("\n\n")
    assert len(parts) == 3 and all(
        part.count(name) == 3 for part, name in zip(parts, ("aime24", "amc23", "math500"), strict=True)
    )


def test_missing_values_and_plain_cells():
    table = FittedTable(
        "t", "dataset", ["problems", "pass@1"], [("arith", [32, None]), ("x", ["7", Estimate(1.0)])]
    )
    text = render_text(table, 80)
    assert "—" in text and "32" in text and "1.0" in text and "[" not in text


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="row 'a' has 1 cells for 2 columns"):
        FittedTable("t", "r", ["x", "y"], [("a", [1])])
    with pytest.raises(ValueError, match="do not add up"):
        FittedTable("t", "r", ["x", "y"], [("a", [1, 2])], groups=[1])
