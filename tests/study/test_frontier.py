"""The study's Pareto frontier: dominance on paired differences, on hand-made study data whose frontier is known."""

from __future__ import annotations

import json

import pytest

import sagerl.study.table as table
from sagerl.errors import ConfigError
from sagerl.study import parse_study
from sagerl.study.frontier import dominates, pareto_frontier, render_frontier
from sagerl.study.table import _summary, write_study_table

X, Y = "solved/planted_rare", "pass@1/planted_common"
RUNS = ["b1/0", "b1/1", "b2/0", "b2/1", "b3/0", "b3/1"]
SHARED_X = [0, 10, -5, 7, 3, -8]  # what every cell's run shares (the seed's data order and first sampling)
SHARED_Y = [0, -3, 2, 5, -1, 4]


def cell(x: float, y: float, noise_x=None, noise_y=None) -> dict:
    noise_x, noise_y = noise_x or [0] * 6, noise_y or [0] * 6
    per_seed = {
        run: {X: x + sx + nx, Y: y + 0.01 * (sy + ny)}
        for run, sx, sy, nx, ny in zip(RUNS, SHARED_X, SHARED_Y, noise_x, noise_y, strict=True)
    }
    return {"per_seed": per_seed, "failed": {}, "summary": _summary(per_seed)}


CELLS = {
    "A": cell(60, 0.60),  # most rare problems
    "B": cell(10, 0.90),  # best common pass@1, but F beats it by 1.5 problems on every run
    "C": cell(50, 0.60),  # A's pass@1, 10 problems fewer: dominated by A
    "D": cell(35, 0.75),  # in between: on the frontier
    "E": cell(35, 0.75, [1, -1, 1, -1, 1, -1], [2, -2, 2, -2, 2, -2]),  # D within noise: neither dominates
    "F": cell(10, 0.90, [1, 2, 1, 2, 1, 2]),
    "failed": {"per_seed": {}, "failed": {"b1/0": "boom"}, "summary": {}},
}


def test_the_known_frontier():
    front = pareto_frontier(CELLS, X, Y)
    assert front["frontier"] == ["F", "D", "E", "A"]  # by mean x
    assert front["cells"]["B"]["dominated_by"] == ["F"]
    assert front["cells"]["C"]["dominated_by"] == ["A"]
    assert "failed" not in front["cells"]
    # pairing decides F over B: their unpaired intervals overlap, the paired difference is +1.5 on every build
    f, b = CELLS["F"]["summary"][X], CELLS["B"]["summary"][X]
    assert f["ci"][0] < b["ci"][1]
    assert not front["cells"]["D"]["dominated_by"] and not front["cells"]["E"]["dominated_by"]


def test_dominance_rule():
    row = lambda mean, lo, hi: {"mean": mean, "ci": [lo, hi]}  # noqa: E731
    assert dominates({X: row(1.0, 0.2, 1.8), Y: row(0.0, -0.1, 0.1)}, X, Y)
    assert not dominates({X: row(1.0, -0.2, 1.8), Y: row(0.0, -0.1, 0.1)}, X, Y)  # no CI above 0
    assert not dominates({X: row(1.0, 0.2, 1.8), Y: row(-0.01, -0.1, 0.1)}, X, Y)  # a mean below 0
    assert not dominates({X: row(float("nan"), 0.2, 1.8), Y: row(0.1, 0.05, 0.2)}, X, Y)
    assert not dominates({X: row(1.0, 0.2, 1.8)}, X, Y)  # no shared run on y


def test_frontier_md_lists_the_frontier_and_who_dominates_whom():
    text = render_frontier(pareto_frontier(CELLS, X, Y))
    lines = text.splitlines()
    assert lines[2] == f"| on the frontier | {X} | {Y} (%) |"
    assert lines[4].startswith("| F | 12.7 [") and lines[7].startswith("| A | 61.2 [")
    assert "| B | 11.2 [" in text
    assert any(line.startswith("| B |") and line.endswith("| F |") for line in lines)
    assert any(line.startswith("| C |") and line.endswith("| A |") for line in lines)


@pytest.mark.filterwarnings("ignore:No artists with labels")  # passk.png, strategies.png: no curves here
def test_the_study_writes_frontier_md_and_pareto_png(tmp_path, monkeypatch):
    data = {
        "study": "t",
        "n": 64,
        "datasets": ["planted_common", "planted_rare"],
        "builds": ["b1", "b2", "b3"],
        "cells": CELLS,
        "reference": {X: 42.0, Y: 0.838},
    }
    monkeypatch.setattr(table, "collect", lambda study, out: json.loads(json.dumps(data)))
    study = parse_study({**BASE, "cells": [{"preset": "grpo"}], "pareto": {"x": X, "y": Y}}, "p.yaml")
    assert study.pareto == {"x": X, "y": Y}
    written = write_study_table(study, tmp_path)
    assert written["pareto"]["frontier"] == ["F", "D", "E", "A"]
    assert (tmp_path / "frontier.md").read_text() == render_frontier(pareto_frontier(CELLS, X, Y))
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "study.json").read_text())["pareto"]["cells"]["C"]["dominated_by"] == ["A"]


BASE = {
    "name": "t",
    "model": "planted-reference",
    "train": {"dataset": "planted_train", "steps": 2},
    "eval": {"datasets": ["planted_common", "planted_rare"], "n": 2},
    "cells": [{"preset": "grpo"}],
}


@pytest.mark.parametrize(
    "pareto, message",
    [
        ({"x": X}, "pareto.y must name a metric"),
        ({"x": X, "y": X}, "pareto.x and pareto.y name the same metric"),
        ({"x": X, "y": Y, "z": "kl/reference"}, "pareto: unknown key 'z'"),
        ([X, Y], "pareto: expected a mapping"),
    ],
)
def test_bad_pareto_keys(pareto, message):
    with pytest.raises(ConfigError, match=message):
        parse_study({**BASE, "pareto": pareto}, "p.yaml")
