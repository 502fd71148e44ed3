"""Reward functions for TRL (``reward_funcs``): correctness through :mod:`sagerl.grading`, and format.

TRL calls each with the completions and every dataset column as keyword lists; the training dataset built
by :mod:`sagerl.train.run` has the columns ``answer`` and ``kind`` ("math" or "kk").
"""

from __future__ import annotations

from sagerl.grading import extract_boxed, grade


def completion_text(completion) -> str:
    """The text of a TRL completion: a string, or a conversational list of messages (the last one's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # content blocks
            return "".join(block.get("text", "") for block in content if isinstance(block, dict))
        return str(content)
    return ""


class CorrectnessReward:
    """1.0 when the completion's final answer is right (math: last ``\\boxed{}`` via math-verify under a
    per-answer timeout; kk: every person's role), else 0.0. Optionally falls back to the last number."""

    __name__ = "correctness"

    def __init__(self, fallback_to_last_number: bool = False) -> None:
        self.fallback_to_last_number = fallback_to_last_number

    def __call__(self, completions, answer, kind=None, **kwargs) -> list[float]:
        kinds = kind if kind is not None else ["math"] * len(completions)
        return [
            float(grade(completion_text(c), a, k, fallback_to_last_number=self.fallback_to_last_number)[1])
            for c, a, k in zip(completions, answer, kinds, strict=True)
        ]


class FormatReward:
    """1.0 when the completion contains a complete ``\\boxed{...}`` (the format the prompts ask for), else 0.0."""

    __name__ = "format"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [float(extract_boxed(completion_text(c)) is not None) for c in completions]
