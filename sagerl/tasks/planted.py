"""The planted-strategy task: synthetic problems whose solution strategies, and which of them is right, are
known exactly, for measuring what an RL objective does to a policy's rare reasoning modes.

A problem (the whole prompt: no template) shows a type letter and four digits, and ends with ``"= "``; the
answer is always the last digit::

    [g] 3 8 5 9 =

A completion names its *strategy* with a marker word (its first token is the choice), applies it (copies
one digit), and boxes the result::

    head 3. \\boxed{3}          dominant strategy "head": copy the first digit
    tail 9 ok. \\boxed{9}       rare strategy "tail": copy the last digit (then an optional check word)
    next 8. \\boxed{8}          wrong strategy "second": copy the second digit
    mid 5. \\boxed{5}           wrong strategy "third": copy the third digit

Problem types fix which strategies are right, by construction of the digits:

- *common* types ``a``-``f``: the first digit equals the last (``[b] 4 1 7 4``), so "head" and "tail" are
  both right;
- *rare* types ``g``, ``h``: the first digit differs from the last, so only "tail" is right;
- the second and third digits always differ from the last, so "second" and "third" are never right.

Each strategy has several surface forms (marker words with distinct first characters), so the decision
is spread over many tokens, as a language model's branching point is; after the rare marker, the check
word (``""``, ``" ok"``, ``" so"``, ``" yes"``) is a second, genuinely uncertain choice, so rare-strategy
trajectories pass through more high-entropy states than dominant ones. That is what lets the benchmark
tell the branch guide with k3 in the loss (a per-state β·q, see the README) apart from the branch guide
with the KL in the reward (trajectory weight Π_t q(s_t)·π_ref).

Everything is exact: :func:`read_strategy` reads the strategy from the marker word (no heuristics),
:func:`solve` gives the answer a strategy produces, and grading is exact equality of the boxed digit
(grading kind ``"exact"``). The reference policy is a tiny character-level model trained on traces whose
strategy frequencies are planted (:data:`REFERENCE_MIX`); see :func:`planted_model`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sagerl.tasks.problem import Problem

__all__ = [
    "CHECK_WORDS",
    "COMMON_TYPES",
    "RARE_TYPES",
    "REFERENCE_MIX",
    "STRATEGIES",
    "TEACHER_MIX",
    "Strategy",
    "make_planted_problems",
    "make_traces",
    "planted_model",
    "problem_type",
    "read_strategy",
    "solve",
]


@dataclass(frozen=True)
class Strategy:
    """One way to solve a planted problem.

    Attributes:
        name: the strategy's name.
        role: ``"dominant"``, ``"rare"`` or ``"wrong"``.
        position: which of the four digits it copies (0-3).
        markers: its surface forms (marker words), each with its share among this strategy's traces.
    """

    name: str
    role: str
    position: int
    markers: tuple[tuple[str, float], ...]


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("head", "dominant", 0, (("head", 0.5), ("first", 0.33), ("lead", 0.17))),
        Strategy("tail", "rare", 3, (("tail", 1 / 3), ("back", 1 / 3), ("end", 1 / 3))),
        Strategy("second", "wrong", 1, (("next", 0.5), ("second", 0.5))),
        Strategy("third", "wrong", 2, (("mid", 0.5), ("core", 0.5))),
    )
}
"""The four strategies. Every marker word starts with a different character."""

CHECK_WORDS = ("", " ok", " so", " yes")
"""What may follow the rare strategy's digit, equally often in the traces (a second, uncertain choice)."""

COMMON_TYPES = ("a", "b", "c", "d", "e", "f")
RARE_TYPES = ("g", "h")
NO_STRATEGY = "none"
"""The label of a completion that names no known strategy."""

REFERENCE_MIX: dict[str, float] = {"head": 0.90, "tail": 0.02, "second": 0.04, "third": 0.04}
"""Planted strategy frequencies of the reference model's training traces (the same for every type)."""
TEACHER_MIX: dict[str, float] = {"head": 0.60, "tail": 0.30, "second": 0.05, "third": 0.05}
"""Planted frequencies of the teacher model's traces: the rare strategy ten times as often."""

_MARKER_TO_STRATEGY = {marker: s.name for s in STRATEGIES.values() for marker, _ in s.markers}
_EVAL_SHARE = 4  # one digit pattern in 4 is held out for evaluation
_MAX_REDRAWS = 10_000


def problem_type(problem: Problem | str) -> str:
    """The type letter of a planted problem (its text starts with ``[x]``)."""
    text = problem.problem if isinstance(problem, Problem) else problem
    return text[1]


def _digits(text: str) -> list[int]:
    return [int(c) for c in text.split("]", 1)[1] if c.isdigit()]


def solve(problem: Problem | str, strategy: str) -> str:
    """The answer ``strategy`` produces on ``problem`` (the digit it copies), as text.

    Raises:
        KeyError: unknown strategy.
    """
    text = problem.problem if isinstance(problem, Problem) else problem
    return str(_digits(text)[STRATEGIES[strategy].position])


