"""The unit of every task: one problem with its reference answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("math", "kk", "exact", "planted")
"""Grading kinds: "math" (math-verify on the last ``\\boxed{}``), "kk" (Knights-and-Knaves roles), "exact"
(the last ``\\boxed{}`` equals the answer character for character) and "planted" (the planted-strategy
task's verifier, which also reads the problem: :func:`sagerl.tasks.grade_completion`)."""


@dataclass(frozen=True)
class Problem:
    """One problem.

    Attributes:
        id: unique within its dataset.
        problem: the statement, as in the source (LaTeX kept), without any prompt template.
        answer: the reference answer, as it would stand inside ``\\boxed{}`` (for "kk": "A is a knight, ...").
        dataset: the registry name (``"aime24"``), or the file stem for a JSONL path.
        kind: which grader applies: one of :data:`KINDS`.
        meta: the other fields of the source row (level, subject, names...); not part of equality or hash.
    """

    id: str
    problem: str
    answer: str
    dataset: str
    kind: str = "math"
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
