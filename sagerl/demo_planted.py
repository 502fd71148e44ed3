"""``make demo``'s last stage: GRPO against the planted frontier's winner on the planted-strategy task.

The planted task (:mod:`sagerl.tasks.planted`) knows which problems only the rare strategy solves; its tiny
reference model (the shipped build ``b1``, :mod:`sagerl.tasks.planted_model`) solves most of the 64 held-out
rare problems at 64 samples. The stage trains GRPO and :data:`BEST` (the method that keeps the rare support at
GRPO's common pass@1 in studies/pareto.yaml, docs/methods.md) for 2 seeds each through ``sagerl study``'s machinery
(float32, one torch thread per run, two runs at once on 2 cores), evaluates them, and prints how many rare
problems each still solves: the support a method keeps. About a minute on 2 CPU cores.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

BEST = "pkpo-anneal@cosine"
"""The planted frontier's winner (studies/pareto.yaml and pareto-confirm.yaml, docs/methods.md): PKPO with k
annealed from 8 to 1 by a cosine keeps most of the rare problems at GRPO's common pass@1 (fixed-k PKPO keeps
them all but pays 16-22 points of common pass@1)."""
CELLS: dict[str, dict[str, Any]] = {
    "grpo": {"preset": "grpo"},
    "pkpo-anneal@cosine": {
        "preset": "pkpo-anneal",
        "name": "pkpo-anneal@cosine",
        "set": {"passk_k_schedule": "cosine"},
    },
}
"""Each method's study cell (as studies/pareto.yaml writes them)."""
SEEDS = (0, 1)


def planted_study(methods: tuple[str, ...] = ("grpo", BEST), seeds: tuple[int, ...] = SEEDS):
    """The stage's study: the methods on the planted task at studies/exploration.yaml's settings."""
    from sagerl.study import parse_study

    spec: dict[str, Any] = {
        "name": "demo-planted",
        "model": "planted-reference",
        "train": {
            "dataset": "planted_train",
            "steps": 100,
            "set": {
                "per_device_train_batch_size": 64,
                "gradient_accumulation_steps": 1,
                "steps_per_generation": 2,
                "learning_rate": 1.0e-3,
                "dtype": "float32",
                "max_completion_length": 24,
                "save_steps": 100,
            },
        },
        "eval": {
            "datasets": ["planted_common", "planted_rare"],
            "n": 64,
            "max_new_tokens": 24,
            "dtype": "float32",
        },
        "seeds": list(seeds),
        "paired": {"baseline": methods[0], "metrics": ["solved/planted_rare", "pass@1/planted_common"]},
        "cells": [CELLS.get(m, {"preset": m}) for m in methods],
    }
    return parse_study(spec, "make demo")


def rare_support_lines(data: dict) -> list[str]:
    """Plain lines (under 80 columns) of the rare problems each method still solves, per seed and on average,
    with common pass@1, from :func:`sagerl.study.table.collect`'s data."""
    ref = data.get("reference") or {}
    total = 64
    width = max([14, *(len(name) for name in data["cells"])])
    lines = [
        f"reference model: {ref.get('solved/planted_rare', float('nan')):.0f} of {total} rare problems solved "
        f"(64 samples), common pass@1 {100 * ref.get('pass@1/planted_common', float('nan')):.1f}%",
        f"{'method':{width}s} {'rare solved per seed':>22s} {'mean':>6s} {'common pass@1':>14s}",
    ]
    for name, entry in data["cells"].items():
        per_seed = [
            entry["per_seed"][s].get("solved/planted_rare", float("nan")) for s in sorted(entry["per_seed"])
        ]
        summary = entry.get("summary", {})
        mean = summary.get("solved/planted_rare", {}).get("mean", float("nan"))
        common = summary.get("pass@1/planted_common", {}).get("mean", float("nan"))
        seeds = ", ".join(f"{v:.0f}" for v in per_seed)
        lines.append(f"{name:{width}s} {seeds:>22s} {mean:6.1f} {100 * common:13.1f}%")
    return lines


def run_planted_comparison(out: Path, log=print, progress=None) -> dict:
    """Run (or resume) the stage into ``out`` and return the study's collected data.

    Args:
        log: receives the result lines (:func:`rare_support_lines`); None prints nothing.
        progress: receives one line per run as it finishes (``[2/4] grpo seed 1: ok (12 s)``); None: quiet.
    """
    from sagerl.study import run_study
    from sagerl.study.table import collect

    study = planted_study()

    def runs_only(line: str) -> None:  # the per-run lines, not the reference's or the total's
        if progress is not None and line.startswith("["):
            progress(line)

    # two runs at once where there are two cores: every run has the study's one thread, so the numbers are
    # those of one at a time (sagerl.study.runner), in about half the time
    run_study(study, out, log=runs_only, jobs=min(2, os.cpu_count() or 1))
    data = collect(study, out)
    for line in rare_support_lines(data) if log is not None else ():
        log(line)
    return data
