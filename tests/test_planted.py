"""The planted-strategy task: problems, strategies, the exact checker, traces and grading."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sagerl.grading import grade
from sagerl.tasks import build_prompt, default_prompt_format, grade_completion, load_problems, strategy_reader
from sagerl.tasks.planted import (
    END_MARKS,
    NO_STRATEGY,
    REFERENCE_MIX,
    STRATEGIES,
    answer_of,
    make_planted_problems,
    make_traces,
    problem_type,
    read_strategy,
    solve,
    trace,
    verify,
)


def test_read_strategy_reads_every_marker_exactly():
    for strategy in STRATEGIES.values():
        for marker, _ in strategy.markers:
            assert read_strategy(f"{marker} 3. \\boxed{{3}}") == strategy.name
    assert read_strategy("tail 3! \\boxed{3}") == "tail"
    for text in ("", "   ", "heads 3", "Head 3", "3. \\boxed{3}", "tai 3", "\\boxed{3} head"):
        assert read_strategy(text) == NO_STRATEGY
    firsts = [m[0] for s in STRATEGIES.values() for m, _ in s.markers]
    assert len(set(firsts)) == len(firsts)  # the choice is made at the first token


def test_problem_construction_fixes_which_strategies_are_right():
    problems = make_planted_problems(400, seed=3, rare_share=0.25)
    assert sum(p.meta["rare"] for p in problems) == 100
    for p in problems:
        digits = [int(c) for c in p.problem.split("]", 1)[1] if c.isdigit()]
        assert p.problem == f"[{p.meta['type']}] " + " ".join(map(str, digits)) + " = "
        where = 3 if p.meta["rare"] else 0
        assert p.answer == str(digits[where]) == answer_of(p) and p.kind == "planted"
        assert digits.count(digits[where]) == 1  # the answer digit appears once
        assert problem_type(p) == p.meta["type"]
        assert p.meta["type"] in ("g", "h") if p.meta["rare"] else p.meta["type"] in "abcdef"
        right = {name for name in STRATEGIES if solve(p, name) == p.answer}
        assert right == set(p.meta["correct"]) == ({"tail"} if p.meta["rare"] else {"head"})


def test_splits_are_disjoint_and_deterministic():
    pattern = lambda p: p.problem.split("]", 1)[1]  # noqa: E731
    train = {pattern(p) for p in make_planted_problems(3000, seed=1, split="train")}
    held_out = {pattern(p) for p in make_planted_problems(500, seed=2, split="eval")}
    assert train and held_out and not train & held_out
    a = make_planted_problems(50, seed=9, split="eval")
    assert a == make_planted_problems(50, seed=9, split="eval")
    assert a != make_planted_problems(50, seed=10, split="eval")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_traces_are_graded_exactly_by_their_strategy(strategy):
    rng = random.Random(0)
    for p in make_planted_problems(60, seed=4, rare_share=0.5):
        text = trace(p, strategy, rng)
        assert read_strategy(text) == strategy
        assert p.kind == "planted"
        extracted, correct = grade_completion(text, p.answer, p.kind, p.problem)
        assert extracted == solve(p, strategy)
        assert correct == (strategy in p.meta["correct"])


def test_the_verifier_needs_the_stated_strategy_to_be_the_one_used():
    problem = "[g] 3 8 5 9 = "  # rare: the answer is the last digit, only tail is right
    assert verify(problem, "tail 9. \\boxed{9}") == ("9", True)
    assert verify(problem, " back 9; \\boxed{9}\n") == ("9", True)
    assert verify(problem, "head 9. \\boxed{9}") == (
        "9",
        False,
    )  # the shortcut: dominant marker, tail's digit
    assert verify(problem, "tail 9. \\boxed{8}") == ("8", False)
    assert verify(problem, "head 3. \\boxed{3}") == ("3", False)  # faithful, but head is wrong here
    assert verify(problem, "tail 9. \\boxed{9} and more") == ("9", False)
    assert verify(problem, "tails 9. \\boxed{9}") == ("9", False)
    assert verify(problem, "") == (None, False)
    common = "[b] 4 1 7 2 = "  # common: the answer is the first digit, only head is right
    assert verify(common, "first 4. \\boxed{4}") == ("4", True)
    assert verify(common, "head 4! \\boxed{4}") == ("4", True)  # any end mark after any marker
    assert verify(common, "head 4? \\boxed{4}") == ("4", False)
    assert verify(common, "end 2: \\boxed{2}") == ("2", False)  # faithful, but tail is wrong here
    assert verify(common, "next 1. \\boxed{1}") == ("1", False)
    with pytest.raises(ValueError, match="needs the problem"):
        grade_completion("tail 9. \\boxed{9}", "9", "planted")


def test_exact_grading_is_character_for_character():
    assert grade("head 7. \\boxed{7}", "7", "exact") == ("7", True)
    assert grade("head 7. \\boxed{07}", "7", "exact") == ("07", False)  # math would call this equal
    assert grade("head 7.", "7", "exact") == (None, False)


def test_trace_mix_and_check_words_follow_the_plant():
    problems = make_planted_problems(20_000, seed=5)
    traces = make_traces(problems, REFERENCE_MIX, seed=5)
    counts = Counter(strategy for _, _, strategy in traces)
    for name, share in REFERENCE_MIX.items():
        assert abs(counts[name] / len(traces) - share) < 4 * (share * (1 - share) / len(traces)) ** 0.5
    ends = Counter(c.split(" ")[1][1] for _, c, s in traces if s == "tail")
    assert set(ends) == set(END_MARKS) and min(ends.values()) > len(traces) * 0.02 / 4 * 0.7
    assert {c.split(" ")[1][1] for _, c, s in traces if s != "tail"} == {"."}
    with pytest.raises(KeyError):
        make_traces(problems[:3], {"bogus": 1.0}, seed=0)


def test_planted_sets_are_registered_with_raw_prompts_and_strategies():
    for name, size, rare in (("planted", 128, 32), ("planted_common", 64, 0), ("planted_rare", 64, 64)):
        problems = load_problems(name)
        assert len(problems) == size and sum(p.meta["rare"] for p in problems) == rare
        assert default_prompt_format(name) == "raw" and strategy_reader(name) is read_strategy
        assert build_prompt(problems[0], prompt_format="raw") == problems[0].problem
    assert len(load_problems("planted_train", limit=10)) == 10
    eval_patterns = {
        p.problem.split("]", 1)[1]
        for n in ("planted", "planted_common", "planted_rare")
        for p in load_problems(n)
    }
    train_patterns = {p.problem.split("]", 1)[1] for p in load_problems("planted_train")}
    assert not eval_patterns & train_patterns
    with pytest.raises(ValueError, match="no worked examples"):
        build_prompt(load_problems("planted")[0], few_shot=1, prompt_format="raw")
