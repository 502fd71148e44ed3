"""Grading: read the final answer of a completion and check it against the reference.

- :mod:`sagerl.grading.answers`: extraction (the final box: the last ``\\boxed{}``/``\\fbox{}`` opened, boxes
  joined only by separators form one answer; the last number).
- :mod:`sagerl.grading.numbers`: exact comparison of numeric answers (where math-verify rounds).
- :mod:`sagerl.grading.verify`: math equivalence with math-verify under a per-answer time limit; ``grade``;
  ``answer_key``, the identity of an answer (equal values, one key).
- :mod:`sagerl.grading.knights`: the Knights-and-Knaves checker.

This layer imports nothing from the rest of sagerl (it sits below ``sagerl.tasks``).
"""

from sagerl.grading.answers import extract_answer, extract_boxed, extract_last_number, find_last_boxed
from sagerl.grading.knights import kk_extract, kk_final_answer, kk_is_correct, kk_reference_roles
from sagerl.grading.verify import answer_key, answers_match, grade, is_correct

__all__ = [
    "answer_key",
    "answers_match",
    "extract_answer",
    "extract_boxed",
    "extract_last_number",
    "find_last_boxed",
    "grade",
    "is_correct",
    "kk_extract",
    "kk_final_answer",
    "kk_is_correct",
    "kk_reference_roles",
]
