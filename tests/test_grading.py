"""sagerl.grading: extraction, math-verify equivalence under a time limit, Knights-and-Knaves checker."""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest

from sagerl.grading import (
    answers_match,
    extract_answer,
    extract_boxed,
    extract_last_number,
    find_last_boxed,
    grade,
    is_correct,
    kk_extract,
    kk_final_answer,
    kk_is_correct,
    kk_reference_roles,
)
from sagerl.grading.verify import _VerifyWorker

# --- extraction ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\left(3, \frac{\pi}{2}\right)}", r"\left(3, \frac{\pi}{2}\right)"),
        (r"first \boxed{1}, then \boxed{2}", "2"),
        (r"\boxed{}", ""),
        # the last box opened is the final answer; one that never closes means there is none (issue 9)
        (r"answer \boxed{5} and then \boxed{\frac{1", None),
        (r"First \boxed{3}. Hmm, recheck. Final: \boxed{", None),
        (r"\boxed{3} then, cut off: \boxed", None),
        (r"\boxed{3} then \fbox{4", None),
        (r"\boxed{\frac{1", None),
        (r"\boxed 7.", "7"),
        (r"\fbox{7}", "7"),  # other box spellings (issue 9)
        (r"The answer is \fbox{7}.", "7"),
        (r"\fbox{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\fbox 12, done", "12"),
        (r"\boxed{\left\{1, \{2\}\right\}}", r"\left\{1, \{2\}\right\}"),
        (r"the command \boxed. Then \boxed{4}", "4"),  # a mention without an argument is no box
        # boxes that together close the answer form one answer (issue 9) ...
        (r"The solutions are \boxed{(1, 4)}, \boxed{(4, 1)}.", "(1, 4), (4, 1)"),
        (r"So $x = \boxed{2}$ and $x = \boxed{5}$.", "2, 5"),
        (r"$\boxed{1}$, $\boxed{2}$, or $\boxed{3}$", "1, 2, 3"),
        (r"\boxed{a} \text{ and } \boxed{b}", "a, b"),
        (r"x_1 = \boxed{-1},\quad x_2 = \boxed{3}", "-1, 3"),
        # ... but a box followed by more reasoning is superseded by the later one
        (r"I get \boxed{3}. Let me double-check: no, it should be 5, so \boxed{5}.", "5"),
        (r"\boxed{3}. Wait, that is wrong. \boxed{4}", "4"),
        (r"\boxed{3} so x = \boxed{4}", "4"),  # "so" is reasoning, not a separator
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not count
        (r"\boxed{a \\}", r"a \\"),  # a LaTeX line break, then the closing brace
        (r"\boxed{\boxed{3}}", r"\boxed{3}"),
        ("no box here, 42", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_boxed_is_linear_on_degenerate_text() -> None:
    text = r"\boxed{\boxed{" * 100_000 + r"\boxed{9}"
    start = time.perf_counter()
    assert extract_boxed(text) == "9"  # the last box opened is complete
    assert extract_boxed(r"\boxed{1}, " * 50_000 + r"\boxed{") is None
    assert extract_boxed(r"\boxed{1}, " * 50_000) == ", ".join(["1"] * 50_000)
    assert time.perf_counter() - start < 2.0


def test_find_last_boxed_spans() -> None:
    text = r"So $x = \boxed{2}$ and $x = \boxed{5}$."
    start, end, content = find_last_boxed(text)
    assert (text[start:end], content) == (r"\boxed{2}$ and $x = \boxed{5}", "2, 5")
    text = r"\boxed{3} and then \boxed{\frac"
    assert find_last_boxed(text) == (text.index(r"\boxed{\frac"), len(text), None)
    assert find_last_boxed("no box") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("it is -3", "-3"),
        ("it costs 1,200 dollars.", "1200"),
        ("x = 2.5.", "2.5"),
        ("three quarters: 3/4", "3/4"),
        ("pages 3-7", "7"),  # a hyphen between numbers is not a sign
        ("(-4)", "-4"),
        ("no numbers", None),
    ],
)
def test_extract_last_number(text: str, expected: str | None) -> None:
    assert extract_last_number(text) == expected


