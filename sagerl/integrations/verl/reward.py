"""sagerl's grader as verl's reward function: ``reward.custom_reward_function.path=<this file>``.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` for each response (its naive
and DAPO reward managers). The reward is 1.0 when sagerl's grader accepts the completion (last
complete ``\\boxed{}``, math-verify with a per-answer time limit; the Knights-and-Knaves checker for the ``kk``
kind, as :func:`sagerl.grading.grade` decides) and 0.0 otherwise, as in sagerl's TRL training.
"""

from __future__ import annotations

from typing import Any

from sagerl.grading import grade


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, **kwargs: Any
) -> float:
    """1.0 if ``solution_str`` answers ``ground_truth`` (grading kind from ``extra_info["kind"]``, default math)."""
    kind = (extra_info or {}).get("kind", "math")
    return 1.0 if grade(solution_str, ground_truth, kind)[1] else 0.0
