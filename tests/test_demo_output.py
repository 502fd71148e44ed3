"""What ``make demo`` prints fits an 80-column terminal: no wrapped table cell, one display per stage.

The demo's own printing code runs on recorded results (``tests/data/demo``: the results.json of the two
eval runs, rebuilt with :func:`sagerl.eval.results.summarize` from the totals of the 2026-12-01 demo run:
7 and 9 of 32 problems solved, 11 and 13 of 256 samples correct, spread over the solved problems by
assumption); the stages that would sample and train are replaced by ones that copy those folders, so
this takes a second.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

from rich.console import Console

from sagerl import demo
from sagerl.tables import Estimate, FittedTable, render_text

RECORDED = Path(__file__).parent / "data" / "demo"
PLANTED = {  # what the planted stage collects (sagerl.study.table.collect): seeds 0 and 1 of exploration.yaml
    "reference": {"solved/planted_rare": 42.0, "pass@1/planted_common": 0.838},
    "cells": {
        name: {
            "per_seed": {"0": {"solved/planted_rare": a}, "1": {"solved/planted_rare": b}},
            "summary": {
                "solved/planted_rare": {"mean": (a + b) / 2},
                "pass@1/planted_common": {"mean": common},
            },
        }
        for name, a, b, common in (("grpo", 1.0, 4.0, 0.9320068359375), ("pkpo", 64.0, 64.0, 0.775146484375))
    },
}


def _recorded_stages(out: Path) -> list[demo.Stage]:
    def copy(name: str):
        def run(d: demo.Demo) -> Path:
            shutil.copytree(RECORDED / name, out / name, dirs_exist_ok=True)
            return out / name

        return run

    real = {stage.key: stage for stage in demo.STAGES}
    return [
        demo.Stage("eval before", real["eval before"].heading, copy("base")),
        demo.Stage("training", lambda s: real["training"].heading(s), lambda d: out / "train" / "model"),
        demo.Stage("eval after", real["eval after"].heading, copy(demo.PRESET), real["eval after"].tables),
        demo.Stage("planted", real["planted"].heading, lambda d: PLANTED, real["planted"].tables),
    ]


def _cells_of(results: dict) -> list[str]:
    """Every value and CI text the before/after table must show whole, e.g. '4.3' and '[0.8, 8.6]'."""
    entry = results["datasets"]["arith"]
    out = []
    for k in (1, 2, 4, 8):
        lo, hi = entry["ci"][f"pass@{k}"]
        out += [f"{100 * entry[f'pass@{k}']:.1f}", f"[{100 * lo:.1f}, {100 * hi:.1f}]"]
    return out


def test_the_demo_output_fits_80_columns(tmp_path):
    file = io.StringIO()
    console = Console(file=file, width=80, color_system=None, legacy_windows=False)
    settings = demo.DemoSettings(out=tmp_path)
    demo.run_demo(settings, console=console, stages=_recorded_stages(tmp_path))
    text = file.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    for name in ("base", demo.PRESET):
        results = json.loads((RECORDED / name / "results.json").read_text())
        for cell in _cells_of(results):
            assert any(cell in line for line in lines), f"{cell!r} is not whole on one line:\n{text}"
    # one heading per stage, in order, then the table (one header row: no repeated pass@k headers)
    headings = [line for line in lines if re.match(r"^\d/4 ", line)]
    assert [h[:4] for h in headings] == ["1/4 ", "2/4 ", "3/4 ", "4/4 "]
    assert "1 prompt x 8 rollouts per step" in headings[1]
    header_rows = [line for line in lines if "pass@1" in line and line.startswith("run ")]
    assert len(header_rows) == 1 and all(f"pass@{k}" in header_rows[0] for k in (1, 2, 4, 8))
    assert "on arith" in text and (tmp_path / "passk_before_after.png").is_file()
    # the CI of each run is on its own row, under the values: two lines per run
    row = next(i for i, line in enumerate(lines) if line.startswith("base "))
    assert lines[row + 1].lstrip().startswith("[") and lines[row + 2].startswith(demo.PRESET)
    assert "reference model: 42 of 64 rare problems solved" in text and re.search(
        r"^pkpo\s+64, 64\s+64\.0\s+77\.5%",
        text,
        re.M,  # as the 2026-12-01 demo printed it
    )
    for banned in ("it/s", "Loading weights", "Writing model shards", "{'loss'"):
        assert banned not in text


def test_the_closing_times_line_fits_80_columns():
    """The stage times of the 2026-12-01 demo from a fresh clone (17.5 min; before, "min" after every stage
    made the line 82 columns and the terminal wrapped it)."""
    file = io.StringIO()
    d = demo.Demo(demo.DemoSettings(), Console(file=file, width=80, color_system=None))
    d.timings = {"eval before": 162.0, "training": 672.0, "eval after": 114.0, "planted": 96.0}
    demo.print_summary(d, 1050.0)
    first = file.getvalue().splitlines()[0]
    assert first == "total 17.5 min: eval before 2.7, training 11.2, eval after 1.9, planted 1.6"


def test_a_wide_terminal_keeps_each_ci_beside_its_value(tmp_path):
    settings = demo.DemoSettings(out=tmp_path)
    d = demo.Demo(settings, Console(file=io.StringIO()))
    for name in ("base", demo.PRESET):
        shutil.copytree(RECORDED / name, tmp_path / name)
    (table,) = demo.before_after_tables(d)
    text = render_text(table, width=120)
    assert re.search(r"^base\s+4\.3 \[\d+\.\d, \d+\.\d\]", text, re.M), text
    assert len(text.splitlines()) == 5  # title, header, rule, one line per run
    assert max(len(line) for line in text.splitlines()) <= 120


def test_a_new_stage_with_its_own_table_is_one_entry(tmp_path):
    """What the 4th stage the lead adds will do: run, then print a table of its own."""
    file = io.StringIO()
    console = Console(file=file, width=80, color_system=None)
    table = FittedTable("rare support kept", "method", ["rare solved"], [("grpo", [Estimate(2.0, 0.0, 5.2)])])
    stage = demo.Stage(
        "planted", lambda s: "planted task: GRPO vs the best method", lambda d: 42, lambda d: [table]
    )
    result = demo.run_demo(demo.DemoSettings(out=tmp_path), console=console, stages=[stage])
    assert result.results["planted"] == 42
    text = file.getvalue()
    assert "1/1 planted task" in text and "rare support kept" in text and "[0.0, 5.2]" in text
