"""Final-answer extraction from model text: the last complete ``\\boxed{...}``, or the last number.

Model text is data: it is only scanned, never evaluated. Every function here runs in time linear in the
length of the text and never raises on any string.
"""

from __future__ import annotations

import re

_BOXED = "\\boxed"

# A number as people write it: optional sign, digits (optionally grouped by thousands commas), an optional
# decimal part, an optional "/denominator". A minus sign counts only when it does not follow a word character
# or a closing bracket, so "3-7" yields "7", not "-7".
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}])-)?"  # sign
    r"(?:\d{1,3}(?:,\d{3})+|\d+)?"  # integer part, "1,200" or "1200" (may be absent: ".5")
    r"(?:\.\d+)?"  # decimal part
    r"(?:/\d+(?:\.\d+)?)?"  # denominator
)
_DIGIT = re.compile(r"\d")
_BARE_TOKEN = re.compile(r"[^\s$]+")


def _closing_braces(text: str) -> dict[int, int]:
    """Map the index of every ``{`` that closes to the index just past its ``}`` (one linear pass).

    A backslash escapes the next character, so ``\\{`` and ``\\}`` do not count, and ``\\\\}`` (a LaTeX
    line break, then ``}``) does close a group.
    """
    closes: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            closes[stack.pop()] = i + 1
        i += 1
    return closes


def _boxed_at(text: str, start: int, closes: dict[int, int]) -> tuple[str, int] | None:
    """Parse the ``\\boxed`` that starts at ``start``: (its content, index past it), or None if incomplete."""
    i = start + len(_BOXED)
    if i < len(text) and text[i].isalpha():
        return None  # another command, such as \boxedsomething
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        end = closes.get(j)
        if end is None:
            return None
        return text[j + 1 : end - 1], end
    if j > i:  # "\boxed 5": the run of characters up to white space or "$"
        match = _BARE_TOKEN.match(text, j)
        if match is None:
            return None
        content = match.group(0).rstrip(".,;")
        return (content, match.end()) if content else None
    return None


def find_last_boxed(text: str) -> tuple[int, int, str] | None:
    """The last complete ``\\boxed`` of ``text`` as (start index, end index, content); None if none.

    The rules are those of :func:`extract_boxed`, which returns only the content.
    """
    if _BOXED not in text:
        return None
    closes = _closing_braces(text)
    found: tuple[int, int, str] | None = None
    pos = 0
    while True:
        start = text.find(_BOXED, pos)
        if start < 0:
            return found
        parsed = _boxed_at(text, start, closes)
        if parsed is None:
            pos = start + len(_BOXED)
        else:
            content, pos = parsed
            found = (start, pos, content)


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` in ``text``; None when there is none.

    Braces must balance (nesting is fine: ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). A box that never
    closes is skipped, so an earlier complete box wins over a truncated last one. ``\\boxed 5`` (no braces)
    gives ``5``. A box nested inside another belongs to the outer box's content. ``\\boxed{}`` gives ``""``.
    Runs in time linear in ``len(text)``, also on degenerate text full of unclosed boxes.
    """
    found = find_last_boxed(text)
    return None if found is None else found[2]


def extract_last_number(text: str) -> str | None:
    """The last number in ``text``, normalised: ``-3``, ``1,200`` -> ``1200``, ``2.5``, ``3/4``; None if none.

    Thousands commas are removed; a trailing sentence period is not part of the number.
    """
    last: str | None = None
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        if _DIGIT.search(token):
            last = token
    return None if last is None else last.replace(",", "")


def extract_answer(text: str, fallback_to_last_number: bool = False) -> str | None:
    """The final answer of a completion: the content of its last complete ``\\boxed{}``.

    A missing or empty box gives None, or, when ``fallback_to_last_number`` is true, the last number of the
    text (:func:`extract_last_number`). A box that holds only another box is unwrapped. The result is
    stripped of surrounding white space.
    """
    boxed = extract_boxed(text)
    while boxed is not None and boxed.strip().startswith(_BOXED):  # \boxed{\boxed{5}} -> 5
        inner = extract_boxed(boxed)
        if inner is None or boxed.strip() not in (f"{_BOXED}{{{inner}}}", f"{_BOXED} {inner}"):
            break
        boxed = inner
    if boxed is not None and boxed.strip():
        return boxed.strip()
    if fallback_to_last_number:
        return extract_last_number(text)
    return None
