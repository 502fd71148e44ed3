"""``results.json``: pass@k, mean accuracy and bootstrap CIs per dataset and averaged across datasets.

Layout::

    {
      "meta": {"model": ..., "n": 16, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512, "seed": 0,
               "backend": "hf", "ks": [1, 2, 4, 8, 16], "sagerl_version": ..., "started_at": ..., ...},
      "datasets": {
        "aime24": {"pass@1": 0.1, "pass@2": 0.17, ..., "ci": {"pass@1": [lo, hi], ...},
                   "n": 16, "num_problems": 30, "mean_accuracy": 0.1,
                   "mean_num_tokens": 402.3, "truncated_fraction": 0.05},
        ...
      },
      "average": {same keys; the unweighted mean of the datasets, "datasets": [names]}
    }

Values are probabilities in [0, 1]. ``ci`` holds 95% percentile bootstrap intervals over problems.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sagerl.errors import SagerlError
from sagerl.eval.passk import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    bootstrap_average_ci,
    bootstrap_ci,
    ks_up_to,
    pass_at_k_matrix,
)
from sagerl.eval.samples import write_json_atomic

RESULTS_FILE = "results.json"


def summarize(
    correct_counts: Mapping[str, Sequence[int]],
    n: int,
    *,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """pass@k for k in :func:`ks_up_to` (n), with CIs, per dataset and on average.

    Args:
        correct_counts: dataset name -> per-problem correct counts (each in [0, n]); at least one problem each.
        n: samples per problem.
        extra: optional dataset name -> more keys to store in that dataset's entry.

    Returns:
        ``{"ks": [...], "datasets": {name: entry}, "average": entry}``; entry keys ``pass@k``, ``ci``, ``n``,
        ``num_problems``, ``mean_accuracy``.
    """
    ks = ks_up_to(n)
    if not correct_counts:
        raise SagerlError("no dataset to summarize")
    per_dataset: dict[str, dict[str, Any]] = {}
    matrices = []
    for name, counts in correct_counts.items():
        counts = np.asarray(counts, dtype=np.int64)
        if counts.size == 0:
            raise SagerlError(f"dataset {name!r} has no problems to summarize")
        mat = pass_at_k_matrix(n, counts, ks)  # (P, K)
        matrices.append(mat)
        ci = bootstrap_ci(mat, resamples=resamples, confidence=confidence, seed=seed)
        entry = _entry(ks, mat.mean(axis=0), ci, n, int(counts.size))
        entry["mean_accuracy"] = float(counts.sum() / (n * counts.size))
        if extra and name in extra:
            entry.update(extra[name])
        per_dataset[name] = entry
    avg_values = np.mean([m.mean(axis=0) for m in matrices], axis=0)
    avg_ci = bootstrap_average_ci(matrices, resamples=resamples, confidence=confidence, seed=seed)
    average = _entry(ks, avg_values, avg_ci, n, int(sum(m.shape[0] for m in matrices)))
    average["mean_accuracy"] = float(np.mean([e["mean_accuracy"] for e in per_dataset.values()]))
    average["datasets"] = list(per_dataset)
    return {"ks": ks, "datasets": per_dataset, "average": average}


def _entry(ks: list[int], values: np.ndarray, ci: np.ndarray, n: int, num_problems: int) -> dict[str, Any]:
    entry: dict[str, Any] = {f"pass@{k}": float(v) for k, v in zip(ks, values, strict=True)}
    entry["ci"] = {f"pass@{k}": [float(lo), float(hi)] for k, (lo, hi) in zip(ks, ci, strict=True)}
    entry["n"] = n
    entry["num_problems"] = num_problems
    return entry


def write_results(out: str | Path, results: Mapping[str, Any]) -> Path:
    """Write ``results.json`` atomically in the run folder ``out``; returns its path."""
    path = Path(out) / RESULTS_FILE
    write_json_atomic(path, results)
    return path


def read_results(run_dir: str | Path) -> dict[str, Any]:
    """Read a run's ``results.json``.

    Raises:
        SagerlError: the folder has no readable ``results.json`` (the message names the folder).
    """
    path = Path(run_dir) / RESULTS_FILE if Path(run_dir).is_dir() else Path(run_dir)
    if not path.is_file():
        raise SagerlError(f"{run_dir}: no {RESULTS_FILE} (not a finished `sagerl eval` run folder?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SagerlError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or "datasets" not in data or "average" not in data:
        raise SagerlError(f"{path}: not a sagerl results file (needs 'datasets' and 'average')")
    return data


def pass_at_k_points(entry: Mapping[str, Any]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(ks, values, ci_low, ci_high) of a results entry, sorted by k."""
    ks = sorted(int(key.split("@", 1)[1]) for key in entry if key.startswith("pass@"))
    vals = [float(entry[f"pass@{k}"]) for k in ks]
    ci = entry.get("ci", {})
    lo = [float(ci.get(f"pass@{k}", [v, v])[0]) for k, v in zip(ks, vals, strict=True)]
    hi = [float(ci.get(f"pass@{k}", [v, v])[1]) for k, v in zip(ks, vals, strict=True)]
    return ks, vals, lo, hi
