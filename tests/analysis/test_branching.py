"""Branching re-scoring on a tiny model: H_t equals a direct torch computation, q equals branch_guide,
the report's numbers, the HTML page (self-contained), the guide settings."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import torch
import yaml
from analysis_helpers import record, write_run

from sagerl.analysis import load_eval_run
from sagerl.analysis.branching import (
    analyze_branching,
    branching_stats,
    guide_settings,
    rescore,
    write_branching_html,
)
from sagerl.errors import ConfigError, SagerlError

TEXTS = [
    "7 + 5 = 12.\nThe answer is \\boxed{12}.",
    "First 3 × 4 = 12, then 12 - 1 = 11. The answer is \\boxed{11}.",
    "I think it is 5 — maybe √25? \\boxed{5}",
    "",
]
GUIDE = {"gamma": 0.3, "tau": 1.2, "q_min": 0.6, "q_max": 1.4}


@pytest.fixture(scope="module")
def arith_ids():
    from sagerl.tasks import load_problems

    return [p.id for p in load_problems("arith", limit=2)]


@pytest.fixture
def run(tmp_path, arith_ids):
    problems = {
        "arith": {
            pid: [
                record("arith", pid, j, j % 2 == 0, text=t, finish_reason="length" if j == 1 else "stop")
                for j, t in enumerate(TEXTS)
            ]
            for pid in arith_ids
        }
    }
    return load_eval_run(write_run(tmp_path / "eval", problems, settings={"temperature": 0.7}))


@pytest.fixture(scope="module")
def loaded(tiny_model):
    from sagerl.models import load_model, load_tokenizer

    torch.set_num_threads(1)
    return load_model(str(tiny_model)), load_tokenizer(str(tiny_model))


def direct_entropies(model, tokenizer, problem, text, temperature, stop):
    """Unbatched reference: the full prompt + completion through the model, entropy at completion tokens."""
    from sagerl.tasks import render_prompt

    prompt = tokenizer(
        render_prompt(tokenizer, problem, few_shot=4), add_special_tokens=not tokenizer.chat_template
    )
    comp = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if stop else [])
    ids = torch.tensor([prompt["input_ids"] + comp])
    with torch.no_grad():
        logits = model(ids).logits[0].double() / temperature
    p = torch.softmax(logits, -1)
    h = -(p * torch.log(p)).sum(-1)
    start = len(prompt["input_ids"])
    return comp, h[start - 1 : start - 1 + len(comp)]


def test_entropy_matches_a_direct_computation_and_q_the_guide(run, loaded, arith_ids):
    from sagerl.objective import branch_guide
    from sagerl.tasks import load_problems

    model, tokenizer = loaded
    items = rescore(run, model, tokenizer, guide=GUIDE, batch_size=3)
    assert len(items) == 2 * 4  # the empty completion stopped at once: its one token is the EOS token
    problems = {p.id: p for p in load_problems("arith", limit=2)}
    for item in items:
        text = TEXTS[item.sample_index]
        comp, h = direct_entropies(
            model, tokenizer, problems[item.problem_id], text, 0.7, item.sample_index != 1
        )
        assert item.token_ids == comp
        np.testing.assert_allclose(item.entropy, h.numpy(), rtol=1e-4, atol=1e-4)
        expect_q = branch_guide(torch.tensor(item.entropy)[None], torch.ones(1, len(comp)), **GUIDE)[0]
        np.testing.assert_allclose(item.q, expect_q.numpy(), rtol=0, atol=1e-6)
    assert [(i.problem_id, i.sample_index) for i in items] == [(p, j) for p in arith_ids for j in range(4)]
    assert items[3].token_ids == [tokenizer.eos_token_id]


def test_stats_and_html(run, loaded, tmp_path):
    model, tokenizer = loaded
    items = rescore(run, model, tokenizer, guide=GUIDE, batch_size=4)
    stats = branching_stats(items, tokenizer, tau=GUIDE["tau"])
    h = np.concatenate([i.entropy for i in items])
    assert stats["tokens"] == h.size and stats["share_above_tau"] == pytest.approx(float((h > 1.2).mean()))
    correct = np.concatenate([i.entropy for i in items if i.correct])
    assert stats["correct"]["mean_entropy"] == pytest.approx(float(correct.mean()), rel=1e-6)
    assert sum(stats["histogram"]["correct"]) == correct.size
    assert sum(t["count"] for t in stats["top_branching_tokens"]) <= int((h > 1.2).sum())
    for t in stats["top_branching_tokens"]:
        assert 0 < t["branching_rate"] <= 1
    page = write_branching_html(items, tokenizer, tmp_path / "b.html", tau=1.2).read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    assert "<style>" in page and 'title="H=' in page and "q=" in page
    shown = html.unescape(re.sub(r"<[^>]+>", "", page.split("</h3>", 1)[1]))
    assert TEXTS[0] in shown and TEXTS[2] in shown  # tokens reassemble the text, multi-byte characters too


def test_analyze_branching_writes_files(run, tiny_model, tmp_path):
    result = analyze_branching(run, str(tiny_model), tmp_path / "out", tau=2.0, batch_size=8)
    assert result["guide"]["tau"] == 2.0 and result["guide"]["gamma"] == 0.3 and result["temperature"] == 0.7
    assert (tmp_path / "out" / "branching_hist.png").stat().st_size > 0
    assert (tmp_path / "out" / "branching.html").is_file()


def test_guide_settings(tmp_path):
    assert {k: v for k, v in guide_settings("grpo+branch").items() if k != "source"} == GUIDE
    assert guide_settings("grpo+branch", tau=0.5)["tau"] == 0.5
    train = tmp_path / "train"
    train.mkdir()
    (train / "config.yaml").write_text(yaml.safe_dump({"preset": "dapo+branch", "trainer": {"gamma": 0.5}}))
    settings = guide_settings(str(train))
    assert settings["gamma"] == 0.5 and settings["tau"] == 1.2 and settings["source"].endswith("config.yaml")
    with pytest.raises(ConfigError, match="unknown preset"):
        guide_settings("no-such-preset")


def test_unknown_dataset_is_a_clear_error(tmp_path, loaded):
    model, tokenizer = loaded
    run = load_eval_run(write_run(tmp_path / "e", {"mystery": {"p": [record("mystery", "p", 0, True)]}}))
    with pytest.raises(SagerlError, match="--dataset-file mystery=PATH"):
        rescore(run, model, tokenizer, guide=GUIDE)


def test_rescoring_a_raw_prompt_task_uses_its_prompts(tmp_path):
    """The planted task's prompts are raw problem text: re-scored, the first completion token (the strategy
    choice) has the entropy the built model's planted.json measured (a chat-style prompt would not)."""
    import json
    from pathlib import Path

    from sagerl.analysis.branching import rescore
    from sagerl.eval import evaluate
    from sagerl.models import load_model, load_tokenizer, resolve_model
    from sagerl.tasks.planted_model import REPORT_FILE

    path = resolve_model("planted-reference")
    evaluate(
        "planted-reference", ["planted_rare"], n=2, limit=6, max_new_tokens=24, out=tmp_path, progress=False
    )
    items = rescore(
        load_eval_run(tmp_path),
        load_model(path),
        load_tokenizer(path),
        guide={"gamma": 1.0, "tau": 1.2, "q_min": 0.6, "q_max": 1.4},
    )
    decision = json.loads((Path(path) / REPORT_FILE).read_text())["decision_entropy"]
    assert len(items) == 12
    first = [float(item.entropy[0]) for item in items]
    assert abs(sum(first) / len(first) - decision) < 0.05  # the same state for every problem
    assert all(float(item.entropy[2:4].max()) < 0.5 for item in items)  # copying the digit is near-certain
