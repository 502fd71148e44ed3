"""The final answer of a completion in its normal form, as the graders read it (outcome-based exploration and
DARLING's answer partition compare them)."""

from sagerl.tasks.verify import answer_normal_form, final_answer


def test_normal_form():
    assert answer_normal_form(" x = 3 ") == "x=3"
    assert answer_normal_form("$\\frac{1}{2}$") == "\\frac{1}{2}"
    assert answer_normal_form("  ") is None and answer_normal_form(None) is None


def test_each_kind_is_read_as_its_grader_reads_it():
    planted = {"kind": "planted", "problem": "[g] 3 8 5 9 = ", "answer": "9"}
    assert final_answer("tail 9! \\boxed{9}", planted) == "9"
    assert final_answer("head 3. \\boxed{3}", planted) == "3"  # wrong, but an answer
    assert final_answer("head 3.", planted) is None
    assert final_answer("so \\boxed{ 12 }", {"kind": "math", "answer": "12"}) == "12"
    assert final_answer("it is 12") is None
    assert final_answer("it is 12", fallback_to_last_number=True) == "12"
    kk = {"kind": "kk", "answer": "Ann is a knight, Bob is a knave"}
    assert final_answer("\\boxed{Ann is a knight, Bob is a knave}", kk) == "Annisaknight,Bobisaknave"
