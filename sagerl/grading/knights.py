"""Knights-and-Knaves checker: does a completion's final answer give every person the right role?

The puzzles are those of "On Memorization of Large Language Models in Logical Reasoning" (Xie et al.,
2024, K-and-K) as packaged by Logic-RL (Xie et al., 2025); the reference answer reads
"Harper is a knight, Benjamin is a knave, and Evelyn is a knave." or, one per line, "(1) Harper is a knight".
Model text is only scanned with regular expressions; it never makes these functions raise.
"""

from __future__ import annotations

import re

from sagerl.grading.answers import find_last_boxed

__all__ = ["kk_extract", "kk_final_answer", "kk_is_correct", "kk_reference_roles"]

_REFERENCE = re.compile(r"([^\W\d_][\w'-]*)\s+is\s+an?\s+(knight|knave)\b", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_MARKER = re.compile(r"\b(?:answer|conclusion)s?\b", re.IGNORECASE)
_ADVERB = r"(?:(?:also|therefore|thus|definitely|clearly|indeed|actually|certainly)\s+)?"
_OPPOSITE = {"knight": "knave", "knave": "knight"}


def kk_reference_roles(answer: str) -> dict[str, str]:
    """Roles of a reference answer: {name: "knight" | "knave"}, in the order the answer names them.

    Raises:
        ValueError: the answer holds no "Name is a knight/knave" statement, or gives one name two roles.
    """
    roles: dict[str, str] = {}
    for name, role in _REFERENCE.findall(answer):
        role = role.lower()
        if roles.get(name, role) != role:
            raise ValueError(f"reference answer gives {name} two roles: {answer!r}")
        roles[name] = role
    if not roles:
        raise ValueError(f"reference answer has no 'Name is a knight/knave' statement: {answer!r}")
    return roles


def kk_final_answer(completion: str) -> str:
    """The part of a completion that holds its final answer.

    The later of its final box (:func:`sagerl.grading.find_last_boxed`: the last box it opens, with boxes
    joined into one answer) and its last ``<answer>...</answer>`` block; without either, the text after
    the last "answer" or "conclusion" (any case); without that, the whole text. A final box that never
    closes is no answer: the result is then ``""`` (the completion was cut off before its answer).
    """
    candidates: list[tuple[int, str]] = []
    boxed = find_last_boxed(completion)
    if boxed is not None:
        candidates.append((boxed[1], boxed[2] or ""))
    tags = list(_ANSWER_TAG.finditer(completion))
    if tags:
        candidates.append((tags[-1].end(), tags[-1].group(1)))
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    markers = list(_MARKER.finditer(completion))
    if markers:
        return completion[markers[-1].end() :]
    return completion


def _claims(section: str, names: list[str]) -> dict[str, set[str]]:
    """Every role that ``section`` states for each of ``names``, singly or in a group ("A and B are knights")."""
    claims: dict[str, set[str]] = {name: set() for name in names}
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    canonical = {name.lower(): name for name in names}
    single = re.compile(
        rf"\b({alternatives})\b\s*(?:(?:is|was)\s+{_ADVERB}|[:=\-–—]\s*)?(not\s+)?(?:an?\s+)?(knight|knave)s?\b",
        re.IGNORECASE,
    )
    group = re.compile(
        rf"((?:\b(?:{alternatives})\b(?:\s*,\s*and\s+|\s*,\s*|\s+and\s+))+\b(?:{alternatives})\b)"
        rf"\s+are\s+{_ADVERB}(?:both\s+|all\s+)?(not\s+)?(knight|knave)s\b",
        re.IGNORECASE,
    )
    name_in_group = re.compile(rf"\b({alternatives})\b", re.IGNORECASE)
    for match in single.finditer(section):
        name, negated, role = match.group(1), match.group(2), match.group(3).lower()
        claims[canonical[name.lower()]].add(_OPPOSITE[role] if negated else role)
    for match in group.finditer(section):
        negated, role = match.group(2), match.group(3).lower()
        for name in name_in_group.findall(match.group(1)):
            claims[canonical[name.lower()]].add(_OPPOSITE[role] if negated else role)
    return claims


def kk_extract(completion: str, answer: str) -> str | None:
    """The roles the completion's final answer states for the reference's people, as one line; None if none.

    Written like the reference: "Harper is a knight, Evelyn is a knave"; a person given both roles reads
    "Harper is a knight and a knave". People the final answer does not mention are left out.

    Raises:
        ValueError: as :func:`kk_reference_roles`, for a malformed reference answer.
    """
    names = list(kk_reference_roles(answer))
    claims = _claims(kk_final_answer(completion), names)
    parts = [
        f"{name} is " + " and ".join(f"a {role}" for role in sorted(claims[name]))
        for name in names
        if claims[name]
    ]
    return ", ".join(parts) if parts else None


def kk_is_correct(completion: str, answer: str) -> bool:
    """True when the completion's final answer (:func:`kk_final_answer`) gives every person of the
    reference ``answer`` exactly the reference role: no one missing, no one given the wrong or both roles.

    Accepted phrasings: "Name is a knight", "Name is not a knave", "Name: knight", "(1) Name is a knight",
    "A and B are knights", "A, B, and C are all knaves" (any case).

    Raises:
        ValueError: as :func:`kk_reference_roles`, for a malformed reference answer (never for the completion).
    """
    reference = kk_reference_roles(answer)
    claims = _claims(kk_final_answer(completion), list(reference))
    return all(claims[name] == {role} for name, role in reference.items())