def test_extract_answer_falls_back_to_last_number_only_when_asked() -> None:
    assert extract_answer("The total is 1,200.") is None
    assert extract_answer("The total is 1,200.", fallback_to_last_number=True) == "1200"
    assert extract_answer(r"7 apples, so \boxed{ 12 }", fallback_to_last_number=True) == "12"
    assert extract_answer(r"\boxed{} 7") is None  # an empty box is no answer
    assert extract_answer(r"\boxed{} 7", fallback_to_last_number=True) == "7"
    assert extract_answer(r"\boxed{\boxed{3}}") == "3"
    assert extract_answer(r"\fbox{\boxed 3}") == "3"
    assert extract_answer(r"\boxed{\boxed{3} + 1}") == r"\boxed{3} + 1"
    # a final box that never closes: no answer, not even the last number
    assert extract_answer(r"so 12 and \boxed{1", fallback_to_last_number=True) is None


# --- math equivalence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        (r"\boxed{\frac{1}{2}}", "0.5"),
        (r"\boxed{0.5}", r"\frac{1}{2}"),
        (r"\boxed{\sqrt{3}/2}", r"\frac{\sqrt{3}}{2}"),
        # MATH-500 test/precalculus/807
        (r"so \boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{\dfrac{14}{3}}", "14/3"),
        (r"\boxed{1,200}", "1200"),
        (r"\boxed{x^2+1}", "1 + x^2"),
        (r"\boxed{\text{(C)}}", r"\text{(C)}"),
        # equal values in other forms (issue 9)
        (r"\boxed{0.5}", r"\frac12"),
        (r"\boxed{2^{-10}}", r"\frac{1}{1024}"),
        (r"\boxed{1{,}000}", "1000"),
        (r"\boxed{1\,000\,000}", "1000000"),
        (r"\boxed{5!}", "120"),
        (r"\boxed{\frac{1}{2^{99}}}", r"2^{-99}"),
        (r"\boxed{10^{40}}", "1" + "0" * 40),
        (r"\boxed{1.5\times 10^{-7}}", "0.00000015"),
        (r"\boxed{0.333333}", r"\frac{1}{3}"),  # a decimal within 1e-6 relative
        (r"\boxed{3.14159265}", r"\pi"),
        (r"\boxed{x = \frac{1}{2^{99}}}", r"\frac{1}{2^{99}}"),
        (r"\boxed{(2^{-40}, 3)}", r"(\frac{1}{2^{40}}, 3)"),
        (r"\boxed{\frac{\sqrt{2}}{2^{60}}}", r"\sqrt{2} \cdot 2^{-60}"),
        # the answer forms of issue 9's faults 2 and 4
        (r"The answer is \fbox{7}.", "7"),
        (r"The solutions are \boxed{(1, 4)}, \boxed{(4, 1)}.", "(1,4),(4,1)"),
        (r"So $x = \boxed{2}$ and $x = \boxed{5}$.", "2, 5"),
        (r"I get \boxed{3}. Let me double-check: no, it should be 5, so \boxed{5}.", "5"),
    ],
)
def test_equivalent_answers_are_correct(completion: str, answer: str) -> None:
    assert is_correct(completion, answer)


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        (r"\boxed{17}", "18"),
        (r"\boxed{\frac{1}{3}}", "0.5"),
        (r"\boxed{(3, \pi)}", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"\boxed{}", "0"),
        ("The answer is 18.", "18"),  # no box, no fallback
        ("", "18"),
        # tiny numbers are not rounded to a fixed number of decimals (issue 9, fault 1)
        (r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}"),
        (r"\boxed{0.0000001}", "0.0000002"),
        (r"\boxed{10^{-30}}", r"2 \cdot 10^{-30}"),
        (r"\boxed{1.0 \times 10^{-12}}", r"1.1 \times 10^{-12}"),
        (r"\boxed{0}", "0.0000001"),
        (r"\boxed{\frac{\pi}{2^{98}}}", r"\frac{\pi}{2^{99}}"),
        (r"\boxed{\frac{\sqrt{2}}{10^{20}}}", r"\frac{\sqrt{3}}{10^{20}}"),
        (r"\boxed{x = \frac{1}{2^{98}}}", r"\frac{1}{2^{99}}"),
        (r"\boxed{(2^{-40}, 3)}", r"(\frac{1}{2^{41}}, 3)"),
        (r"\boxed{\{10^{-9}, 1\}}", r"\{2 \cdot 10^{-9}, 1\}"),
        # exact values compare exactly at any size
        (r"\boxed{10^{40} + 1}", "10^{40}"),
        (r"\boxed{\frac{1}{2004!}}", r"\frac{1}{2006!}"),  # commented out in Math-Verify's own tests
        (r"\boxed{30!}", "30! + 1"),
        # a decimal near 1 is held to no looser than 1e-6 relative (math-verify: 6 decimals)
        (r"\boxed{0.33333}", r"\frac{1}{3}"),
        (r"\boxed{1.000002}", "1"),
        # a final box that never closes is no answer (issue 9, fault 3)
        (r"First \boxed{3}. Hmm, recheck. Final: \boxed{", "3"),
        # a box followed by more reasoning is superseded (issue 9, fault 4)
        (r"I get \boxed{3}. Let me double-check: no, it should be 5, so \boxed{5}.", "3, 5"),
        (r"I get \boxed{3}. Let me double-check: no, it should be 5, so \boxed{5}.", "3"),
    ],
)
def test_wrong_or_missing_answers_are_incorrect(completion: str, answer: str) -> None:
    assert not is_correct(completion, answer)


