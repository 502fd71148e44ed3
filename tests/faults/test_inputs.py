"""Degenerate inputs the other test files do not cover: an empty JSONL file, empty and truncated
completions through ``evaluate``, one-sample groups in the objective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_eval_run import PlainTokenizer  # tests/ is on sys.path (pytest rootdir import)

from sagerl.cli import main
from sagerl.errors import SagerlError
from sagerl.eval import evaluate
from sagerl.eval.samplers import Completion, Sampler
from sagerl.eval.samples import SAMPLES_FILE
from sagerl.objective import (
    bnpo_advantages,
    dr_grpo_advantages,
    dynamic_sampling_mask,
    grpo_advantages,
    sage_loss,
)
from sagerl.tasks import load_problems


def test_empty_jsonl_file_is_refused_by_eval_and_train(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert load_problems(str(empty)) == []
    with pytest.raises(SagerlError, match=rf"dataset '{empty}' has no problems"):
        evaluate("m", [str(empty)], n=2, out=tmp_path / "eval", progress=False)
    assert not (tmp_path / "eval").exists()  # refused before anything was written
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n")  # blank lines only: no rows either
    with pytest.raises(SystemExit) as exc:
        main(["train", "-d", str(blank), "-o", str(tmp_path / "train")])
    assert exc.value.code == 2
    assert f"dataset '{blank}' has no problems" in capsys.readouterr().err


class ScriptedSampler(Sampler):
    """Returns the same completion (text, tokens, finish reason) for every request."""

    name = "scripted"

    def __init__(self, text: str, num_tokens: int, finish_reason: str) -> None:
        self.tokenizer = PlainTokenizer()
        self.completion = Completion(text, num_tokens, finish_reason)

    def generate(self, prompts, n, *, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, sample_seeds=None):
        return [[self.completion for _ in seeds] for seeds in sample_seeds]


def _evaluate_scripted(tmp_path: Path, text: str, num_tokens: int, finish: str) -> dict:
    """Evaluate one problem (answer 2) with 4 samples that are all ``text``; check and return its results."""
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "answer": "2"}) + "\n")
    out = tmp_path / "run"
    res = evaluate(
        "m", [str(data)], n=4, out=out, sampler=ScriptedSampler(text, num_tokens, finish), progress=False
    )
    entry = res["datasets"]["one"]
    assert entry["pass@1"] == entry["pass@4"] == 0.0
    assert entry["truncated_fraction"] == (1.0 if finish == "length" else 0.0)
    assert entry["mean_num_tokens"] == num_tokens
    rows = [json.loads(line) for line in (out / SAMPLES_FILE).read_text().splitlines()]
    assert [(r["text"], r["extracted"], r["correct"]) for r in rows] == [(text, None, False)] * 4
    return res


@pytest.mark.parametrize("num_tokens", [0, 1])  # nothing at all, or only the end-of-sequence token
def test_empty_completion(tmp_path: Path, num_tokens: int) -> None:
    _evaluate_scripted(tmp_path, "", num_tokens, "stop")


@pytest.mark.parametrize(
    "text",
    [
        r"First \boxed{2}. Hmm, let me recheck: \boxed{",  # cut off inside its final box: no answer
        r"So the answer is \boxed{2",
        r"So the answer is \boxed",
    ],
)
def test_truncated_completion(tmp_path: Path, text: str) -> None:
    _evaluate_scripted(tmp_path, text, 8, "length")


def test_one_sample_groups() -> None:
    """G = 1: a group has no spread, so every advantage is 0 (never NaN), and DAPO filters every group."""
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    for adv in (grpo_advantages(rewards, 1), dr_grpo_advantages(rewards, 1), bnpo_advantages(rewards, 1)):
        assert torch.equal(adv, torch.zeros(4))
    assert dynamic_sampling_mask(rewards, 1).tolist() == [False] * 4
    # with zero advantages only the anchor term is left: β · mean k3
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0], [-1.0, -1.0], [-2.0, -0.1]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0], [-0.5, -2.0], [-1.2, -1.0], [-2.0, -0.3]])
    mask = torch.ones(4, 2)
    out = sage_loss(logp, None, ref, grpo_advantages(rewards, 1), mask, beta=0.1)
    d = ref - logp.detach()
    torch.testing.assert_close(out.loss, 0.1 * (torch.exp(d) - d - 1).mean())
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_nan_and_inf_in_entropies_and_log_probs_give_finite_guides_and_loss() -> None:
    """Logits with inf give an infinite or NaN token entropy, or a -inf log-prob: the guide stays in
    [q_min, q_max] (NaN: no shaping, q = 1), and the loss and its gradient stay finite."""
    from sagerl.objective import branch_guide, token_guide

    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    entropy = torch.tensor([[float("nan"), float("inf"), 0.5, 2.2], [1.2, float("nan"), 5.0, float("nan")]])
    q = branch_guide(entropy, mask, gamma=0.3, tau=1.2, q_min=0.6, q_max=1.4)
    torch.testing.assert_close(q, torch.tensor([[1.0, 1.4, 1.0, 1.3], [1.0, 1.0, 1.4, 1.0]]))
    logp = torch.tensor([[-0.1, -float("inf"), -2.0, -1.0], [-0.5, -0.7, float("nan"), -1.0]])
    qt = token_guide(logp, mask, alpha=0.4)
    assert torch.isfinite(qt).all() and ((qt >= 0.6) & (qt <= 1.4)).all()
    # a NaN reward (an unscorable completion) gets advantage 0; the loss over finite log-probs stays finite
    rewards = torch.tensor([1.0, float("nan")])
    adv = grpo_advantages(rewards, 1)
    pol = torch.tensor([[-0.1, -3.0, -2.0, -1.0], [-0.5, -0.7, -0.2, -1.0]], requires_grad=True)
    out = sage_loss(pol, None, pol.detach() - 0.1, adv, mask, beta=0.05, log_q=torch.log(q))
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(pol.grad).all()
