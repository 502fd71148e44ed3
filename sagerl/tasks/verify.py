"""Grading at the task level: a task's own verifier where it needs the problem, :mod:`sagerl.grading` otherwise.

:func:`sagerl.grading.grade` compares a completion's final answer with the reference answer and never sees
the problem. A task whose correctness depends on the problem itself (the planted-strategy task checks
that the stated strategy, applied to this problem, gives the digit written) registers its verifier here
under its grading kind. Training rewards and evaluation both grade through :func:`grade_completion`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from sagerl.grading import answer_key, extract_answer, grade, kk_extract
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


_SPACE = re.compile(r"\s+")


def answer_normal_form(answer: str | None) -> str | None:
    """The textual normal form of a final answer: white space removed, then surrounding ``$`` signs; None (no
    answer) for None or an empty answer. ``"x = 3"`` and ``"x=3"`` are one answer; ``"1/2"`` and ``"0.5"`` are two
    here (:func:`final_answer` gives math answers their value's form instead, :func:`sagerl.grading.answer_key`)."""
    if answer is None:
        return None
    text = _SPACE.sub("", answer).strip("$")
    return text or None


def final_answer(
    completion: str, row: Mapping[str, Any] | None = None, *, fallback_to_last_number: bool = False
) -> str | None:
    """The final answer of a completion in its normal form, as the grader of the row's kind reads it, without
    grading it: a task verifier's reading (the planted task's boxed digit), the Knights-and-Knaves roles, or the
    final box (the last number with ``fallback_to_last_number``). None: no answer.

    The normal form of a math answer (kind ``math``) is its value's, :func:`sagerl.grading.answer_key` (math-verify's
    parse, exact rationals for numbers): answers the grader holds equal are one answer (``1/2``, ``0.5`` and
    ``\\frac{1}{2}`` all read ``1/2``), so outcome counts and answer partitions count values, not spellings. Other
    kinds, whose answers have one spelling, take :func:`answer_normal_form`.

    Args:
        completion: the completion's text. row: its training row (``kind``, ``answer``, ``problem``; a row
            without ``kind`` is math).
    """
    row = row or {}
    kind = row.get("kind") or "math"
    if kind in TASK_VERIFIERS and row.get("problem") is not None:
        answer = TASK_VERIFIERS[kind](row["problem"], completion)[0]
    elif kind == "kk" and row.get("answer"):
        answer = kk_extract(completion, row["answer"])
    else:
        answer = extract_answer(completion, fallback_to_last_number=fallback_to_last_number)
        if kind == "math" and answer_normal_form(answer) is not None:
            return answer_key(answer.strip().strip("$"))
    return answer_normal_form(answer)
