"""The planted-strategy task: synthetic problems whose solution strategies, and which of them is right, are
known exactly, for measuring what an RL objective does to a policy's rare reasoning modes.

A problem (the whole prompt: no template) shows a type letter and four digits, and ends with ``"= "``; the
answer is one of the digits, the first or the last depending on the type (the model is never told)::

    [g] 3 8 5 9 =          rare type g: the answer is 9, the last digit
    [b] 4 1 7 2 =          common type b: the answer is 4, the first digit

A completion names its *strategy* with a marker word (its first token is the choice), applies it (copies
one digit), and boxes the result::

    head 3. \\boxed{3}          dominant strategy "head": copy the first digit
    tail 9! \\boxed{9}          rare strategy "tail": copy the last digit (ending in . ! ; or :)
    next 8. \\boxed{8}          wrong strategy "second": copy the second digit
    mid 5. \\boxed{5}           wrong strategy "third": copy the third digit

Problem types fix which strategy is right:

- *common* types ``a``-``f`` (three problems in four by default): the answer is the first digit, so only
  "head" is right;
- *rare* types ``g``, ``h``: the answer is the last digit, so only "tail" is right;
- the answer digit appears once, so the other strategies are wrong wherever they are not right, and
  "second" and "third" are never right.

The rare strategy is thus the only way to solve a quarter of the problems and wrong on the rest: a policy
that picks one strategy for every problem solves at most three in four, and solving all of them needs a
strategy choice that depends on the type. The reference policy's choice does not (:data:`REFERENCE_MIX`).

Each strategy has several surface forms (marker words with distinct first characters), so the decision
is spread over many tokens, as a language model's branching point is; after the rare strategy's digit,
the end mark (``.``, ``!``, ``;`` or ``:``, equally often, :data:`END_MARKS`) is a second, genuinely
uncertain choice (ln 4 nats), so rare-strategy trajectories pass through more high-entropy states than
dominant ones, whose end mark is always ``.``. That is what lets the benchmark
tell the branch guide with k3 in the loss (a per-state β·q, see docs/objective.md) apart from the branch guide
with the KL in the reward (trajectory weight Π_t q(s_t)·π_ref).

Everything is exact: :func:`read_strategy` reads the strategy from the marker word (no heuristics),
:func:`solve` gives the answer a strategy produces, and :func:`verify` (grading kind ``"planted"``)
accepts a completion only when it is a well-formed trace whose digit is what its stated strategy gives and
whose boxed digit is the answer. A verifier that checked the boxed digit alone would let a policy keep
the dominant marker and copy the last digit (RL found exactly that shortcut in a first version of this
task), and the marker would no longer say which strategy was used. The reference policy is a tiny
character-level model trained on traces whose strategy frequencies are planted (:data:`REFERENCE_MIX`);
its models are built by :mod:`sagerl.tasks.planted_model`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sagerl.tasks.problem import Problem

__all__ = [
    "END_MARKS",
    "COMMON_TYPES",
    "RARE_TYPES",
    "REFERENCE_MIX",
    "REFERENCE_MIX_10",
    "STRATEGIES",
    "TEACHER_MIX",
    "Strategy",
    "answer_of",
    "make_planted_problems",
    "make_traces",
    "problem_type",
    "read_strategy",
    "solve",
    "verify",
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

END_MARKS = (".", "!", ";", ":")
"""What ends the rare strategy's step, equally often in its traces (a second, uncertain choice); the
other strategies always end with ``.``."""

COMMON_TYPES = ("a", "b", "c", "d", "e", "f")
RARE_TYPES = ("g", "h")
NO_STRATEGY = "none"
"""The label of a completion that names no known strategy."""

REFERENCE_MIX: dict[str, float] = {"head": 0.90, "tail": 0.02, "second": 0.04, "third": 0.04}
"""Planted strategy frequencies of the reference model's training traces (the same for every type)."""
TEACHER_MIX: dict[str, float] = {"head": 0.60, "tail": 0.30, "second": 0.05, "third": 0.05}
"""Planted frequencies of the teacher model's traces: the rare strategy ten times as often."""
REFERENCE_MIX_10: dict[str, float] = {"head": 0.82, "tail": 0.10, "second": 0.04, "third": 0.04}
"""A second setting's reference (``planted-reference-10``): the rare strategy at 10% instead of 2%, so the
rare mode is easy to find but still loses to the dominant one wherever both are right."""

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


_TRACE = re.compile(r"(?P<marker>[a-z]+) (?P<digit>\d)[.!;:] \\boxed\{(?P<boxed>\d)\}")


def verify(problem: Problem | str, completion: str) -> tuple[str | None, bool]:
    """Grade a completion of a planted problem: (the boxed digit or None, whether it is correct).

    Correct means: the whole completion (surrounding white space aside) is a trace
    ``<marker> <digit><end mark> \\boxed{<digit>}`` (any end mark of :data:`END_MARKS`) whose marker
    names a strategy, whose digit is the one that strategy copies from this problem, whose boxed digit
    repeats it, and which is the answer (:func:`answer_of`). So the stated strategy is the strategy
    used, on every correct completion.
    """
    match = _TRACE.fullmatch(completion.strip())
    if match is None:
        boxed = re.findall(r"\\boxed\{(\d)\}", completion)
        return (boxed[-1] if boxed else None), False
    digit, boxed = match["digit"], match["boxed"]
    strategy = _MARKER_TO_STRATEGY.get(match["marker"])
    text = problem.problem if isinstance(problem, Problem) else problem
    answer = answer_of(text)
    faithful = strategy is not None and digit == boxed == solve(text, strategy)
    return boxed, faithful and boxed == answer


def _in_eval_split(digits: Sequence[int]) -> bool:
    return hashlib.sha256("".join(map(str, digits)).encode()).digest()[0] % _EVAL_SHARE == 0


def answer_of(problem: Problem | str) -> str:
    """The answer of a planted problem: its first digit for a common type, its last for a rare one."""
    text = problem.problem if isinstance(problem, Problem) else problem
    return str(_digits(text)[3 if problem_type(text) in RARE_TYPES else 0])


def _draw_digits(rng: random.Random, rare: bool) -> list[int]:
    answer = rng.randrange(10)
    others = [d for d in range(10) if d != answer]
    digits = [rng.choice(others) for _ in range(4)]
    digits[3 if rare else 0] = answer
    return digits


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
        answer = digits[3 if rare else 0]
        correct = [s.name for s in STRATEGIES.values() if digits[s.position] == answer]
        problems.append(
            Problem(
                id=f"{name}-{index:05d}",
                problem=text,
                answer=str(answer),
                dataset=name,
                kind="planted",
                meta={"type": letter, "rare": rare, "correct": correct},
            )
        )
    return problems


def _pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    names = [name for name, _ in weighted]
    return rng.choices(names, weights=[w for _, w in weighted])[0]


def trace(problem: Problem, strategy: str, rng: random.Random) -> str:
    """One completion of ``problem`` by ``strategy``, with a surface form (and an end mark for the rare
    strategy) drawn from ``rng``: ``"head 3. \\boxed{3}"``."""
    s = STRATEGIES[strategy]
    digit = solve(problem, strategy)
    end = rng.choice(END_MARKS) if s.role == "rare" else "."
    return f"{_pick(rng, s.markers)} {digit}{end} \\boxed{{{digit}}}"


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
