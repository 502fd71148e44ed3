"""The built-in arithmetic task: seeded one- to three-step word problems and expressions.

It is the embedded default task, sized for the embedded SmolLM2-135M-Instruct, which solves easy arithmetic
now and then but almost no GSM8K. Measured on 16 level-1 problems of the "arith" set, 8 samples each
(temperature 1.0, at most 128 new tokens, the default prompt with 4 worked examples): 91% of the samples
put an answer in ``\\boxed{}``, 9% are right, and 8 of the 16 problems are solved at least once (pass@8 0.5).

Every answer is a non-negative integer, computed from the numbers drawn (divisions are exact by
construction); ``meta["expression"]`` holds the computation in Python syntax, for example ``"6 * 4 + 3"``
(never evaluated here, and needing no evaluation to check).

Held-out split: each expression belongs to the "eval" part (a quarter of them) or the "train" part, by a hash
of its text (SHA-256). ``split="eval"`` draws only eval expressions and ``split="train"`` only train ones,
so no computation of the held-out set ever appears in training, for any seeds and sizes.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from sagerl.tasks.problem import Problem

__all__ = ["LEVELS", "SPLITS", "make_arithmetic_problems"]

LEVELS = (1, 2, 3)
"""1: one step, small numbers (sums of 2-20, differences from at most 30, the 10x10 table for x and /);
2: two steps, numbers up to 50; 3: two or three steps, numbers up to 500 and results in the thousands."""
SPLITS = ("any", "eval", "train")
_EVAL_SHARE = 4  # one expression in 4 is held out
_MAX_REDRAWS = 10_000

_NAMES = ("Tom", "Anna", "Ben", "Lily", "Omar", "Mia", "Leo", "Sara", "Ravi", "Emma", "Jack", "Nora")
_OBJECTS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "stamps", "shells", "cards")

Numbers = dict[str, int]


@dataclass(frozen=True)
class _Pattern:
    """One shape of problem: how to draw its numbers, the computation, and the ways to word it."""

    level: int
    expression: str  # Python syntax over the numbers: "{a} * {b} + {c}"
    draw: Callable[[random.Random], Numbers]
    solve: Callable[[Numbers], int]
    templates: tuple[str, ...]  # over the numbers, {name}, {obj} and {expr} (the expression as displayed)


def _r(rng: random.Random, low: int, high: int) -> int:
    return rng.randint(low, high)


def _draw_sub(rng: random.Random) -> Numbers:
    a = _r(rng, 5, 30)
    return {"a": a, "b": _r(rng, 2, a - 1)}


def _draw_div(rng: random.Random) -> Numbers:
    b, q = _r(rng, 2, 10), _r(rng, 2, 10)
    return {"a": b * q, "b": b}


def _draw_add_sub(rng: random.Random) -> Numbers:
    a, b = _r(rng, 5, 40), _r(rng, 5, 40)
    return {"a": a, "b": b, "c": _r(rng, 2, a + b - 1)}


def _draw_sub_add(rng: random.Random) -> Numbers:
    a = _r(rng, 10, 50)
    return {"a": a, "b": _r(rng, 2, a - 1), "c": _r(rng, 2, 30)}


def _draw_mul_sub(rng: random.Random) -> Numbers:
    a, b = _r(rng, 2, 10), _r(rng, 2, 12)
    return {"a": a, "b": b, "c": _r(rng, 1, a * b - 1)}


def _draw_div_add(rng: random.Random) -> Numbers:
    b, q = _r(rng, 2, 9), _r(rng, 2, 10)
    return {"a": b * q, "b": b, "c": _r(rng, 2, 20)}


def _draw_big_mul_sub_sub(rng: random.Random) -> Numbers:
    a, b = _r(rng, 10, 60), _r(rng, 5, 20)
    third = (a * b) // 3
    return {"a": a, "b": b, "c": _r(rng, 10, third), "d": _r(rng, 10, third)}


def _draw_big_sub_div(rng: random.Random) -> Numbers:
    c, q, b = _r(rng, 3, 12), _r(rng, 5, 40), _r(rng, 10, 300)
    return {"a": b + c * q, "b": b, "c": c}


_PATTERNS = (
    # level 1: one step, small numbers
    _Pattern(
        1,
        "{a} + {b}",
        lambda rng: {"a": _r(rng, 2, 20), "b": _r(rng, 2, 20)},
        lambda n: n["a"] + n["b"],
        (
            "What is {expr}?",
            "{name} has {a} {obj}. {name} gets {b} more {obj}. How many {obj} does {name} have now?",
            "There are {a} {obj} in a box and {b} {obj} on the table. How many {obj} are there altogether?",
        ),
    ),
    _Pattern(
        1,
        "{a} - {b}",
        _draw_sub,
        lambda n: n["a"] - n["b"],
        (
            "What is {expr}?",
            "{name} has {a} {obj} and gives away {b} of them. How many {obj} does {name} have left?",
            "A shop had {a} {obj}. It sold {b} of them. How many {obj} does the shop have left?",
        ),
    ),
    _Pattern(
        1,
        "{a} * {b}",
        lambda rng: {"a": _r(rng, 2, 10), "b": _r(rng, 2, 10)},
        lambda n: n["a"] * n["b"],
        (
            "What is {expr}?",
            "There are {a} bags with {b} {obj} in each bag. How many {obj} are there in total?",
            "{name} buys {a} packs of {obj}. Each pack has {b} {obj}. How many {obj} does {name} buy?",
        ),
    ),
    _Pattern(
        1,
        "{a} / {b}",
        _draw_div,
        lambda n: n["a"] // n["b"],
        (
            "What is {expr}?",
            "{a} {obj} are shared equally among {b} children. How many {obj} does each child get?",
            "{name} puts {a} {obj} into {b} equal groups. How many {obj} are in each group?",
        ),
    ),
    # level 2: two steps, small numbers
    _Pattern(
        2,
        "{a} + {b} - {c}",
        _draw_add_sub,
        lambda n: n["a"] + n["b"] - n["c"],
        (
            "What is {expr}?",
            "{name} has {a} {obj}, gets {b} more, and then gives away {c}. How many {obj} does {name} have now?",
        ),
    ),
    _Pattern(
        2,
        "{a} - {b} + {c}",
        _draw_sub_add,
        lambda n: n["a"] - n["b"] + n["c"],
        (
            "What is {expr}?",
            "{name} had {a} {obj}, lost {b} of them, and then found {c}. How many {obj} does {name} have now?",
        ),
    ),
    _Pattern(
        2,
        "{a} * {b} + {c}",
        lambda rng: {"a": _r(rng, 2, 10), "b": _r(rng, 2, 12), "c": _r(rng, 2, 20)},
        lambda n: n["a"] * n["b"] + n["c"],
        (
            "What is {expr}?",
            "{name} has {a} boxes with {b} {obj} in each box and {c} more {obj} outside the boxes. "
            "How many {obj} does {name} have in total?",
        ),
    ),
    _Pattern(
        2,
        "{a} * {b} - {c}",
        _draw_mul_sub,
        lambda n: n["a"] * n["b"] - n["c"],
        (
            "What is {expr}?",
            "{name} buys {a} packs of {b} {obj} and gives {c} of them away. How many {obj} does {name} have left?",
        ),
    ),
    _Pattern(
        2,
        "({a} + {b}) * {c}",
        lambda rng: {"a": _r(rng, 2, 10), "b": _r(rng, 2, 10), "c": _r(rng, 2, 9)},
        lambda n: (n["a"] + n["b"]) * n["c"],
        (
            "What is {expr}?",
            "Each of {c} children has {a} red {obj} and {b} blue {obj}. "
            "How many {obj} do the children have in total?",
        ),
    ),
    _Pattern(
        2,
        "{a} / {b} + {c}",
        _draw_div_add,
        lambda n: n["a"] // n["b"] + n["c"],
        (
            "What is {expr}?",
            "{a} {obj} are shared equally among {b} friends. {name} is one of them and already had {c} {obj}. "
            "How many {obj} does {name} have now?",
        ),
    ),
    # level 3: two or three steps, bigger numbers
    _Pattern(
        3,
        "{a} * {b} + {c}",
        lambda rng: {"a": _r(rng, 12, 99), "b": _r(rng, 3, 20), "c": _r(rng, 10, 500)},
        lambda n: n["a"] * n["b"] + n["c"],
        (
            "What is {expr}?",
            "A library has {a} shelves with {b} {obj} on each shelf and {c} more {obj} in storage. "
            "How many {obj} does the library have?",
        ),
    ),
    _Pattern(
        3,
        "({a} + {b}) * {c}",
        lambda rng: {"a": _r(rng, 10, 200), "b": _r(rng, 10, 200), "c": _r(rng, 3, 15)},
        lambda n: (n["a"] + n["b"]) * n["c"],
        (
            "What is {expr}?",
            "A factory makes {a} {obj} in the morning and {b} in the afternoon, every day for {c} days. "
            "How many {obj} does it make?",
        ),
    ),
    _Pattern(
        3,
        "{a} * {b} + {c} * {d}",
        lambda rng: {"a": _r(rng, 5, 50), "b": _r(rng, 3, 20), "c": _r(rng, 5, 50), "d": _r(rng, 3, 20)},
        lambda n: n["a"] * n["b"] + n["c"] * n["d"],
        (
            "What is {expr}?",
            "{name} buys {a} boxes of {b} {obj} and {c} bags of {d} {obj}. How many {obj} does {name} buy?",
        ),
    ),
    _Pattern(
        3,
        "{a} * {b} - {c} - {d}",
        _draw_big_mul_sub_sub,
        lambda n: n["a"] * n["b"] - n["c"] - n["d"],
        (
            "What is {expr}?",
            "A school orders {a} boxes of {b} {obj}. It gives {c} {obj} to one class and {d} to another. "
            "How many {obj} are left?",
        ),
    ),
    _Pattern(
        3,
        "({a} - {b}) / {c}",
        _draw_big_sub_div,
        lambda n: (n["a"] - n["b"]) // n["c"],
        (
            "What is {expr}?",
            "{name} had {a} {obj} and used {b} of them. The rest were split equally into {c} boxes. "
            "How many {obj} are in each box?",
        ),
    ),
)


def _display(expression: str) -> str:
    return expression.replace("*", "×").replace("/", "÷")


def in_eval_split(expression: str) -> bool:
    """True when the expression (Python syntax, as in ``meta["expression"]``) is held out for evaluation."""
    digest = hashlib.sha256(expression.encode()).digest()
    return int.from_bytes(digest[:8], "big") % _EVAL_SHARE == 0


def make_arithmetic_problems(
    n: int, *, seed: int, levels: tuple[int, ...] = (1, 2), split: str = "any"
) -> list[Problem]:
    """``n`` distinct arithmetic problems, the same list for the same arguments.

    Problem ``i`` has level ``levels[i % len(levels)]``, id ``"arith-<seed>-<i>"``, dataset ``"arith"``,
    kind "math", an integer answer, and ``meta = {"level", "expression", "split"}`` ("eval" or "train": the
    part the expression belongs to, whatever ``split`` asked for). The list for a smaller
    ``n`` is a prefix of the list for a larger one.

    Args:
        n: number of problems (>= 0).
        seed: seeds ``random.Random``; the draw does not depend on ``PYTHONHASHSEED``.
        levels: difficulty levels to cycle through, each in :data:`LEVELS`.
        split: "eval" or "train" to draw only held-out or only training expressions (see the module
            docstring), "any" for both.

    Raises:
        ValueError: ``n`` is negative, a level or the split is unknown, or there are not ``n`` distinct
            problems to draw.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels must be a non-empty tuple of {LEVELS}, got {levels!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    by_level = {level: [p for p in _PATTERNS if p.level == level] for level in LEVELS}
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Problem] = []
    for i in range(n):
        level = levels[i % len(levels)]
        for _ in range(_MAX_REDRAWS):
            pattern = rng.choice(by_level[level])
            numbers = pattern.draw(rng)
            expression = pattern.expression.format(**numbers)
            template = rng.choice(pattern.templates)
            name, obj = rng.choice(_NAMES), rng.choice(_OBJECTS)
            if split != "any" and in_eval_split(expression) != (split == "eval"):
                continue
            text = template.format(**numbers, name=name, obj=obj, expr=_display(expression))
            if text not in seen:
                break
        else:
            raise ValueError(f"could not draw {n} distinct level-{level} problems (split {split!r})")
        seen.add(text)
        problems.append(
            Problem(
                id=f"arith-{seed}-{i}",
                problem=text,
                answer=str(pattern.solve(numbers)),
                dataset="arith",
                kind="math",
                meta={
                    "level": level,
                    "expression": expression,
                    "split": "eval" if in_eval_split(expression) else "train",
                },
            )
        )
    return problems
