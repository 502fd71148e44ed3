"""RS-GRPO (arXiv 2509.24261): the authors' advantage, and what its expected update is the gradient of."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from bandit import bandit, exact_expected_update, pass_rate_gradient

from sagerl.objective import compute_advantages, entropic_risk_weight, prompt_weight, rs_grpo_advantages


def authors_formula(scores: np.ndarray, beta: float) -> np.ndarray:
    """The authors' verl function (compute_rs_grpo_advantage) for one group, written again with numpy:
    soft = (1/β)(logsumexp(β·r) − log n), A = (exp(β(r − soft)) − 1)/β."""
    x = beta * scores
    top = x.max()
    soft = (top + np.log(np.exp(x - top).sum()) - np.log(len(scores))) / beta
    return (np.exp(beta * (scores - soft)) - 1) / beta


def test_hand_computed_group():
    # 3 of 8 correct, β = 2: mean exp(2r) = (3e² + 5)/8, so exp(2(r − b)) = 8e^{2r}/(3e² + 5)
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0], dtype=torch.float64)
    e2 = math.exp(2)
    correct, wrong = (8 * e2 / (3 * e2 + 5) - 1) / 2, (8 / (3 * e2 + 5) - 1) / 2
    expected = torch.tensor(
        [correct, wrong, wrong, correct, correct, wrong, wrong, wrong], dtype=torch.float64
    )
    torch.testing.assert_close(rs_grpo_advantages(rewards, 8, risk_beta=2.0), expected)
    assert correct == pytest.approx(0.58794, abs=1e-5) and wrong == pytest.approx(-0.35276, abs=1e-5)
    torch.testing.assert_close(compute_advantages("rs_grpo", rewards, 8, risk_beta=2.0), expected)


@pytest.mark.parametrize("beta", [0.5, 2.0, 4.0, 30.0])
def test_equals_the_authors_formula_on_any_rewards(beta):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=gen, dtype=torch.float64) * 3 - 1
    got = rs_grpo_advantages(rewards, 6, risk_beta=beta).view(4, 6).numpy()
    for row, group in zip(got, rewards.view(4, 6).numpy(), strict=True):
        np.testing.assert_allclose(row, authors_formula(group, beta), rtol=1e-10, atol=1e-12)


def test_small_beta_is_dr_grpo_and_equal_rewards_give_zero():
    rewards = torch.tensor([1.0, 0, 0, 1, 0.5, 0.2, 0.9, 0.0], dtype=torch.float64)
    torch.testing.assert_close(
        rs_grpo_advantages(rewards, 4, risk_beta=1e-7),
        compute_advantages("dr_grpo", rewards, 4),
        atol=1e-6,
        rtol=0,
    )
    assert torch.equal(rs_grpo_advantages(torch.ones(8), 4, risk_beta=4.0), torch.zeros(8))


def test_large_beta_does_not_overflow_and_nan_leaves_the_group():
    adv = rs_grpo_advantages(torch.tensor([0.0, 10.0, 0.0, 0.0]), 4, risk_beta=50.0)
    assert torch.isfinite(adv).all()
    assert adv[1] == pytest.approx((4 - 1) / 50, rel=1e-6)  # exp(β(r − b)) → n for the only maximum
    with_nan = rs_grpo_advantages(torch.tensor([1.0, float("nan"), 0.0, 0.0]), 4, risk_beta=2.0)
    without = rs_grpo_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, risk_beta=2.0)
    assert with_nan[1] == 0
    torch.testing.assert_close(with_nan[[0, 2, 3]], without)


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan"), float("inf"), True, "2"])
def test_bad_beta_is_refused_in_one_line(beta):
    with pytest.raises(ValueError, match=r"^risk_beta=.* must be a number in \(0, inf\)$"):
        rs_grpo_advantages(torch.tensor([1.0, 0.0]), 2, risk_beta=beta)


@pytest.mark.parametrize("beta", [0.5, 2.0, 4.0])
def test_expected_update_is_the_gradient_of_its_own_prompt_objective_not_the_entropic_risk(beta):
    """Exact enumeration of every group of n = 4 on a 4-armed bandit with 0/1 rewards: the expected update is
    D_n(p)·∇p (prompt_weight), the gradient of Φ_n(p) = ∫D_n; it is not ∇J_RS = J_RS'(p)·∇p at this n (the group
    mean inside a ratio biases it); D_n → J_RS' as n grows."""
    n = 4
    theta, values = bandit([1.0, 0.0, 1.0, 0.0], [-1.0, 0.5, -2.0, 0.3])
    update = exact_expected_update(theta, values, n, lambda r, _: rs_grpo_advantages(r, n, risk_beta=beta))
    p, grad_p = pass_rate_gradient(theta, [0, 2])
    torch.testing.assert_close(
        update, prompt_weight("rs_grpo", p, n, risk_beta=beta) * grad_p, rtol=1e-9, atol=1e-12
    )
    entropic = entropic_risk_weight(p, beta) * grad_p  # ∇ (1/β) log(1 − p + p e^β)
    assert (update - entropic).norm() > 0.05 * entropic.norm()
    # the closed form of J_RS' is the derivative of the entropic risk
    risk = lambda q: math.log(1 - q + q * math.exp(beta)) / beta  # noqa: E731
    assert entropic_risk_weight(0.3, beta) == pytest.approx(
        (risk(0.3 + 1e-6) - risk(0.3 - 1e-6)) / 2e-6, rel=1e-6
    )
    ratio = [
        prompt_weight("rs_grpo", 0.1, m, risk_beta=beta) / entropic_risk_weight(0.1, beta)
        for m in (4, 64, 256)
    ]
    assert ratio[0] < ratio[1] < ratio[2] and ratio[2] > 0.98


def test_at_eight_rollouts_hard_prompts_get_a_fraction_of_the_entropic_risk_weight():
    """The values docs/methods.md quotes: D_8(p)/J_RS'(p) at p = 0.02."""
    got = {
        b: prompt_weight("rs_grpo", 0.02, 8, risk_beta=b) / entropic_risk_weight(0.02, b) for b in (0.5, 2, 4)
    }
    assert got == pytest.approx({0.5: 0.813, 2: 0.529, 4: 0.223}, abs=1e-3)
