"""Grading at the task level: a task's own verifier where it needs the problem, :mod:`sagerl.grading` otherwise.

:func:`sagerl.grading.grade` compares a completion's final answer with the reference answer and never sees
the problem. A task whose correctness depends on the problem itself (the planted-strategy task checks
that the stated strategy, applied to this problem, gives the digit written) registers its verifier here
under its grading kind. Training rewards and evaluation both grade through :func:`grade_completion`.
"""

from __future__ import annotations

from collections.abc import Callable

from sagerl.grading import grade
from sagerl.tasks import planted

TASK_VERIFIERS: dict[str, Callable[[str, str], tuple[str | None, bool]]] = {"planted": planted.verify}
"""Grading kind -> verifier(problem text, completion) -> (answer read, correct)."""


def grade_completion(
    completion: str,
    answer: str,
    kind: str = "math",
    problem: str | None = None,
    *,
    fallback_to_last_number: bool = False,
) -> tuple[str | None, bool]:
    """(the answer read from ``completion``, whether it is correct) for a problem of grading ``kind``.

    Raises:
        ValueError: an unknown kind, or a task verifier's kind without the ``problem`` text.
    """
    if kind in TASK_VERIFIERS:
        if problem is None:
            raise ValueError(f"grading kind {kind!r} needs the problem text")
        return TASK_VERIFIERS[kind](problem, completion)
    return grade(completion, answer, kind, fallback_to_last_number=fallback_to_last_number)
