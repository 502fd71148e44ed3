"""What ``make demo`` prints fits an 80-column terminal: no wrapped table cell, one display per stage.

The demo's own printing code runs on recorded results (``tests/data/demo``: the two evaluation folders of a real
``make demo`` run, samples included: RECORDED_RUN says which); the stages that would sample and train are
replaced by ones that copy those folders, so this takes a second.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from sagerl import demo
from sagerl.tables import Estimate, FittedTable, render_text

RECORDED = Path(__file__).parent / "data" / "demo"
RECORDED_RUN = "make demo from a fresh clone of 1e66f82 with an empty SAGERL_CACHE, 2026-12-08, AMD EPYC with AVX2 only (float32)"
PLANTED = {  # what the planted stage of that run collected (sagerl.study.table.collect)
    "reference": {"solved/planted_rare": 46.0, "pass@1/planted_common": 0.883544921875},
    "cells": {
        name: {
            "per_seed": {"0": {"solved/planted_rare": a}, "1": {"solved/planted_rare": b}},
            "summary": {
                "solved/planted_rare": {"mean": (a + b) / 2},
                "pass@1/planted_common": {"mean": common},
            },
        }
        for name, a, b, common in (
            ("grpo", 0.0, 0.0, 0.9794921875),
            ("pkpo-anneal@cosine", 42.0, 24.0, 0.973388671875),
        )
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
    entry = results["datasets"][demo.EVAL_DATASET]
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
    assert f"on {demo.EVAL_DATASET} " in text and (tmp_path / "passk_before_after.png").is_file()
    # the CI of each run is on its own row, under the values: two lines per run
    row = next(i for i, line in enumerate(lines) if line.startswith("base "))
    assert lines[row + 1].lstrip().startswith("[") and lines[row + 2].startswith(demo.PRESET)
    assert "reference model: 46 of 64 rare problems solved" in text and re.search(
        r"^pkpo-anneal@cosine\s+42, 24\s+33\.0\s+97\.3%",
        text,
        re.M,  # as the recorded run printed it
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
    table, _ = demo.before_after_tables(d)
    text = render_text(table, width=120)
    base = json.loads((RECORDED / "base" / "results.json").read_text())["datasets"][demo.EVAL_DATASET]
    assert re.search(rf"^base\s+{100 * base['pass@1']:.1f} \[\d+\.\d, \d+\.\d\]", text, re.M), text
    assert len(text.splitlines()) == 6  # title, header, rule, one line per run and the paired gain
    assert max(len(line) for line in text.splitlines()) <= 120


def test_the_paired_gain_is_the_mean_per_problem_difference(tmp_path):
    """The gain row is pass@k(after) − pass@k(before) per problem, averaged (the unbiased estimator of each, from
    the recorded samples), and the line under the table says whether its pass@1 CI excludes 0."""
    from sagerl.analysis.runs import load_eval_run
    from sagerl.eval.passk import pass_at_k

    gain = demo.paired_gain(RECORDED / "base", RECORDED / demo.PRESET, [1, 2, 4, 8])
    before, after = (load_eval_run(RECORDED / name) for name in ("base", demo.PRESET))
    n = before.n
    for i, k in enumerate((1, 2, 4, 8)):
        per_problem = [
            pass_at_k(n, a, k) - pass_at_k(n, b, k)
            for a, b in zip(
                after.correct_counts(demo.EVAL_DATASET), before.correct_counts(demo.EVAL_DATASET), strict=True
            )
        ]
        assert gain["difference"][i] == pytest.approx(100 * sum(per_problem) / len(per_problem), abs=1e-9)
        lo, hi = gain["ci"][i]
        assert lo <= gain["difference"][i] <= hi
    assert gain["num_problems"] == demo.PROBLEMS
    line = demo.gain_line(gain).plain
    assert line.endswith("excludes 0") == (gain["ci"][0][0] > 0)


def test_the_readme_table_is_what_the_demo_prints_on_the_recorded_run(tmp_path):
    """The README's table, "as printed", is the demo's printout of the recorded run at 80 columns, line for line."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### What `make demo` shows") :]
    block = section[
        section.index("```text\n") + len("```text\n") : section.index("\n```", section.index("```text"))
    ]
    file = io.StringIO()
    d = demo.Demo(demo.DemoSettings(out=tmp_path), Console(file=file, width=80, color_system=None))
    for name in ("base", demo.PRESET):
        shutil.copytree(RECORDED / name, tmp_path / name)
    for renderable in demo.before_after_tables(d):
        d.console.print(renderable)
    printed = [line.rstrip() for line in file.getvalue().splitlines()]
    assert [line.rstrip() for line in block.splitlines()] == printed


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
