"""The Pareto frontier of a study on two metrics: which cells no other cell beats on both, with paired CIs.

A study whose file names two axes (``pareto: {x: solved/planted_rare, y: pass@1/planted_common}``; both are
maximised) gets ``frontier.md`` and ``pareto.png`` beside its table. Cell A **dominates** cell B when A's paired
differences to B (A − B on the same run: seed, or build and seed; pooled as :func:`sagerl.study.statistics.
paired_differences` pools them) have a mean ≥ 0 on both axes and a 95% CI entirely above 0 on at least one,
over at least 2 paired runs on each axis (:data:`sagerl.study.statistics.MIN_PAIRED_RUNS`): one paired run has
no interval, and taking it as evidence would let any positive difference of one seed, or of one shared run,
dominate. The frontier is the cells no other cell dominates. A pair of cells that share fewer runs is never
compared; :func:`sagerl.study.spec.parse_study` refuses a ``pareto:`` study whose cells could not share two.

Pairing matters: the cells of a study start each seed from the same data order and the same first sampling
(on the same build), so a difference that the unpaired CIs of two cells cannot resolve can be resolved paired.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sagerl.study.statistics import MIN_PAIRED_RUNS, ONE_BUILD_MARK, ONE_BUILD_NOTE, paired_differences
from sagerl.study.statistics import format_estimate as _fmt
from sagerl.study.statistics import metric_format as _metric_format


def _paired_runs(row: Mapping[str, Any]) -> int:
    """The paired runs with a value in one metric's row of :func:`paired_differences`."""
    return sum(v is not None and not math.isnan(v) for v in row.get("values", []))


def dominates(diff: Mapping[str, Any], x: str, y: str) -> bool:
    """Whether the paired differences ``diff`` (one cell's row of :func:`paired_differences`: metric ->
    {"mean", "ci", "values"}) say that cell dominates the baseline: at least ``MIN_PAIRED_RUNS`` (2) paired
    values on both axes, both means ≥ 0, and one CI's lower bound > 0."""
    rows = [diff.get(x), diff.get(y)]
    if any(r is None or r["mean"] is None or math.isnan(r["mean"]) for r in rows):
        return False
    if any(_paired_runs(r) < MIN_PAIRED_RUNS for r in rows):
        return False
    means_ok = all(r["mean"] >= 0 for r in rows)
    above = any(r["ci"][0] is not None and not math.isnan(r["ci"][0]) and r["ci"][0] > 0 for r in rows)
    return means_ok and above


def pareto_frontier(cells: Mapping[str, Any], x: str, y: str) -> dict[str, Any]:
    """Dominance between every pair of cells with runs, and the frontier.

    Args:
        cells: the study's cells (:func:`sagerl.study.table.collect`'s ``data["cells"]``: each with ``per_seed``
            runs keyed by run key and a ``summary``).
        x, y: the two metric keys, both maximised.

    Returns:
        ``{"x", "y", "frontier": [cell names, by ascending mean x], "cells": {name: {"x": summary, "y": summary,
        "dominated_by": [names], "on_frontier": bool}}}``.
    """
    names = [n for n, e in cells.items() if e.get("per_seed")]
    out: dict[str, Any] = {"x": x, "y": y, "cells": {}}
    for name in names:
        summary = cells[name].get("summary", {})
        out["cells"][name] = {"x": summary.get(x), "y": summary.get(y), "dominated_by": []}
    for baseline in names:
        diffs = paired_differences(cells, {"baseline": baseline, "metrics": [x, y]})["cells"]
        for name in names:
            if name != baseline and dominates(diffs[name], x, y):
                out["cells"][baseline]["dominated_by"].append(name)
    for entry in out["cells"].values():
        entry["on_frontier"] = not entry["dominated_by"]

    def mean_x(name: str) -> float:
        s = out["cells"][name]["x"]
        return s["mean"] if s and s["mean"] is not None and not math.isnan(s["mean"]) else -math.inf

    out["frontier"] = sorted((n for n in names if out["cells"][n]["on_frontier"]), key=mean_x)
    return out


