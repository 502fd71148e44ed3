"""The study's statistics: t quantiles exact at every degree of freedom, no interval from one value, and the
tables marking an estimate pooled over one build's seeds where its neighbours are pooled over builds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sagerl.study.statistics import (
    ONE_BUILD_MARK,
    ONE_BUILD_NOTE,
    format_estimate,
    paired_differences,
    pooled_interval,
    pooled_over,
    t_interval,
    t_quantile,
)
from sagerl.study.table import _summary, render_markdown, render_paired, render_terminal
from sagerl.tables import render_text


@pytest.mark.parametrize(
    "df, quantile",  # t_{0.975, df}, as printed tables give it (4 decimals)
    [(1, 12.7062), (2, 4.3027), (14, 2.1448), (15, 2.1314), (16, 2.1199), (20, 2.0860), (30, 2.0423)],
)
def test_t_quantile_matches_the_published_table(df, quantile):
    assert t_quantile(df) == pytest.approx(quantile, abs=5e-5)


def test_t_quantile_tends_to_the_normal_and_refuses_no_degrees_of_freedom():
    assert t_quantile(100_000) == pytest.approx(1.95996, abs=1e-4)
    assert t_quantile(10, level=0.90) == pytest.approx(1.8125, abs=5e-5)
    with pytest.raises(ValueError, match="df >= 1"):
        t_quantile(0)


@pytest.mark.parametrize("n, t", [(16, 2.1314), (21, 2.0860), (31, 2.0423)])
def test_more_than_15_values_get_t_not_1_96(n, t):
    """The old table stopped at 14 degrees of freedom and used 1.96 beyond: 4-8% too narrow here."""
    values = [float(v % 7) for v in range(n)]
    mean, lo, hi = t_interval(values)
    se = float(np.std(values, ddof=1)) / math.sqrt(n)
    assert mean == pytest.approx(float(np.mean(values)))
    assert (hi - mean, mean - lo) == pytest.approx((t * se, t * se), rel=5e-5)
    assert hi - mean > 1.04 * 1.96 * se


def test_one_value_has_an_undefined_interval_written_n_a():
    mean, lo, hi = t_interval([0.25], 0.0, 1.0)
    assert mean == 0.25 and math.isnan(lo) and math.isnan(hi)  # not (0.25, 0.25, 0.25)
    mean, lo, hi = pooled_interval({"b1/0": 0.25, "b2/0": math.nan})
    assert mean == 0.25 and math.isnan(lo) and math.isnan(hi)
    summary = {"m": {"mean": mean, "ci": [lo, hi]}}
    assert format_estimate(summary, "m", percent=True) == "25.0 [n/a]"
    assert format_estimate({"m": {"mean": 0.25, "ci": [None, None]}}, "m", True) == "25.0 [n/a]"  # study.json
    assert format_estimate({"m": {"mean": 0.25, "ci": [0.25, 0.25]}}, "m", True) == "25.0"  # a point value
    assert format_estimate({"m": {"mean": None, "ci": [None, None]}}, "m", True) == "—"
    assert format_estimate({"m": {"mean": 2.0, "ci": [1.0, 3.0]}}, "m", False) == "2.0 [1.0, 3.0]"


def test_pooled_over_says_how_the_interval_was_pooled():
    assert pooled_over({"0": 1.0, "1": 2.0}) == "seeds"
    assert pooled_over({"b1/0": 1.0, "b2/0": 2.0}) == "builds"
    assert pooled_over({"b1/0": 1.0, "b1/1": 2.0}) == "one build"
    assert pooled_over({"b1/0": 1.0, "b1/1": 2.0, "b2/0": math.nan}) == "one build"  # b2 has no value


def run(value: float) -> dict[str, float]:
    return {"pass@1/d": value}


def test_an_estimate_pooled_over_one_build_is_marked_in_every_table():
    """Cell ``late`` has finished runs on b1 only: its interval is over b1's seeds (what pooled_interval falls
    back to), narrower than the others' over builds; table.md, paired.md and the terminal table say so."""
    per_seed = {
        "grpo": {"b1/0": run(0.5), "b1/1": run(0.6), "b2/0": run(0.4), "b2/1": run(0.45), "b3/0": run(0.7)},
        "late": {"b1/0": run(0.55), "b1/1": run(0.6)},
        "one": {"b1/0": run(0.3)},
    }
    cells = {
        name: {"per_seed": runs, "failed": {}, "summary": _summary(runs)} for name, runs in per_seed.items()
    }
    late = cells["late"]["summary"]["pass@1/d"]
    assert late["pooled"] == "one build" and cells["grpo"]["summary"]["pass@1/d"]["pooled"] == "builds"
    assert (late["mean"], *late["ci"]) == t_interval([0.55, 0.6], 0.0, 1.0)  # over b1's two seeds
    data = {"study": "s", "n": 1, "datasets": ["d"], "builds": ["b1", "b2", "b3"], "cells": cells}

    lines = render_markdown(data).splitlines()
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines if line.startswith("| ")}
    assert ONE_BUILD_MARK not in rows["grpo"]
    lo, hi = (100 * v for v in late["ci"])
    assert rows["late"].startswith(f"| late | 1×2 | 57.5 [{lo:.1f}, {hi:.1f}]{ONE_BUILD_MARK} | — |")
    assert rows["one"].startswith(f"| one | 1×1 | 30.0 [n/a]{ONE_BUILD_MARK} | — |")
    assert lines[-1] == ONE_BUILD_NOTE

    data["paired"] = paired_differences(cells, {"baseline": "grpo", "metrics": ["pass@1/d"]})
    assert data["paired"]["cells"]["late"]["pass@1/d"]["pooled"] == "one build"
    paired = render_paired(data)
    assert paired.count(ONE_BUILD_MARK) == 4 + 1  # late and one: their estimate and their Δ; the note
    assert paired.rstrip().endswith(ONE_BUILD_NOTE)

    text = render_text(render_terminal(data), width=200)
    assert "30.0† [n/a]" in text and "57.5†" in text and ONE_BUILD_NOTE in text
    grpo_line = next(line for line in text.splitlines() if line.startswith("grpo"))
    assert ONE_BUILD_MARK not in grpo_line


def test_a_study_without_builds_marks_nothing():
    per_seed = {"0": run(0.5), "1": run(0.7)}
    cells = {"a": {"per_seed": per_seed, "failed": {}, "summary": _summary(per_seed)}}
    assert cells["a"]["summary"]["pass@1/d"]["pooled"] == "seeds"
    text = render_markdown({"study": "s", "n": 1, "datasets": ["d"], "cells": cells})
    assert ONE_BUILD_MARK not in text and ONE_BUILD_NOTE not in text
