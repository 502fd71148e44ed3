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
        (r"answer \boxed{5} and then \boxed{\frac{1", "5"),  # the unclosed box is ignored
        (r"\boxed{\frac{1", None),
        (r"\boxed 7.", "7"),
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
    assert extract_boxed(text) == "9"
    assert time.perf_counter() - start < 2.0


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


def test_grade() -> None:
    assert grade(r"so \boxed{\frac{1}{2}}", "0.5") == (r"\frac{1}{2}", True)
    assert grade("so 12", "12") == (None, False)
    assert grade("so 12", "12", fallback_to_last_number=True) == ("12", True)
    with pytest.raises(ValueError, match="unknown grading kind"):
        grade("x", "1", "code")
