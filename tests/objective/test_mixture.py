"""The per-group mixture (1 − w)·A_GRPO + w·A_pass@k (sagerl's own): its formula and what it optimises."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sagerl.objective import (
    compute_advantages,
    grpo_advantages,
    passk_advantages,
    passk_mix_advantages,
    prompt_weight,
)

REWARDS = torch.tensor(
    [1.0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0], dtype=torch.float64
)  # c = 1, c = 6


def test_constant_weight_is_the_convex_combination():
    grpo, passk = grpo_advantages(REWARDS, 8), passk_advantages(REWARDS, 8, k=4)
    torch.testing.assert_close(passk_mix_advantages(REWARDS, 8, k=4, mix_weight=0.0), grpo)
    torch.testing.assert_close(passk_mix_advantages(REWARDS, 8, k=4, mix_weight=1.0), passk)
    torch.testing.assert_close(
        passk_mix_advantages(REWARDS, 8, k=4, mix_weight=0.3), 0.7 * grpo + 0.3 * passk
    )


def test_per_group_weight_is_the_failure_rate():
    grpo, passk = grpo_advantages(REWARDS, 8).view(2, 8), passk_advantages(REWARDS, 8, k=4).view(2, 8)
    w = torch.tensor([[7 / 8], [2 / 8]], dtype=torch.float64)  # 1 − c/n: mostly pass@k where the group fails
    expected = ((1 - w) * grpo + w * passk).reshape(-1)
    torch.testing.assert_close(passk_mix_advantages(REWARDS, 8, k=4), expected)
    torch.testing.assert_close(compute_advantages("passk_mix", REWARDS, 8, k=4), expected)
    # c = 6 > n − k: Pass@k Training gives this group nothing, the mixture keeps GRPO's share
    assert torch.equal(passk[1], torch.zeros(8)) and (expected.view(2, 8)[1] != 0).all()


def test_unscorable_completions_and_bad_input():
    with_nan = passk_mix_advantages(torch.tensor([1.0, float("nan"), 0.0, 0.0]), 4, k=2)
    without = passk_mix_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, k=2)
    assert with_nan[1] == 0
    torch.testing.assert_close(
        with_nan[[0, 2, 3]], without, rtol=1e-4, atol=1e-4
    )  # GRPO's eps on 3 vs 3 rows
    for w in (1.5, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match=r"^mix_weight=.* must be a number in \[0, 1\]$"):
            passk_mix_advantages(REWARDS, 8, k=4, mix_weight=w)
    with pytest.raises(ValueError, match="binary rewards"):
        passk_mix_advantages(torch.tensor([1.0, 0.5, 0.0, 0.0]), 4, k=2)


def test_what_it_optimises():
    """With 0/1 rewards the expected update is D(p)·∇p (test_prompt_weights checks it by enumeration), so the
    mixture optimises Σ_x Φ(p_x), Φ' = D. Constant w: D = (1 − w)·D_GRPO + w·D_pass@k. Per group: positive on
    (0, 1) (Φ increasing in every pass rate), near Pass@k Training's weight for hard prompts and near GRPO's for
    easy ones, and it weighs a hard prompt (p = 0.02) less than an easy one (p = 0.9): 0.65 times, where GRPO
    gives 1.11 and Pass@k Training 267 (docs/methods.md)."""
    for p in (0.05, 0.5, 0.95):
        mixed = prompt_weight("passk_mix", p, 8, k=4, mix_weight=0.3)
        parts = 0.7 * prompt_weight("grpo", p, 8) + 0.3 * prompt_weight("passk", p, 8, k=4)
        assert mixed == pytest.approx(parts, rel=1e-12)
    grid = np.linspace(0.001, 0.999, 99)
    weights = [prompt_weight("passk_mix", p, 8, k=4) for p in grid]
    assert min(weights) > 0
    hard, easy = 0.02, 0.98
    mix = {p: prompt_weight("passk_mix", p, 8, k=4) for p in (hard, 0.9, easy)}
    passk = {p: prompt_weight("passk", p, 8, k=4) for p in (hard, 0.9, easy)}
    grpo = {p: prompt_weight("grpo", p, 8) for p in (hard, 0.9, easy)}
    assert abs(mix[hard] - passk[hard]) < abs(mix[hard] - grpo[hard])
    assert abs(mix[easy] - grpo[easy]) < abs(mix[easy] - passk[easy])
    assert mix[hard] / mix[0.9] == pytest.approx(0.652, abs=1e-3)
