"""Statistics over a study's runs, shared by its table and its frontier: Student's t intervals, the pooled
interval over reference builds, paired differences between cells, and how a metric's estimate is written.

Runs are keyed by run key: ``"<seed>"``, or ``"<build>/<seed>"`` on a reference build (:class:`sagerl.study.spec.Cell`).
:mod:`sagerl.study.table` says why the intervals are pooled as they are.

The t quantile is :func:`scipy.stats.t.ppf`, exact at every number of degrees of freedom (sagerl's first
intervals read a table that stopped at 14 degrees of freedom and used 1.96 beyond: 4-8% too narrow at
15-30). The interval of one value is undefined (NaN, written ``n/a``): one run says nothing about the
spread between runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PROBABILITIES = ("pass@", "strategy/", "strategy_correct/")
"""Metrics that are probabilities (their intervals are cut to [0, 1]; every other metric is >= 0)."""
ONE_BUILD_MARK = "†"
"""Written after an estimate of a study on builds that only one build's runs make (:func:`pooled_over`)."""
ONE_BUILD_NOTE = (
    f"{ONE_BUILD_MARK}: only one build has finished runs here: the mean and its CI are over that build's seeds, "
    "not over builds, so the CI leaves out the spread between builds (it is usually narrower than the others')."
)
"""The note under a table with :data:`ONE_BUILD_MARK` in it."""
MIN_PAIRED_RUNS = 2
"""Paired runs (seeds, or builds × seeds) a Pareto dominance needs on each axis: the fewest with an interval
(:func:`sagerl.study.frontier.dominates`; :func:`sagerl.study.spec.parse_study` checks a ``pareto:`` study)."""


def t_quantile(df: int, level: float = 0.95) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (t_{0.975, df} for 95%):
    :func:`scipy.stats.t.ppf`, exact at every ``df`` (2.0860 at 20, 2.0423 at 30, 1.9600 only as df -> inf).

    Raises:
        ValueError: ``df`` < 1 or ``level`` outside (0, 1).
    """
    from scipy import stats  # here: importing sagerl.study (the CLI) stays fast

    if df < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"t_quantile: needs df >= 1 and 0 < level < 1, got df={df}, level={level}")
    return float(stats.t.ppf(0.5 + level / 2.0, df))


def t_interval(
    values: Sequence[float], low: float = -math.inf, high: float = math.inf
) -> tuple[float, float, float]:
    """(mean, lower, upper): Student's t 95% interval of the mean, mean ± t_{0.975, n−1}·sd/√n over the n
    values (sd with n − 1; t from :func:`t_quantile`), cut to the metric's range [low, high].

    NaN values are left out; all-NaN gives NaNs, and one value (mean, NaN, NaN): its interval is undefined
    (written ``n/a``), never zero-width. Units are the values'.
    """
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if x.size == 1:
        return (mean, math.nan, math.nan)
    half = t_quantile(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, max(low, mean - half), min(high, mean + half))


def build_of(run_key: str) -> str | None:
    """The build of a run key (``"b2/3"`` -> ``"b2"``; ``"3"`` -> None)."""
    return run_key.split("/", 1)[0] if "/" in run_key else None


def run_order(run_key: str) -> tuple[str, int]:
    build, _, seed = run_key.rpartition("/")
    return (build, int(seed))


def _build_groups(values: Mapping[str, float]) -> dict[str | None, list[float]]:
    """The finite values of each build (``None``: runs without builds)."""
    groups: dict[str | None, list[float]] = {}
    for key, value in values.items():
        if value is not None and not math.isnan(value):
            groups.setdefault(build_of(key), []).append(value)
    return groups


def pooled_over(values: Mapping[str, float]) -> str:
    """How :func:`pooled_interval` pools ``values`` (keyed by run key): ``"seeds"`` (runs without builds),
    ``"builds"`` (two builds or more with a value: a t interval over the build means), or ``"one build"``
    (runs on builds, but at most one build with a value: the interval falls back to that build's seeds, which
    leaves out the spread between builds; the tables mark it with :data:`ONE_BUILD_MARK`)."""
    if not any(build_of(key) is not None for key in values):
        return "seeds"
    return "builds" if len(_build_groups(values)) > 1 else "one build"


def pooled_interval(
    values: Mapping[str, float], low: float = -math.inf, high: float = math.inf
) -> tuple[float, float, float]:
    """(mean, lower, upper) of per-run values keyed by run key (``"3"``, or ``"b2/3"`` on a build).

    One build (or none): :func:`t_interval` over the runs. Several: each build's mean over its runs, then
    :func:`t_interval` over the build means (the module docstring says why). NaN values are left out.
    :func:`pooled_over` says which of the two it was.
    """
    groups = _build_groups(values)
    if len(groups) <= 1:
        return t_interval([v for vs in groups.values() for v in vs], low, high)
    return t_interval([float(np.mean(vs)) for vs in groups.values()], low, high)


def paired_differences(cells: Mapping[str, Any], paired: Mapping[str, Any]) -> dict[str, Any]:
    """Per cell and metric, the difference to the baseline cell on the same run (seed, or build and seed):
    mean and 95% CI over the runs both finished, pooled as :func:`pooled_interval` (``{"baseline",
    "metrics", "cells": {cell: {metric: {"mean", "ci", "values", "seeds", "pooled"}}}}``; ``seeds`` lists the
    run keys, as integers without builds; ``pooled`` is :func:`pooled_over`'s word). Seed s of every cell starts
    from the same data order and the same first sampling (on the same build), so the per-run difference removes
    what the runs share."""
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
            rows[metric] = {
                "mean": mean,
                "ci": [lo, hi],
                "values": list(diffs.values()),
                "seeds": keys,
                "pooled": pooled_over(diffs),
            }
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
    """``"mean [lower, upper]"`` of ``summary[key]`` (``{"mean", "ci", "pooled"?}``) in percent or as is, with
    ``digits`` decimals: ``"—"`` without a mean, ``"mean [n/a]"`` when the interval is undefined (one run;
    NaN, or None as study.json writes NaN), the mean alone for a point value (lower = upper = mean, as the
    reference's), and :data:`ONE_BUILD_MARK` after an estimate pooled over one build's seeds."""
    if summary is None or key not in summary:
        return "—"
    s = summary[key]
    scale = 100.0 if percent else 1.0
    if s["mean"] is None or math.isnan(s["mean"]):
        return "—"
    mark = ONE_BUILD_MARK if s.get("pooled") == "one build" else ""
    mean = s["mean"] * scale
    lo, hi = s["ci"]
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{mean:.{digits}f} [n/a]{mark}"
    lo, hi = lo * scale, hi * scale
    if lo == hi == mean:
        return f"{mean:.{digits}f}{mark}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]{mark}"
