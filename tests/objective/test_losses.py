"""Hand-computed batches for advantages, divergences, the surrogate, aggregation and DAPO helpers."""

import math

import pytest
import torch

from sagerl.objective import (
    aggregate_loss,
    beta_parameters,
    bnpo_advantages,
    clipped_surrogate,
    compute_advantages,
    dr_grpo_advantages,
    dynamic_sampling_mask,
    forward_kl,
    get,
    grpo_advantages,
    kl_to_go,
    overlong_penalty,
    sage_loss,
    shaped_kl,
)


def test_grpo_and_dr_grpo_advantages():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    adv = grpo_advantages(rewards, 4)
    std = math.sqrt(1 / 3)  # sample std of [1, 0, 0, 1]
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-4)
    torch.testing.assert_close(adv[:4], expected)
    assert torch.equal(adv[4:], torch.zeros(4))
    torch.testing.assert_close(
        dr_grpo_advantages(rewards, 4), torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    )
    with pytest.raises(ValueError, match="multiple"):
        grpo_advantages(rewards, 3)


def test_grpo_advantages_ignore_unscorable():
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    adv = grpo_advantages(rewards, 4, scale="none")
    torch.testing.assert_close(adv, torch.tensor([2 / 3, 0.0, -1 / 3, -1 / 3]))


def test_bnpo_hand_computed_batch():
    # group means p = 0.25, 0.5, 0.75 (G = 4)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0])
    m, v = 0.5, 0.0625  # mean and sample variance of [0.25, 0.5, 0.75]
    c = m * (1 - m) / v - 1  # 3
    a = m * c  # 1.5 (= b, since m = 1/2)
    alpha = beta = 1 + a / 3  # 1.5
    assert beta_parameters(torch.tensor([0.25, 0.5, 0.75])) == pytest.approx((alpha, beta))
    log_b = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)

    def pdf(p):
        return math.exp((alpha - 1) * math.log(p) + (beta - 1) * math.log(1 - p) - log_b)

    expected = []
    for i, p in enumerate([0.25, 0.5, 0.75]):
        expected += [(r - p) / pdf(p) for r in rewards[4 * i : 4 * i + 4].tolist()]
    torch.testing.assert_close(bnpo_advantages(rewards, 4), torch.tensor(expected))


def test_bnpo_degenerate_and_extreme_batches():
    # one group: uniform Beta(1, 1), pdf = 1, advantages R − p
    torch.testing.assert_close(
        bnpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4), torch.tensor([0.75, -0.25, -0.25, -0.25])
    )
    # all-wrong and all-right groups: pdf can vanish at p ∈ {0, 1}; advantages stay finite (0)
    rewards = torch.tensor([0.0, 0, 1, 1, 0, 1, 1, 1])
    adv = bnpo_advantages(rewards, 2)
    assert torch.isfinite(adv).all()
    assert torch.equal(adv[:4], torch.zeros(4))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bnpo_advantages(torch.tensor([2.0, 0.0]), 2)


def test_shaped_kl_estimators_closed_forms():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    log_q = torch.tensor([[0.2, -0.1]])
    d = ref + log_q - logp  # [-0.3, 0.9]
    torch.testing.assert_close(shaped_kl(logp, ref, log_q, "k1"), -d)
    torch.testing.assert_close(shaped_kl(logp, ref, log_q, "k2"), 0.5 * d**2)
    torch.testing.assert_close(shaped_kl(logp, ref, log_q, "k3"), torch.exp(d) - d - 1)
    torch.testing.assert_close(shaped_kl(logp, ref, None, "k3"), torch.exp(ref - logp) - (ref - logp) - 1)
    old = torch.tensor([[-1.2, -2.0]])
    torch.testing.assert_close(
        shaped_kl(logp, ref, log_q, "k3", old_logp=old), (torch.exp(d) - d - 1) * torch.exp(logp - old)
    )
    with pytest.raises(ValueError, match="unknown KL estimator"):
        shaped_kl(logp, ref, log_q, "k4")


def test_forward_kl_value_and_gradient():
    logp = torch.tensor([[-1.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0]])
    rho = torch.exp(ref - logp.detach())
    value = forward_kl(logp, ref)
    torch.testing.assert_close(value, rho * torch.log(rho) - rho + 1)
    value.sum().backward()
    torch.testing.assert_close(logp.grad, -rho)


