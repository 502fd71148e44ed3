"""Final-answer extraction from model text: the final ``\\boxed{...}`` (or ``\\fbox{...}``), or the last number.

The rule for the final answer (:func:`find_last_boxed`):

1. A box is ``\\boxed{...}`` or ``\\fbox{...}`` (braces may nest: ``\\boxed{\\frac{1}{2}}``), or the same
   command followed by a bare token (``\\boxed 7``). A box inside a complete box belongs to its content.
2. The last box the model opens is its final answer. If that box never closes (the completion was cut
   off inside it), there is **no** final answer: an earlier complete box does not stand in for it.
3. Boxes that follow one another separated only by commas, "and"/"or", spacing, ``$`` signs or a short
   math phrase such as ``x =`` form one answer, joined with ", " (``\\boxed{2}$ and $x = \\boxed{5}`` gives
   ``2, 5``). A box followed by more reasoning before the next box is superseded by the later one.

Model text is data: it is only scanned, never evaluated. Every function here runs in time linear in the
length of the text and never raises on any string.
"""

from __future__ import annotations

import re

BOX_COMMANDS = ("\\boxed", "\\fbox")
"""The box spellings read as a final answer."""

_BOX_START = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")

# Text allowed between two boxes of one answer: separators, math delimiters, spacing commands and a short
# "name =" phrase ("$ and $x = ", ", \quad y_2 = ", " \text{ or } ").
_JOINER = re.compile(
    r"(?:\s|[,;&$~]|\\[,;:! ]|\\q?quad\b|\\[()\[\]]|\\\\"
    r"|\\text\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b"
    r"|\\?[A-Za-z]+(?:_\{?\w+\}?)?(?:')?\s*=)*"
)
_MAX_JOINER = 40

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
_BARE_TOKEN = re.compile(r"[^\s$}]+")


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


_OPEN = object()  # a box the model opened but never closed


def _box_at(text: str, start: int, end_of_command: int, closes: dict[int, int]) -> tuple[object, int] | None:
    """Parse the box command at ``start``: (content, index past it), (_OPEN, len) if it never closes, or
    None if the command has no argument at all (a mention such as "\\boxed." is not a box)."""
    j = end_of_command
    while j < len(text) and text[j].isspace():
        j += 1
    if j == len(text):
        return _OPEN, len(text)  # cut off right after the command
    if text[j] == "{":
        end = closes.get(j)
        return (_OPEN, len(text)) if end is None else (text[j + 1 : end - 1], end)
    match = _BARE_TOKEN.match(text, j)  # "\boxed 7": the run of characters up to white space, "$" or "}"
    if match is None:
        return None
    content = match.group(0).rstrip(".,;")
    return (content, match.end()) if content else None


def _top_level_boxes(text: str) -> list[tuple[int, int, object]]:
    """Every box not inside a complete box, in order: (start, end, content or _OPEN)."""
    boxes: list[tuple[int, int, object]] = []
    if "\\boxed" not in text and "\\fbox" not in text:
        return boxes
    closes = _closing_braces(text)
    pos = 0
    while True:
        match = _BOX_START.search(text, pos)
        if match is None:
            return boxes
        parsed = _box_at(text, match.start(), match.end(), closes)
        if parsed is None:
            pos = match.end()
            continue
        content, end = parsed
        boxes.append((match.start(), end, content))
        pos = match.end() if content is _OPEN else end


def _joins(between: str) -> bool:
    """True when the text between two boxes only separates parts of one answer (see the module doc)."""
    return len(between) <= _MAX_JOINER and _JOINER.fullmatch(between) is not None


def find_last_boxed(text: str) -> tuple[int, int, str | None] | None:
    """The final answer's boxes as (start index, end index, content); None if ``text`` has no box.

    The rule is in the module docstring. ``content`` is None when the last box the model opened never
    closes (then ``end`` is ``len(text)``); for several boxes that form one answer, ``start`` is the first
    box's start and ``content`` their contents joined with ", ".
    """
    boxes = _top_level_boxes(text)
    if not boxes:
        return None
    start, end, content = boxes[-1]
    if content is _OPEN:
        return start, end, None
    parts = [str(content)]
    for prev_start, prev_end, prev_content in reversed(boxes[:-1]):
        if prev_content is _OPEN or not _joins(text[prev_end:start]):
            break
        parts.append(str(prev_content))
        start = prev_start
    return start, end, ", ".join(p for p in reversed(parts) if p.strip())


def extract_boxed(text: str) -> str | None:
    """Content of the final box of ``text`` (rule in the module docstring); None when there is none.

    ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``, ``\\fbox{7}`` and ``\\boxed 7`` give ``7``, ``\\boxed{}``
    gives ``""``. A final box that never closes gives None, even after an earlier complete box: ``\\boxed{3}
    ... \\boxed{`` has no final answer. ``\\boxed{(1, 4)}, \\boxed{(4, 1)}`` gives ``(1, 4), (4, 1)``.
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
    """The final answer of a completion: the content of its final box (:func:`extract_boxed`).

    No box, or an empty box, gives None, or, when ``fallback_to_last_number`` is true, the last number of
    the text (:func:`extract_last_number`). A final box that never closes gives None even with the
    fallback: the completion was cut off before its answer. A box that holds only another box is
    unwrapped. The result is stripped of surrounding white space.
    """
    found = find_last_boxed(text)
    if found is not None and found[2] is None:
        return None
    boxed = None if found is None else found[2]
    while boxed is not None:  # \boxed{\boxed{5}} -> 5
        inner = _top_level_boxes(boxed.strip())
        if len(inner) != 1 or inner[0][2] is _OPEN or inner[0][:2] != (0, len(boxed.strip())):
            break
        boxed = str(inner[0][2])
    if boxed is not None and boxed.strip():
        return boxed.strip()
    if fallback_to_last_number:
        return extract_last_number(text)
    return None
