"""Reward functions for TRL (``reward_funcs``): correctness through :mod:`sagerl.grading`, and format.

TRL calls each with the completions and every dataset column as keyword lists; the training dataset built
by :mod:`sagerl.train.run` has the columns ``answer``, ``kind`` (a grading kind) and ``problem`` (the
problem text, for task verifiers).
"""

from __future__ import annotations

from sagerl.grading import extract_boxed
from sagerl.tasks import grade_completion
from sagerl.tasks.verify import final_answer


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
    """1.0 when the completion's final answer is right (:func:`sagerl.tasks.grade_completion`: math: the final
    ``\\boxed{}`` via math-verify under a per-answer timeout; kk: every person's role; task verifiers such as
    the planted task's), else 0.0. Optionally falls back to the last number."""

    __name__ = "correctness"

    def __init__(self, fallback_to_last_number: bool = False) -> None:
        self.fallback_to_last_number = fallback_to_last_number

    def __call__(self, completions, answer, kind=None, problem=None, **kwargs) -> list[float]:
        kinds = kind if kind is not None else ["math"] * len(completions)
        problems = problem if problem is not None else [None] * len(completions)
        return [
            float(
                grade_completion(
                    completion_text(c), a, k, p, fallback_to_last_number=self.fallback_to_last_number
                )[1]
            )
            for c, a, k, p in zip(completions, answer, kinds, problems, strict=True)
        ]


class FormatReward:
    """1.0 when the completion has a final box (the format the prompts ask for): its last box opened
    (``\\boxed`` or ``\\fbox``) closes, as :func:`sagerl.grading.extract_boxed` reads it; else 0.0."""

    __name__ = "format"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [float(extract_boxed(completion_text(c)) is not None) for c in completions]


class AnswerReader:
    """A completion's final answer in its normal form, read as :class:`CorrectnessReward` grades it (the same
    ``fallback_to_last_number``): the ``final_answer`` of :class:`sagerl.train.SAGETrainer` in ``sagerl train``."""

    def __init__(self, fallback_to_last_number: bool = False) -> None:
        self.fallback_to_last_number = fallback_to_last_number

    def __call__(self, text: str, row: dict) -> str | None:
        return final_answer(text, row, fallback_to_last_number=self.fallback_to_last_number)
