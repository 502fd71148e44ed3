"""The study's Pareto frontier: dominance on paired differences, on hand-made study data whose frontier is known."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

import sagerl.study.table as table
from sagerl.cli import main
from sagerl.errors import ConfigError
from sagerl.study import parse_study
from sagerl.study.frontier import dominates, pareto_frontier, render_frontier
from sagerl.study.statistics import ONE_BUILD_MARK, ONE_BUILD_NOTE
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
    row = lambda mean, lo, hi: {"mean": mean, "ci": [lo, hi], "values": [lo, hi]}  # noqa: E731
    assert dominates({X: row(1.0, 0.2, 1.8), Y: row(0.0, -0.1, 0.1)}, X, Y)
    assert not dominates({X: row(1.0, -0.2, 1.8), Y: row(0.0, -0.1, 0.1)}, X, Y)  # no CI above 0
    assert not dominates({X: row(1.0, 0.2, 1.8), Y: row(-0.01, -0.1, 0.1)}, X, Y)  # a mean below 0
    assert not dominates({X: row(float("nan"), 0.2, 1.8), Y: row(0.1, 0.05, 0.2)}, X, Y)
    assert not dominates({X: row(1.0, 0.2, 1.8)}, X, Y)  # no shared run on y
    one = {"mean": 1.0, "ci": [1.0, 1.0], "values": [1.0]}  # one paired run (as t_interval gave it before)
    assert not dominates({X: one, Y: row(0.0, -0.1, 0.1)}, X, Y)
    assert not dominates({X: row(1.0, 0.2, 1.8), Y: {**one, "values": [1.0, math.nan]}}, X, Y)


def test_one_paired_run_dominates_nothing():
    """With one seed (or one run two cells share), a positive difference is no evidence: no interval, no
    dominance, and every cell is on the frontier. Before, a one-value interval was (mean, mean, mean) and any
    positive difference "dominated"."""
    one_seed = {
        name: {"per_seed": {"0": {X: x, Y: y}}, "failed": {}, "summary": _summary({"0": {X: x, Y: y}})}
        for name, x, y in (("a", 40.0, 0.61), ("b", 39.0, 0.60), ("c", 10.0, 0.9))
    }
    front = pareto_frontier(one_seed, X, Y)
    assert front["frontier"] == ["c", "b", "a"] and not front["cells"]["b"]["dominated_by"]
    # two cells on two seeds each, sharing one: the same
    shared_one = {
        "a": {"per_seed": {"0": {X: 40.0, Y: 0.61}, "1": {X: 41.0, Y: 0.62}}, "failed": {}},
        "b": {"per_seed": {"1": {X: 39.0, Y: 0.60}, "2": {X: 38.0, Y: 0.55}}, "failed": {}},
    }
    assert all(e["on_frontier"] for e in pareto_frontier(shared_one, X, Y)["cells"].values())
    # the same differences on two shared seeds resolve
    two = {
        "a": {"per_seed": {"0": {X: 40.0, Y: 0.61}, "1": {X: 41.0, Y: 0.62}}, "failed": {}},
        "b": {"per_seed": {"0": {X: 39.0, Y: 0.60}, "1": {X: 40.0, Y: 0.61}}, "failed": {}},
    }
    assert pareto_frontier(two, X, Y)["cells"]["b"]["dominated_by"] == ["a"]


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
    study = parse_study({**BASE, "seeds": [0, 1], "pareto": {"x": X, "y": Y}}, "p.yaml")
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
        parse_study({**BASE, "seeds": [0, 1], "pareto": pareto}, "p.yaml")


TWO = [{"preset": "grpo"}, {"preset": "pkpo"}]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({}, "cells 'grpo' and 'pkpo' share 1 run (seed 0): give seeds: [0, 1] or more"),
        ({"cells": [{"preset": "grpo"}]}, "cell 'grpo' has 1 run (seed 0): give seeds"),
        (
            {"seeds": [0, 1], "cells": [{"preset": "grpo"}, {"preset": "pkpo", "seeds": [1, 2]}]},
            "cells 'grpo' and 'pkpo' share 1 run (seed 1)",
        ),
        (
            {"seeds": [0, 1], "cells": [{"preset": "grpo"}, {"preset": "pkpo", "seeds": [2, 3]}]},
            "cells 'grpo' and 'pkpo' share 0 runs: give seeds",
        ),
        ({"builds": ["b1"]}, "share 1 run (b1/0)"),
    ],
)
def test_a_pareto_study_needs_two_paired_runs_between_every_two_cells(changes, message):
    study = {**BASE, "cells": TWO, "pareto": {"x": X, "y": Y}, **changes}
    with pytest.raises(
        ConfigError, match=r"^p\.yaml: pareto needs at least 2 paired runs .*" + re.escape(message)
    ):
        parse_study(study, "p.yaml")


def test_two_builds_or_two_seeds_are_two_paired_runs():
    for changes in ({"seeds": [0, 1]}, {"builds": ["b1", "b2"]}, {"builds": ["b1"], "seeds": [3, 4]}):
        assert parse_study({**BASE, "cells": TWO, "pareto": {"x": X, "y": Y}, **changes}, "p.yaml").pareto
    assert parse_study({**BASE, "cells": TWO}, "p.yaml").pareto is None  # one seed is fine without pareto


def test_a_one_seed_pareto_study_is_one_error_line_and_nothing_written_is_lost(tmp_path, capsys):
    path = tmp_path / "one-seed.yaml"
    path.write_text(yaml.safe_dump({**BASE, "cells": TWO, "pareto": {"x": X, "y": Y}}))
    out = tmp_path / "out"
    (out / "one-seed").mkdir(parents=True)
    (out / "one-seed" / "table.md").write_text("an earlier table\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["study", str(path), "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and f"{path}: pareto needs at least 2 paired runs" in err[0]
        and "seeds: [0, 1]" in err[0]
    )
    assert [p.name for p in out.rglob("*")] == ["one-seed", "table.md"]
    assert (out / "one-seed" / "table.md").read_text() == "an earlier table\n"


def test_frontier_md_marks_an_estimate_pooled_over_one_build():
    late = {"b1/0": {X: 30.0, Y: 0.5}, "b1/1": {X: 31.0, Y: 0.52}}
    cells = {**CELLS, "late": {"per_seed": late, "failed": {}, "summary": _summary(late)}}
    text = render_frontier(pareto_frontier(cells, X, Y))
    assert f"| late | 30.5 [24.1, 36.9]{ONE_BUILD_MARK} | 51.0 [" in text
    assert text.rstrip().endswith(ONE_BUILD_NOTE)
    assert ONE_BUILD_MARK not in render_frontier(pareto_frontier(CELLS, X, Y))
