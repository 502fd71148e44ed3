"""The unlikeliness reward: hand-computed ranks, rewards and advantages; the equal-group drop."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective import (
    compute_advantages,
    grpo_advantages,
    likelihood_ranks,
    unlikeliness_advantages,
    unlikeliness_rewards,
)


def test_hand_computed_group():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    logp = torch.tensor([-1.0, -3.0, -2.0, -0.5])  # mean log π_old per token
    torch.testing.assert_close(likelihood_ranks(logp, 4), torch.tensor([2.0, 0.0, 1.0, 3.0]))
    shaped = unlikeliness_rewards(rewards, logp, 4, beta_rank=0.25)
    torch.testing.assert_close(shaped, torch.tensor([1 - 0.25 * 2 / 4, 1.0, 0.0, 1 - 0.25 * 3 / 4]))
    adv = unlikeliness_advantages(rewards, 4, logp)
    torch.testing.assert_close(adv, grpo_advantages(shaped, 4))
    assert adv[1] > adv[0] > adv[3] > adv[2]  # the unlikely correct completion gains most
    torch.testing.assert_close(compute_advantages("unlikely", rewards, 4, sequence_logp=logp), adv)


def test_ties_keep_group_order_and_equal_reward_groups_are_dropped():
    torch.testing.assert_close(
        likelihood_ranks(torch.tensor([-1.0, -1.0, -2.0]), 3), torch.tensor([1.0, 2.0, 0.0])
    )
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    logp = torch.tensor([-1.0, -2.0, -3.0, -4.0, -1.0, -2.0, -3.0, -4.0])
    adv = unlikeliness_advantages(rewards, 4, logp)
    assert torch.equal(adv[:4], torch.zeros(4))
    assert adv[5] > 0
    kept = unlikeliness_advantages(rewards, 4, logp, drop_equal_groups=False)
    assert (kept[:4] != 0).all()  # the rank penalty alone would make advantages of both signs


def test_bad_input():
    r, lp = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, -2.0])
    for beta in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"beta_rank=.* must be a number in \[0, 1\]"):
            unlikeliness_advantages(r, 2, lp, beta_rank=beta)
    with pytest.raises(ValueError, match="needs sequence_logp"):
        compute_advantages("unlikely", r, 2)
    with pytest.raises(ValueError, match="shape"):
        unlikeliness_advantages(r, 2, torch.tensor([-1.0]))


def _authors_advantages(scores: list[float], old_logp: list[float], rank_penalty: float) -> torch.Tensor:
    """The authors' _compute_advantages (rewarding-unlikely-release, ray_lean_trainer.py), re-derived for one
    group: ranks argsort(argsort(mean log π_old)) / G, scores · (1 − rank · penalty), then (s − mean) / (std + 1e-6)
    with torch's (Bessel-corrected) std."""
    s, lp = torch.tensor(scores, dtype=torch.float64), torch.tensor(old_logp, dtype=torch.float64)
    ranks = torch.argsort(torch.argsort(lp)).to(torch.float64) / len(scores)
    shaped = s * (1 - ranks * rank_penalty)
    return (shaped - shaped.mean()) / (shaped.std() + 1e-6)


def test_equal_to_the_authors_advantages_on_groups_with_spread():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        rewards = (torch.rand(8, generator=gen) < 0.5).to(torch.float64)
        if rewards.min() == rewards.max():
            continue  # the authors remove these groups (advantage_threshold); sagerl's preset refills them
        logp = -torch.rand(8, generator=gen, dtype=torch.float64) * 2  # distinct: no ties
        theirs = _authors_advantages(rewards.tolist(), logp.tolist(), 0.25)
        # sagerl's ε is TRL's 1e-4 (the authors': 1e-6): equal to 1e-3 relative on these groups
        torch.testing.assert_close(unlikeliness_advantages(rewards, 8, logp), theirs, rtol=1e-3, atol=1e-4)