def test_last_number_fallback_in_is_correct() -> None:
    assert not is_correct("So she has 1,200 apples.", "1200")
    assert is_correct("So she has 1,200 apples.", "1200", fallback_to_last_number=True)


def test_model_text_never_raises() -> None:
    for text in [r"\boxed{\frac{", r"\boxed{}}}}", r"\boxed{\left(}", "\x00\\boxed{\x00}", r"\boxed{\\\\}"]:
        assert is_correct(text, "1") is False


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        is_correct(r"\boxed{1}", "1", timeout=0)


PATHOLOGICAL = [
    r"\boxed{9^{9^{9^{9}}}}",
    r"\boxed{" + "(" * 60 + "x" + ")" * 60 + "}",  # about 4 s of parsing without a limit
    r"\boxed{99999999999!}",
]


@pytest.mark.parametrize("completion", PATHOLOGICAL)
def test_pathological_answer_returns_within_timeout(completion: str) -> None:
    start = time.perf_counter()
    assert is_correct(completion, "5", timeout=0.5) is False
    assert time.perf_counter() - start < 1.5


def test_caller_alarm_is_kept() -> None:
    """A SIGALRM timer armed by the caller (pytest-timeout's, say) survives, with its remaining time."""
    fired: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert is_correct(r"\boxed{9^{9^{9}}}", "5", timeout=0.3) is False
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 28.0 < remaining < 30.0
        # an earlier caller deadline wins, then fires for the caller
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        start = time.perf_counter()
        assert is_correct(PATHOLOGICAL[1], "5", timeout=5.0) is False
        assert time.perf_counter() - start < 1.0
        time.sleep(0.05)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_is_correct_from_a_thread() -> None:
    results: dict[str, object] = {}

    def work() -> None:
        results["right"] = is_correct(r"\boxed{\sqrt{3}/2}", r"\frac{\sqrt{3}}{2}")
        results["wrong"] = is_correct(r"\boxed{7}", "5")
        start = time.perf_counter()
        results["pathological"] = is_correct(PATHOLOGICAL[0], "5", timeout=0.5)
        results["seconds"] = time.perf_counter() - start
        results["after"] = is_correct(r"\boxed{0.5}", r"\frac{1}{2}")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert results["right"] is True and results["wrong"] is False and results["after"] is True
    assert results["pathological"] is False
    assert results["seconds"] < 1.5


def test_stuck_helper_process_is_killed_after_the_limit() -> None:
    """A helper that never answers (as one stuck in a long C call would) costs timeout + 0.5 s, then dies."""
    stuck = (
        "import json, sys, time; print(json.dumps({'ready': True}), flush=True); sys.stdin.readline(); "
        "time.sleep(60)"
    )
    worker = _VerifyWorker([sys.executable, "-c", stuck])
    try:
        start = time.perf_counter()
        assert worker.compare("1", "2", timeout=0.3) is False
        assert time.perf_counter() - start < 2.0
        assert worker._proc is None  # killed; the next call starts a fresh one
    finally:
        worker.close()


def test_answers_match_fast_path_and_math() -> None:
    assert answers_match("12", " 12 ")
    assert answers_match(r"\frac{6}{12}", "0.5")
    assert not answers_match("", "")


