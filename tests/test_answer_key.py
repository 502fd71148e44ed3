"""The identity of a final answer (sagerl.grading.answer_key): answers the grader holds equal share one key, so that
outcome counts and DARLING's answer partition count values, not spellings (issue 34, item 7)."""

from __future__ import annotations

import threading

import pytest

from sagerl.grading import answer_key, answers_match
from sagerl.tasks.verify import final_answer

EQUAL = [  # (answer, answer, their key)
    ("1/2", "0.5", "1/2"),
    ("\\frac{1}{2}", "0.50", "1/2"),
    ("\\frac12", "x = 0.5", "1/2"),
    ("2^{10}", "1{,}024", "1024"),
    ("-3", "-\\frac{6}{2}", "-3"),
    ("\\{2, 1\\}", "\\{1,2\\}", "{1, 2}"),
    ("1+x", "x + 1", "x + 1"),
    ("\\frac{1}{\\sqrt{2}}", "\\sqrt{2}/2", "0.707106781186547524400844362105"),
]


@pytest.mark.parametrize("a, b, key", EQUAL)
def test_answers_the_grader_holds_equal_share_one_key(a, b, key):
    assert answers_match(a, b)
    assert answer_key(a) == answer_key(b) == key


def test_different_values_have_different_keys():
    keys = [answer_key(a) for a in ("1/2", "1/3", "-1/2", "2", "x + 2", "\\{1, 3\\}")]
    assert len(set(keys)) == len(keys)
    # coarser than the grader on decimals: 0.333333 is its exact value, not 1/3 (the grader: equal within 1e-6)
    assert answers_match("0.333333", "\\frac13") and answer_key("0.333333") == "333333/1000000"


def test_no_answer_and_text_that_does_not_parse():
    assert answer_key("  ") is None
    assert answer_key("\\frac{") == "\\frac{"  # math-verify parses nothing: the text, white space removed
    with pytest.raises(ValueError, match="timeout must be positive seconds"):
        answer_key("1", timeout=0)


def test_outside_the_main_thread_the_helper_process_gives_the_same_keys():
    answer_key.cache_clear()
    keys: list = []
    thread = threading.Thread(target=lambda: keys.extend(answer_key(a) for a, _, _ in EQUAL))
    thread.start()
    thread.join()
    assert keys == [key for _, _, key in EQUAL]


def test_final_answer_gives_math_answers_their_key_and_other_kinds_their_text():
    math = {"kind": "math", "answer": "1/2"}
    assert final_answer("so \\boxed{0.5}", math) == final_answer("$\\boxed{\\frac{1}{2}}$", math) == "1/2"
    assert final_answer("the answer is \\boxed{$\\frac{2}{4}$}") == "1/2"  # a row without kind is math
    assert final_answer("it is 0.5", math, fallback_to_last_number=True) == "1/2"
    assert final_answer("no box", math) is None
    kk = {"kind": "kk", "answer": "Ann is a knight, Bob is a knave"}
    assert final_answer("\\boxed{Ann is a knight, Bob is a knave}", kk) == "Annisaknight,Bobisaknave"
    planted = {"kind": "planted", "problem": "[g] 3 8 5 9 = ", "answer": "9"}
    assert final_answer("tail 9! \\boxed{9}", planted) == "9"
