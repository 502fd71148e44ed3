"""The planted-strategy task: problems, strategies, the exact checker, traces and grading."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sagerl.grading import grade
from sagerl.tasks import build_prompt, default_prompt_format, load_problems, strategy_reader
from sagerl.tasks.planted import (
    CHECK_WORDS,
    NO_STRATEGY,
    REFERENCE_MIX,
    STRATEGIES,
    make_planted_problems,
    make_traces,
    problem_type,
    read_strategy,
    solve,
    trace,
)


def test_read_strategy_reads_every_marker_exactly():
    for strategy in STRATEGIES.values():
        for marker, _ in strategy.markers:
            assert read_strategy(f"{marker} 3. \\boxed{{3}}") == strategy.name
    assert read_strategy("tail 3 ok. \\boxed{3}") == "tail"
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
        assert p.answer == str(digits[3]) and p.kind == "exact"
        assert digits[1] != digits[3] and digits[2] != digits[3]
        assert (digits[0] == digits[3]) == (not p.meta["rare"])
        assert problem_type(p) == p.meta["type"]
        assert p.meta["type"] in ("g", "h") if p.meta["rare"] else p.meta["type"] in "abcdef"
        right = {name for name in STRATEGIES if solve(p, name) == p.answer}
        assert right == set(p.meta["correct"]) == ({"tail"} if p.meta["rare"] else {"head", "tail"})


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
        extracted, correct = grade(text, p.answer, "exact")
        assert extracted == solve(p, strategy)
        assert correct == (strategy in p.meta["correct"])


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
    checks = Counter(
        c.split(". ")[0].split(" ", 2)[2] if c.count(" ") > 2 else "" for _, c, s in traces if s == "tail"
    )
    assert set(checks) == {w.strip() for w in CHECK_WORDS}
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