# --- Knights and Knaves ----------------------------------------------------------------------------

KK_ANSWER = "Harper is a knight, Benjamin is a knave, and Evelyn is a knave."


def test_kk_reference_roles() -> None:
    assert kk_reference_roles(KK_ANSWER) == {"Harper": "knight", "Benjamin": "knave", "Evelyn": "knave"}
    assert kk_reference_roles("(1) Harper is a knight\n(2) Evelyn is a knave") == {
        "Harper": "knight",
        "Evelyn": "knave",
    }
    with pytest.raises(ValueError, match="no 'Name is a knight/knave'"):
        kk_reference_roles("nobody")


@pytest.mark.parametrize(
    "completion",
    [
        r"Reasoning... \boxed{(1) Harper is a knight (2) Benjamin is a knave (3) Evelyn is a knave}",
        "Suppose Harper is a knave... contradiction.\n<answer>Harper is a knight, Benjamin is a knave, "
        "Evelyn is a knave</answer>",
        "If Benjamin is a knight then ... so the answer is: Harper is a knight; Benjamin and Evelyn are knaves.",
        "In conclusion, Harper: knight, Benjamin: knave, Evelyn is not a knight.",
        KK_ANSWER,
    ],
)
def test_kk_right(completion: str) -> None:
    assert kk_is_correct(completion, KK_ANSWER)
    assert grade(completion, KK_ANSWER, "kk") == (
        "Harper is a knight, Benjamin is a knave, Evelyn is a knave",
        True,
    )


def test_kk_one_role_wrong() -> None:
    completion = r"\boxed{(1) Harper is a knight (2) Benjamin is a knight (3) Evelyn is a knave}"
    assert not kk_is_correct(completion, KK_ANSWER)
    assert grade(completion, KK_ANSWER, "kk")[1] is False


def test_kk_name_missing() -> None:
    assert not kk_is_correct(r"\boxed{(1) Harper is a knight (2) Benjamin is a knave}", KK_ANSWER)


def test_kk_contradiction_is_wrong() -> None:
    completion = r"\boxed{Harper is a knight, Harper is a knave, Benjamin is a knave, Evelyn is a knave}"
    assert not kk_is_correct(completion, KK_ANSWER)
    assert kk_extract(completion, KK_ANSWER) == (
        "Harper is a knave and a knight, Benjamin is a knave, Evelyn is a knave"
    )


def test_kk_final_answer_prefers_the_last_block() -> None:
    text = r"<answer>Harper is a knave</answer> Actually \boxed{Harper is a knight} done"
    assert kk_final_answer(text) == "Harper is a knight"
    assert kk_final_answer("reasoning. Final answer: X") == ": X"
    assert kk_final_answer("just text") == "just text"
    # reasoning before the final answer does not count against it
    assert kk_is_correct(
        "Assume Harper is a knave; impossible. "
        r"\boxed{Harper is a knight, Benjamin is a knave, Evelyn is a knave}",
        KK_ANSWER,
    )


def test_kk_follows_the_final_box_rule() -> None:
    """The checker reads the final answer as ``extract_boxed`` does: the last box opened, boxes joined."""
    complete = r"\boxed{Harper is a knight, Benjamin is a knave, Evelyn is a knave}"
    assert kk_is_correct(complete, KK_ANSWER)
    cut_off = complete + r" Wait, let me recheck. \boxed{Harper is a knight, Benjamin is a kn"
    assert kk_final_answer(cut_off) == ""
    assert not kk_is_correct(cut_off, KK_ANSWER)
    assert kk_extract(cut_off, KK_ANSWER) is None
    split = r"\boxed{Harper is a knight}, \boxed{Benjamin is a knave} and \fbox{Evelyn is a knave}."
    assert kk_final_answer(split) == "Harper is a knight, Benjamin is a knave, Evelyn is a knave"
    assert kk_is_correct(split, KK_ANSWER)


def test_grade() -> None:
    assert grade(r"so \boxed{\frac{1}{2}}", "0.5") == (r"\frac{1}{2}", True)
    assert grade("so 12", "12") == (None, False)
    assert grade("so 12", "12", fallback_to_last_number=True) == ("12", True)
    with pytest.raises(ValueError, match="unknown grading kind"):
        grade("x", "1", "code")