def test_extreme_inputs_stay_finite():
    logp = torch.tensor([[-1e4, 0.0, -5.0], [0.0, -1e4, -1.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -1e4, -5.0], [-1e4, 0.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    for est in ("k1", "k2", "k3"):
        assert torch.isfinite(shaped_kl(logp, ref, None, est)).all()
    assert torch.isfinite(forward_kl(logp, ref)).all()
    out = sage_loss(logp, None, ref, torch.tensor([1.0, -1.0]), mask, beta=0.05, log_q=torch.zeros(2, 3))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    # an old policy 1e4 nats away: the ratio is clamped, not inf
    s = clipped_surrogate(logp, logp.detach() - 1e4, torch.tensor([1.0, 1.0]))
    assert torch.isfinite(s.loss).all()


def test_empty_and_fully_masked_rows():
    per_token = torch.tensor([[1.0, 2.0, float("nan")], [float("inf"), 5.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        value = aggregate_loss(per_token, mask, mode)
        assert torch.isfinite(value)
        value.backward()
        assert torch.isfinite(per_token.grad).all()
        per_token.grad = None
    empty = aggregate_loss(torch.zeros(2, 0, requires_grad=True), torch.zeros(2, 0), "seq-mean-token-mean")
    assert empty.item() == 0.0
    nothing = sage_loss(
        torch.zeros(2, 3, requires_grad=True),
        None,
        torch.zeros(2, 3),
        torch.ones(2),
        torch.zeros(2, 3),
        beta=0.1,
    )
    assert nothing.loss.item() == 0.0
    nothing.loss.backward()


def test_aggregation_modes_hand_computed():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    # valid tokens: row0 1,2,3 (sum 6, n 3); row1 10,20 (sum 30, n 2); row2 none
    assert aggregate_loss(x, mask, "token-mean").item() == pytest.approx(36 / 5)
    assert aggregate_loss(x, mask, "token-mean", num_tokens=12).item() == pytest.approx(3.0)
    assert aggregate_loss(x, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 15) / 2)
    assert aggregate_loss(x, mask, "seq-mean-token-sum").item() == pytest.approx(36 / 2)
    assert aggregate_loss(x, mask, "seq-mean-token-sum-norm").item() == pytest.approx(36 / (2 * 4))
    assert aggregate_loss(x, mask, "seq-mean-token-sum-norm", max_len=9).item() == pytest.approx(36 / 18)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate_loss(x, mask, "sum")


def test_clipped_surrogate_hand_computed():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]]))
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, -2.0, 2.0]])
    out = clipped_surrogate(logp, old, adv, epsilon_low=0.2, epsilon_high=0.28)
    # ρ = 1.5 (A>0: clipped to 1.28), 0.5 (A<0: clip 0.8 gives -0.8 > -0.5? min(-0.5, -0.8) = -0.8)
    torch.testing.assert_close(out.loss, torch.tensor([[-1.28, 0.8, 2.2, -1.4]]))
    assert out.clipped_high.tolist() == [[True, False, False, False]]
    assert out.clipped_low.tolist() == [[False, True, False, False]]


def test_kl_to_go_and_reward_placement():
    log_ratio = torch.tensor([[0.1, 0.2, 0.3, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    torch.testing.assert_close(kl_to_go(log_ratio, mask), torch.tensor([[0.6, 0.5, 0.3, 0.0]]))
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    ref = logp - log_ratio
    out = sage_loss(logp, None, ref, torch.tensor([1.0]), mask, beta=0.5, kl_placement="reward")
    torch.testing.assert_close(out.advantages, torch.tensor([[0.7, 0.75, 0.85, 1.0]]))


def test_sage_loss_matches_manual_composition():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=g) * 3
    logp.requires_grad_(True)
    old = logp.detach() + 0.1 * torch.randn(4, 6, generator=g)
    ref = -torch.rand(4, 6, generator=g) * 3
    log_q = torch.log(0.6 + 0.8 * torch.rand(4, 6, generator=g))
    adv = torch.randn(4, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.2).int()
    out = sage_loss(
        logp,
        old,
        ref,
        adv,
        mask,
        log_q=log_q,
        beta=0.05,
        epsilon_low=0.2,
        epsilon_high=0.28,
        loss_agg_mode="token-mean",
    )
    ratio = torch.exp(logp - old)
    surrogate = -torch.min(ratio * adv[:, None], ratio.clamp(0.8, 1.28) * adv[:, None])
    d = ref + log_q - logp
    manual = surrogate + 0.05 * (torch.exp(d) - d - 1)
    expected = (manual * mask).sum() / mask.sum()
    torch.testing.assert_close(out.loss, expected)


def test_dapo_helpers():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, float("nan"), float("nan")])
    assert dynamic_sampling_mask(rewards, 2).tolist() == [False, False, True, True, True, True, False, False]
    lengths = torch.tensor([0, 100, 101, 150, 200, 260])
    pen = overlong_penalty(lengths, max_length=200, buffer_length=100, penalty_factor=1.0)
    torch.testing.assert_close(pen, torch.tensor([0.0, 0.0, -0.01, -0.5, -1.0, -1.0]))
    with pytest.raises(ValueError):
        overlong_penalty(lengths, max_length=100, buffer_length=0)


def test_registry():
    assert get("guide", "branch").__name__ == "branch_guide"
    assert get("divergence", "forward") is forward_kl
    torch.testing.assert_close(
        compute_advantages("dr_grpo", torch.tensor([1.0, 0.0]), 2), torch.tensor([0.5, -0.5])
    )
    with pytest.raises(KeyError, match="unknown guide 'x'"):
        get("guide", "x")
    with pytest.raises(ValueError, match="unknown advantage"):
        compute_advantages("ppo", torch.tensor([1.0]), 1)