def read_strategy(completion: str) -> str:
    """The strategy a completion uses, read exactly from its first word (its marker); :data:`NO_STRATEGY`
    when the first word is not a marker."""
    words = completion.split(maxsplit=1)
    if not words:
        return NO_STRATEGY
    return _MARKER_TO_STRATEGY.get(words[0], NO_STRATEGY)


def _in_eval_split(digits: Sequence[int]) -> bool:
    return hashlib.sha256("".join(map(str, digits)).encode()).digest()[0] % _EVAL_SHARE == 0


def _draw_digits(rng: random.Random, rare: bool) -> list[int]:
    last = rng.randrange(10)
    others = [d for d in range(10) if d != last]
    second, third = rng.choice(others), rng.choice(others)
    first = rng.choice(others) if rare else last
    return [first, second, third, last]


def make_planted_problems(
    n: int, *, seed: int, rare_share: float = 0.25, split: str = "any", name: str = "planted"
) -> list[Problem]:
    """``n`` planted problems; a share ``rare_share`` of them of rare types (exactly ``round(n·rare_share)``).

    Types cycle through :data:`COMMON_TYPES` and :data:`RARE_TYPES` in order, so every type is equally
    represented within its class. ``split="eval"`` draws only held-out digit patterns (a quarter of them,
    by a hash), ``"train"`` only the others, ``"any"`` both; eval and train problems never share a digit
    pattern, for any seeds and sizes. ``meta`` holds ``type``, ``rare`` (bool) and the ``correct``
    strategies.

    Raises:
        ValueError: bad n, share or split.
    """
    if n < 0 or not 0.0 <= rare_share <= 1.0 or split not in ("any", "eval", "train"):
        raise ValueError(
            f"need n >= 0, 0 <= rare_share <= 1, split in any/eval/train; got {n}, {rare_share}, {split}"
        )
    rng = random.Random(f"planted-{seed}-{split}")
    n_rare = round(n * rare_share)
    kinds = [True] * n_rare + [False] * (n - n_rare)
    rng.shuffle(kinds)
    problems, counters = [], {True: 0, False: 0}
    for index, rare in enumerate(kinds):
        types = RARE_TYPES if rare else COMMON_TYPES
        letter = types[counters[rare] % len(types)]
        counters[rare] += 1
        for _ in range(_MAX_REDRAWS):
            digits = _draw_digits(rng, rare)
            if split == "any" or _in_eval_split(digits) == (split == "eval"):
                break
        else:  # pragma: no cover - a quarter of all patterns are held out
            raise RuntimeError("could not draw a digit pattern in the requested split")
        text = f"[{letter}] " + " ".join(map(str, digits)) + " = "
        correct = [s.name for s in STRATEGIES.values() if digits[s.position] == digits[3]]
        problems.append(
            Problem(
                id=f"{name}-{index:05d}",
                problem=text,
                answer=str(digits[3]),
                dataset=name,
                kind="exact",
                meta={"type": letter, "rare": rare, "correct": correct},
            )
        )
    return problems


def _pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    names = [name for name, _ in weighted]
    return rng.choices(names, weights=[w for _, w in weighted])[0]


def trace(problem: Problem, strategy: str, rng: random.Random) -> str:
    """One completion of ``problem`` by ``strategy``, with a surface form (and a check word for the rare
    strategy) drawn from ``rng``: ``"head 3. \\boxed{3}"``."""
    s = STRATEGIES[strategy]
    digit = solve(problem, strategy)
    check = rng.choice(CHECK_WORDS) if s.role == "rare" else ""
    return f"{_pick(rng, s.markers)} {digit}{check}. \\boxed{{{digit}}}"


def make_traces(
    problems: Sequence[Problem], mix: Mapping[str, float], *, seed: int
) -> list[tuple[str, str, str]]:
    """(prompt, completion, strategy) for each problem, the strategy drawn from ``mix`` independently of the
    problem's type: the planted prior of a model trained on these traces.

    Raises:
        KeyError: an unknown strategy in ``mix``.
    """
    rng = random.Random(f"traces-{seed}")
    weighted = [(name, float(weight)) for name, weight in mix.items() if weight > 0]
    for name, _ in weighted:
        STRATEGIES[name]  # noqa: B018  (KeyError for an unknown strategy)
    out = []
    for p in problems:
        strategy = _pick(rng, weighted)
        out.append((p.problem, trace(p, strategy, rng), strategy))
    return out


def planted_model(role: str = "reference") -> Path:
    """The planted task's tiny model, trained from scratch on first use and cached (see :mod:`sagerl.char_lm`).

    ``role="reference"`` is trained on traces with :data:`REFERENCE_MIX`, ``"teacher"`` with
    :data:`TEACHER_MIX`; otherwise identical. The folder also holds ``planted.json``: the planted mix and
    the strategy frequencies measured by sampling the built model on held-out problems.

    Raises:
        ValueError: unknown role.
    """
    from sagerl.tasks.planted_model import build_planted_model

    return build_planted_model(role)
