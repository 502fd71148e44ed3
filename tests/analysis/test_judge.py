"""The LLM judge: rubric, answer parsing, unlabeled items (unparseable answers, sampler errors), with a fake sampler."""

from __future__ import annotations

import pytest
from analysis_helpers import record, write_run

from sagerl.analysis import load_eval_run, pattern_shares
from sagerl.analysis.judge import RUBRIC, Judge, parse_labels
from sagerl.analysis.patterns import TAXONOMY, UNLABELED
from sagerl.eval.samplers import Completion, Sampler


class PlainTokenizer:
    chat_template = None


class FakeJudgeSampler(Sampler):
    """Answers by keyword in the solution: "BOOM" raises, "???" gets prose without a label."""

    name = "fake"

    def __init__(self) -> None:
        self.tokenizer = PlainTokenizer()
        self.calls: list[dict] = []

    def generate(self, prompts, n, *, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, sample_seeds=None):
        self.calls.append({"prompts": len(prompts), "n": n, "temperature": temperature})
        out = []
        for prompt in prompts:
            solution = prompt.split("Solution:\n", 1)[1]
            if "BOOM" in solution:
                raise TimeoutError("judge timed out")
            if "???" in solution:
                answer = "I am not sure what this is."
            elif "cases" in solution:
                answer = "Case analysis, proof by contradiction"
            else:
                answer = "direct_computation"
            out.append([Completion(answer, 5, "stop")])
        return out


def test_rubric_lists_the_taxonomy():
    assert all(f"- {label}:" in RUBRIC for label in TAXONOMY)
    assert "{solution}" in RUBRIC


@pytest.mark.parametrize(
    ("answer", "labels"),
    [
        ("case_analysis, verification", ("case_analysis", "verification")),
        ("Proof by contradiction; Self-check.", ("contradiction", "verification")),
        ("Labels: Modular Arithmetic, direct computation", ("modular_arithmetic", "direct_computation")),
        ("symmetry, recursion", ("symmetry_invariant", "induction")),
        ("It uses algebra.", (UNLABELED,)),
        ("", (UNLABELED,)),
    ],
)
def test_parse_labels(answer, labels):
    assert parse_labels(answer) == labels


def test_judge_labels_failures_and_unparsed_are_unlabeled():
    sampler = FakeJudgeSampler()
    judge = Judge(sampler, batch_size=4)
    labels = judge(["two cases", "BOOM", "x = 2", "???", "more cases"])
    assert labels == [
        ("case_analysis", "contradiction"),
        (UNLABELED,),
        ("direct_computation",),
        (UNLABELED,),
        ("case_analysis", "contradiction"),
    ]
    assert judge.failures == 1 and judge.unparsed == 1
    assert all(c["temperature"] == 0.0 and c["n"] == 1 for c in sampler.calls)
    # the failing batch of 4 was retried one by one, then the last item went alone
    assert [c["prompts"] for c in sampler.calls] == [4, 1, 1, 1, 1, 1]


def test_judge_shares_count_unlabeled(tmp_path):
    texts = ["two cases", "BOOM", "x = 2", "???"]
    recs = [record("d", "p", j, True, text=t) for j, t in enumerate(texts)]
    run = load_eval_run(write_run(tmp_path / "r", {"d": {"p": recs}}))
    judge = Judge(FakeJudgeSampler())
    shares = pattern_shares(run, "judge", judge=judge, among=("correct",))
    correct = shares["correct"]
    assert correct["num_completions"] == 4  # nothing dropped
    assert correct["shares"][UNLABELED]["share"] == 0.5 and correct["shares"][UNLABELED]["count"] == 2
    assert correct["shares"]["case_analysis"]["share"] == 0.25
    assert "all" not in shares
