"""Outcome-based exploration (arXiv 2509.06941): the UCB bonus over (prompt, answer) counts, its two baselines,
the batch penalty, and the counts as state."""

from __future__ import annotations

import json

import pytest
import torch

from sagerl.objective import (
    OutcomeCounts,
    batch_penalty,
    compute_advantages,
    grpo_advantages,
    outcome_advantages,
    ucb_bonus,
)

REWARDS = torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)
ANSWERS = torch.tensor([0, 1, 1, -1])  # the right answer once, a wrong answer twice, no answer once
COUNTS = torch.tensor([1.0, 4.0, 4.0, 0.0], dtype=torch.float64)  # N(x, a) after this batch


def test_counts_accumulate_across_batches_and_round_trip():
    counts = OutcomeCounts()
    first = counts.update(["x", "x", "x", "y"], ["7", "3", "7", None])
    assert first.tolist() == [2, 1, 2, 0]  # counts after the batch: "x"->"7" twice in it
    second = counts.update(["x", "y"], ["7", "7"])
    assert second.tolist() == [3, 1]
    state = json.loads(json.dumps(counts.state_dict()))
    assert state == {"counts": [["x", "3", 1], ["x", "7", 3], ["y", "7", 1]]}
    again = OutcomeCounts()
    again.load_state_dict(state)
    assert again.counts == counts.counts and len(again) == 3


def test_bonus_and_penalty():
    assert ucb_bonus(torch.tensor([0.0, 1, 4, 100])).tolist() == pytest.approx([0, 1, 0.5, 0.1])
    assert batch_penalty(ANSWERS, 4).tolist() == pytest.approx([0, -1 / 4, -1 / 4, 0])
    assert batch_penalty(torch.tensor([2, 2, 2, 2]), 4).tolist() == pytest.approx([-3 / 4] * 4)


def test_ucb_con_and_ucb_mean_hand_computed():
    grpo = grpo_advantages(REWARDS, 4)
    bonus = torch.tensor([1.0, 0.5, 0.5, 0.0], dtype=torch.float64)
    con = outcome_advantages(REWARDS, 4, "ucb_con", ANSWERS, COUNTS, coef=1.0, b0=0.5)
    torch.testing.assert_close(con, grpo + (bonus - 0.5))
    loo = (bonus.sum() - bonus) / 3  # [1/3, 1/2, 1/2, 2/3]
    mean = outcome_advantages(REWARDS, 4, "ucb_mean", ANSWERS, COUNTS, coef=2.0)
    torch.testing.assert_close(mean, grpo + 2.0 * (bonus - loo))
    batch = outcome_advantages(REWARDS, 4, "outcome_batch", ANSWERS, coef=0.5)
    torch.testing.assert_close(batch, grpo + 0.5 * batch_penalty(ANSWERS, 4))
    params = dict(answers=ANSWERS, counts=COUNTS, coef=1.0, b0=0.5)
    torch.testing.assert_close(compute_advantages("ucb_con", REWARDS, 4, **params), con)


@pytest.mark.parametrize("kind", ["ucb_mean", "ucb_con", "outcome_batch"])
def test_the_term_is_zero_on_all_correct_groups_and_unscorable_rows(kind):
    rewards = torch.tensor([1.0, 1, 1, 1, 1, float("nan"), 0, 0], dtype=torch.float64)
    answers = torch.tensor([0, 0, 1, 1, 0, -1, 1, 1])
    counts = torch.tensor([1.0, 1, 9, 9, 2, 0, 3, 3], dtype=torch.float64)
    adv = outcome_advantages(rewards, 4, kind, answers, counts)
    grpo = grpo_advantages(rewards, 4)
    torch.testing.assert_close(adv[:4], grpo[:4])  # all correct: GRPO's (zeros)
    assert adv[5] == 0
    assert not torch.allclose(adv[4:], grpo[4:])


def test_bad_input():
    with pytest.raises(ValueError, match="binary rewards"):
        outcome_advantages(torch.tensor([0.5, 0, 0, 1]), 4, "ucb_con", ANSWERS, COUNTS)
    with pytest.raises(ValueError, match="needs counts"):
        compute_advantages("ucb_mean", REWARDS, 4, answers=ANSWERS)
    with pytest.raises(ValueError, match=r"coef=-1 must be a number in \[0, inf\)"):
        outcome_advantages(REWARDS, 4, "outcome_batch", ANSWERS, coef=-1)
    with pytest.raises(ValueError, match=r"b0=2 must be a number in \[0, 1\]"):
        outcome_advantages(REWARDS, 4, "ucb_con", ANSWERS, COUNTS, b0=2)
    with pytest.raises(ValueError, match="unknown outcome exploration"):
        outcome_advantages(REWARDS, 4, "ucb", ANSWERS, COUNTS)