def render_frontier(front: Mapping[str, Any]) -> str:
    """``frontier.md``: the frontier's cells (mean [95% CI] on both axes), then every dominated cell with the
    cells that dominate it."""
    x, y = front["x"], front["y"]
    fx, fy = _metric_format(x), _metric_format(y)
    ux, uy = (" (%)" if fx[0] else ""), (" (%)" if fy[0] else "")
    lines = [
        f"Pareto frontier on {x} and {y} (both maximised). A cell dominates another when its paired differences "
        f"to it, over at least {MIN_PAIRED_RUNS} paired runs, have a mean >= 0 on both axes and a 95% CI above 0 "
        "on at least one.",
        "",
        f"| on the frontier | {x}{ux} | {y}{uy} |",
        "|---|---|---|",
    ]
    for name in front["frontier"]:
        entry = front["cells"][name]
        lines.append(f"| {name} | {_fmt({x: entry['x']}, x, *fx)} | {_fmt({y: entry['y']}, y, *fy)} |")
    dominated = [n for n, e in front["cells"].items() if not e["on_frontier"]]
    if dominated:
        lines += ["", f"| dominated | {x}{ux} | {y}{uy} | dominated by |", "|---|---|---|---|"]
        for name in sorted(dominated, key=lambda n: (-len(front["cells"][n]["dominated_by"]), n)):
            entry = front["cells"][name]
            lines.append(
                f"| {name} | {_fmt({x: entry['x']}, x, *fx)} | {_fmt({y: entry['y']}, y, *fy)} | "
                f"{', '.join(entry['dominated_by'])} |"
            )
    if any(ONE_BUILD_MARK in line for line in lines[2:]):
        lines += ["", ONE_BUILD_NOTE]
    return "\n".join(lines) + "\n"


def plot_pareto(front: Mapping[str, Any], path: Path, reference: Mapping[str, Any] | None = None) -> Path:
    """``pareto.png``: one point per cell at its means, with both 95% CIs as error bars, the frontier's cells
    joined (in order of x) and labelled in bold; the reference (before training) as a black cross."""
    from sagerl.eval.plots import _pyplot, _save

    plt = _pyplot()
    x, y = front["x"], front["y"]
    fig, ax = plt.subplots(figsize=(8.0, 6.0))
    colors = plt.get_cmap("tab20").colors

    def scaled(summary, key):
        percent = _metric_format(key)[0]
        k = 100.0 if percent else 1.0
        mean, (lo, hi) = summary["mean"] * k, (summary["ci"][0] * k, summary["ci"][1] * k)
        return mean, [[max(0.0, mean - lo)], [max(0.0, hi - mean)]]

    points = {}
    for i, (name, entry) in enumerate(front["cells"].items()):
        if not entry["x"] or not entry["y"] or entry["x"]["mean"] is None or entry["y"]["mean"] is None:
            continue
        (mx, ex), (my, ey) = scaled(entry["x"], x), scaled(entry["y"], y)
        points[name] = (mx, my)
        on = entry["on_frontier"]
        ax.errorbar(
            mx, my, xerr=ex, yerr=ey, fmt="o" if on else ".", color=colors[i % len(colors)],
            markersize=7 if on else 5, capsize=2, linewidth=0.8, alpha=1.0 if on else 0.6,
        )  # fmt: skip
        ax.annotate(
            name, (mx, my), textcoords="offset points", xytext=(4, 4), fontsize=6,
            fontweight="bold" if on else "normal",
        )  # fmt: skip
    line = [points[n] for n in front["frontier"] if n in points]
    if len(line) > 1:
        ax.plot([p[0] for p in line], [p[1] for p in line], "k-", linewidth=1.0, alpha=0.7, label="frontier")
    if reference and x in reference and y in reference:
        rx = reference[x] * (100.0 if _metric_format(x)[0] else 1.0)
        ry = reference[y] * (100.0 if _metric_format(y)[0] else 1.0)
        ax.plot([rx], [ry], "kx", markersize=8, label="reference (before RL)")
    ax.set_xlabel(x + (" (%)" if _metric_format(x)[0] else ""))
    ax.set_ylabel(y + (" (%)" if _metric_format(y)[0] else ""))
    ax.set_title("Pareto frontier (mean, 95% CIs; frontier joined)")
    ax.grid(True, linestyle=":", alpha=0.5)
    if line or reference:
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
