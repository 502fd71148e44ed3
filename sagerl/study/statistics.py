"""Statistics over a study's runs, shared by its table and its frontier: Student's t intervals, the pooled
interval over reference builds, paired differences between cells, and how a metric's estimate is written.

Runs are keyed by run key: ``"<seed>"``, or ``"<build>/<seed>"`` on a reference build (:class:`sagerl.study.spec.Cell`).
:mod:`sagerl.study.table` says why the intervals are pooled as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PROBABILITIES = ("pass@", "strategy/", "strategy_correct/")
"""Metrics that are probabilities (their intervals are cut to [0, 1]; every other metric is >= 0)."""
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145)
"""Student t 0.975 quantiles for 1..14 degrees of freedom (1.96 beyond)."""


def t_interval(
    values: Sequence[float], low: float = -math.inf, high: float = math.inf
) -> tuple[float, float, float]:
    """(mean, lower, upper): Student's t 95% interval of the mean, cut to the metric's range [low, high];
    lower = upper = mean for one value.

    NaN values are left out; all-NaN gives NaNs.
    """
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if x.size == 1:
        return (mean, mean, mean)
    t = _T975[x.size - 2] if x.size - 2 < len(_T975) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, max(low, mean - half), min(high, mean + half))


def build_of(run_key: str) -> str | None:
    """The build of a run key (``"b2/3"`` -> ``"b2"``; ``"3"`` -> None)."""
    return run_key.split("/", 1)[0] if "/" in run_key else None


def run_order(run_key: str) -> tuple[str, int]:
    build, _, seed = run_key.rpartition("/")
    return (build, int(seed))


def pooled_interval(
    values: Mapping[str, float], low: float = -math.inf, high: float = math.inf
) -> tuple[float, float, float]:
    """(mean, lower, upper) of per-run values keyed by run key (``"3"``, or ``"b2/3"`` on a build).

    One build (or none): :func:`t_interval` over the runs. Several: each build's mean over its runs, then
    :func:`t_interval` over the build means (the module docstring says why). NaN values are left out.
    """
    groups: dict[str | None, list[float]] = {}
    for key, value in values.items():
        if value is not None and not math.isnan(value):
            groups.setdefault(build_of(key), []).append(value)
    if len(groups) <= 1:
        return t_interval([v for vs in groups.values() for v in vs], low, high)
    return t_interval([float(np.mean(vs)) for vs in groups.values()], low, high)


def paired_differences(cells: Mapping[str, Any], paired: Mapping[str, Any]) -> dict[str, Any]:
    """Per cell and metric, the difference to the baseline cell on the same run (seed, or build and seed):
    mean and 95% CI over the runs both finished, pooled as :func:`pooled_interval` (``{"baseline",
    "metrics", "cells": {cell: {metric: {"mean", "ci", "values", "seeds"}}}}``; ``seeds`` lists the run keys,
    as integers without builds). Seed s of every cell starts from the same data order and the same first
    sampling (on the same build), so the per-run difference removes what the runs share."""
    baseline = cells.get(paired["baseline"], {}).get("per_seed", {})
    out: dict[str, Any] = {"baseline": paired["baseline"], "metrics": list(paired["metrics"]), "cells": {}}
    for name, entry in cells.items():
        rows = {}
        for metric in paired["metrics"]:
            runs = sorted(
                (
                    r
                    for r in entry["per_seed"]
                    if r in baseline and metric in entry["per_seed"][r] and metric in baseline[r]
                ),
                key=run_order,
            )
            diffs = {r: entry["per_seed"][r][metric] - baseline[r][metric] for r in runs}
            mean, lo, hi = pooled_interval(diffs)
            keys = [int(r) if build_of(r) is None else r for r in runs]
            rows[metric] = {"mean": mean, "ci": [lo, hi], "values": list(diffs.values()), "seeds": keys}
        out["cells"][name] = rows
    return out


def metric_format(key: str) -> tuple[bool, int]:
    """(shown as percent, digits) of a metric key."""
    if key.startswith(PROBABILITIES):
        return True, 1
    if key in ("kl/reference", "entropy"):
        return False, 3
    return False, 1


def format_estimate(summary: Mapping[str, Any] | None, key: str, percent: bool, digits: int = 1) -> str:
    if summary is None or key not in summary:
        return "—"
    s = summary[key]
    scale = 100.0 if percent else 1.0
    mean, (lo, hi) = s["mean"] * scale, (s["ci"][0] * scale, s["ci"][1] * scale)
    if math.isnan(mean):
        return "—"
    if lo == hi:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
