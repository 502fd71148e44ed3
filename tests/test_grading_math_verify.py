"""Math-Verify's own test cases, graded by ``sagerl.grading`` (issue 9, fault 4).

The cases (tests/data/math_verify_cases.json; provenance and license inside) are (gold, pred, expected)
triples from Math-Verify's tests. Math-Verify extracts answers from free text; sagerl grades the final
box of a completion against a bare reference answer, so each case is mapped as follows:

- the reference is the gold's math (``$9$`` -> ``9``), or the final box of a gold that has one;
- a prediction with a box is graded as the completion it is (:func:`sagerl.grading.is_correct`);
- a prediction that is only math (one ``$...$``/``\\[...\\]``/``\\(...\\)`` span, or no words at all)
  is graded as the model's boxed answer (``\\boxed{<math>}``);
- a prediction in free text without a box has no final answer for sagerl: incorrect, by design (sagerl's
  prompts ask for a ``\\boxed{}`` answer, and a number picked out of reasoning is not one).

Every case must then give Math-Verify's expected verdict, except the free-text ones and those listed in
:data:`DIFFERENCES`, which must give the opposite verdict, for the reason written there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sagerl.grading import extract_answer, is_correct

CASES = json.loads((Path(__file__).parent / "data" / "math_verify_cases.json").read_text(encoding="utf-8"))

DIFFERENCES = {
    "tests/test_all.py::test_number_extraction[5]": "a decimal comma (1000,99): in a box, a comma separates "
    "the items of a list, and only groups of three digits read as thousands",
    "tests/test_all.py::test_number_extraction[6]": "a decimal comma (1,22): read as the list 1, 22",
    "tests/test_all.py::test_complex_math_expressions[7]": "the test asks math-verify for 2 decimals; sagerl "
    "compares decimals within 1e-6 relative (0.33 is not 1/3)",
    "tests/test_all.py::test_complex_math_expressions[13]": "the test asks math-verify for 2 decimals; sagerl "
    "compares decimals within 1e-6 relative (2.6667 is not 8/3)",
    "tests/test_all.py::test_math_extraction_additional_cases[17]": "the completion boxes 255 last and states "
    "its final answer 10,455 in prose; sagerl grades the final box",
    "tests/test_all.py::test_set_rel_assymetry[2]": "the test turns on allow_set_relation_comp; sagerl uses "
    "math-verify's default (a set and an inequality are different answers)",
    "tests/test_boxed.py::test_boxed[0]": "the gold is a completion whose two boxes are separated by "
    "'++++++', which is not a separator: its final answer is the last box, 4",
    "tests/test_open_thoughts.py::test_open_thoughts[14]": "'for part (a) and' between the boxes is prose, so "
    "the final answer is the last box, (1, 1); only separators and 'x =' join boxes",
    "tests/test_open_thoughts.py::test_open_thoughts[27]": "the gold '\\boxed{1} papers and \\boxed{2} bins' has "
    "prose between its boxes, so its final answer is 2",
    "tests/test_strict.py::test_strict_variable_comparison[1]": "the test turns strict mode off; sagerl uses "
    "math-verify's default (f(x) and f(y) differ)",
    "tests/test_yujianll.py::test_string_extraction[9]": "1 - 1/e and 1 + 1/e are different numbers; "
    "Math-Verify's test records its own wrong verdict",
}

_SPAN = re.compile(r"^\s*(?:\$\$(.*)\$\$|\$(.*)\$|\\\[(.*)\\\]|\\\((.*)\\\))\s*$", re.DOTALL)
_WORD = re.compile(r"[A-Za-z]")
_COMMAND = re.compile(r"\\[A-Za-z]+")


def _math_only(text: str) -> str | None:
    """The math of a text that is only math (one delimited span, or no words); None for prose."""
    span = _SPAN.match(text)
    if span:
        return next(g for g in span.groups() if g is not None).strip()
    return text.strip() if not _WORD.search(_COMMAND.sub("", text)) else None


def _has_box(text: str) -> bool:
    return "\\boxed" in text or "\\fbox" in text


def sagerl_verdict(case: dict) -> tuple[bool, str]:
    """(sagerl's verdict, how the prediction was read: "completion", "answer" or "prose")."""
    gold = case["gold"]
    reference = extract_answer(gold) if _has_box(gold) else (_math_only(gold) or gold.strip())
    pred = case["pred"]
    if _has_box(pred):
        return is_correct(pred, reference or ""), "completion"
    answer = _math_only(pred)
    if answer is None:
        return False, "prose"
    return is_correct("\\boxed{" + answer + "}", reference or ""), "answer"


def test_cases_file_has_provenance() -> None:
    assert "github.com/huggingface/Math-Verify" in CASES["provenance"]
    assert "Apache" in CASES["license"]
    ids = [c["id"] for c in CASES["cases"]]
    assert len(ids) == len(set(ids)) > 250
    assert set(DIFFERENCES) <= set(ids)


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["id"].split("::")[1])
def test_math_verify_case(case: dict) -> None:
    verdict, read_as = sagerl_verdict(case)
    expected = bool(case["expected"])
    if case["id"] in DIFFERENCES:
        assert verdict is not expected, f"now agrees with math-verify; drop it from DIFFERENCES: {case['id']}"
    elif read_as == "prose":
        assert verdict is False  # no box, no final answer (by design; see the module docstring)
    else:
        assert verdict is expected, case
