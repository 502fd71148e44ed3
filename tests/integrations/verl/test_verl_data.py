"""The pieces the verl recipes use: BNPO as verl's advantage estimator, sagerl's grader as verl's reward
function, and sagerl's data sets as verl's parquet files."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from sagerl.integrations.verl.advantages import compute_bnpo_outcome_advantage
from sagerl.integrations.verl.data import main, write_parquet
from sagerl.integrations.verl.reward import compute_score
from sagerl.objective import bnpo_advantages
from sagerl.tasks import Problem


def test_bnpo_is_registered_and_groups_rows_by_uid():
    assert get_adv_estimator_fn("bnpo") is compute_bnpo_outcome_advantage
    rewards = torch.zeros(6, 4)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # groups a (rows 0, 2, 4) and b (1, 3, 5)
    mask = torch.ones(6, 4)
    mask[3, 2:] = 0
    index = np.array(["a", "b", "a", "b", "a", "b"], dtype=object)
    adv, returns = compute_bnpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=index
    )
    expected = bnpo_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0]), 3)  # a's rows, then b's
    assert torch.allclose(adv[[0, 2, 4, 1, 3, 5], 0], expected)
    assert torch.equal(adv, adv[:, :1] * mask) and torch.equal(adv, returns)


def test_bnpo_refuses_unequal_groups_and_negative_rewards():
    index = np.array(["a", "a", "b"], dtype=object)
    with pytest.raises(ValueError, match="equal size"):
        compute_bnpo_outcome_advantage(torch.ones(3, 2), torch.ones(3, 2), index)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        compute_bnpo_outcome_advantage(-torch.ones(4, 1), torch.ones(4, 1), np.array(["a", "a", "b", "b"]))


def test_reward_is_sagerls_grade():
    assert compute_score("math500", "so the answer is \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert compute_score("math500", "so the answer is \\boxed{3}", "0.5") == 0.0
    assert compute_score("math500", "no box: 0.5", "0.5") == 0.0
    roles = "Zoe is a knight, Liam is a knave"
    answer = "\\boxed{(1) Zoe is a knight (2) Liam is a knave}"
    assert compute_score("kk", answer, roles, extra_info={"kind": "kk"}) == 1.0


def test_parquet_rows_in_verls_layout(tmp_path):
    problems = [Problem(id="p1", problem="What is 1+1?", answer="2", dataset="toy")]
    path = write_parquet(problems, tmp_path / "toy.parquet")
    row = pd.read_parquet(path).iloc[0]
    assert row["data_source"] == "toy"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert row["extra_info"] == {"id": "p1", "kind": "math"}
    (message,) = row["prompt"]
    assert message["role"] == "user" and message["content"].startswith(
        "What is 1+1?\nPlease reason step by step"
    )


def test_data_command_writes_each_set(tmp_path):
    source = tmp_path / "toy_set.jsonl"
    rows = [{"id": f"t{i}", "problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(5)]
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main([str(source), "--out", str(tmp_path / "out"), "--limit", "3"]) == 0
    frame = pd.read_parquet(tmp_path / "out" / "toy_set.parquet")
    assert len(frame) == 3 and list(frame["data_source"]) == ["toy_set"] * 3
    assert [r["ground_truth"] for r in frame["reward_model"]] == ["0", "2", "4"]
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)])
    assert exit_info.value.code == 2
