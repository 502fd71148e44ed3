"""Clip-Cov, KL-Cov and the entropy advantage on hand-built batches (equality with verl's own functions is
tests/integrations/verl/test_verl_covariance.py, in .venv-verl)."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective import (
    clip_cov_surrogate,
    clipped_surrogate,
    entropy_advantage,
    kl_cov_surrogate,
    policy_loss,
    sage_loss,
    token_covariance,
)


def test_token_covariance_hand_computed():
    adv = torch.tensor([1.0, -1.0])
    logp = torch.tensor([[-1.0, -3.0], [-2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # token means over the 3 valid tokens: A (1 + 1 - 1)/3 = 1/3, log π (-1 - 3 - 2)/3 = -2
    expected = torch.tensor([[(2 / 3) * 1.0, (2 / 3) * -1.0], [(-4 / 3) * 0.0, 0.0]])
    torch.testing.assert_close(token_covariance(adv, logp, mask), expected)


def _batch():
    gen = torch.Generator().manual_seed(0)
    logp = (torch.randn(4, 6, generator=gen) - 1).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(4, 6, generator=gen)
    adv = torch.randn(4, generator=gen) * 3
    mask = torch.ones(4, 6)
    mask[2, 4:] = 0
    return logp, old, adv, mask


def test_clip_cov_detaches_a_share_of_the_band_and_is_ppo_elsewhere():
    logp, old, adv, mask = _batch()
    cov = token_covariance(adv, logp, mask)
    lb, ub = 0.2, 2.0
    out = clip_cov_surrogate(
        logp,
        old,
        adv,
        mask,
        clip_cov_ratio=0.1,
        clip_cov_lb=lb,
        clip_cov_ub=ub,
        generator=torch.Generator().manual_seed(1),
    )
    base = clipped_surrogate(logp, old, adv)
    chosen = out.covariance_masked
    assert chosen.sum() == max(int(0.1 * mask.sum()), 1) == 2
    assert ((cov[chosen] > lb) & (cov[chosen] < ub)).all()
    assert torch.equal(out.loss[chosen], torch.zeros(2))
    torch.testing.assert_close(out.loss[~chosen], base.loss[~chosen])
    (grad,) = torch.autograd.grad(out.loss.sum(), logp)
    assert torch.equal(grad[chosen], torch.zeros(2))
    none_in_band = clip_cov_surrogate(logp, old, adv, mask, clip_cov_lb=100.0, clip_cov_ub=200.0)
    torch.testing.assert_close(none_in_band.loss, base.loss)


def test_kl_cov_penalises_the_top_covariance_tokens_and_vanishes_on_policy():
    logp, old, adv, mask = _batch()
    out = kl_cov_surrogate(logp, old, adv, mask, kl_cov_ratio=0.1, kl_cov_coef=2.0)
    cov = token_covariance(adv, logp, mask).masked_fill(mask == 0, -float("inf"))
    top = torch.topk(cov.reshape(-1), 2).indices
    assert set(torch.nonzero(out.covariance_masked.reshape(-1)).reshape(-1).tolist()) == set(top.tolist())
    ratio = torch.exp(logp - old)
    expected = -adv[:, None] * ratio + 2.0 * (logp - old).abs() * out.covariance_masked
    torch.testing.assert_close(out.loss, expected)
    # strictly on-policy: the penalty and its gradient are 0, so KL-Cov is the plain policy gradient
    on = kl_cov_surrogate(logp, logp.detach(), adv, mask, kl_cov_ratio=0.1, kl_cov_coef=2.0)
    (grad,) = torch.autograd.grad(on.loss.sum(), logp)
    torch.testing.assert_close(grad, -adv[:, None].expand(4, 6))


def test_covariance_bad_input():
    logp, old, adv, mask = _batch()
    for ratio in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match=r"clip_cov_ratio=.* must be a number in \(0, 1\)"):
            clip_cov_surrogate(logp, old, adv, mask, clip_cov_ratio=ratio)
        with pytest.raises(ValueError, match=r"kl_cov_ratio=.* must be a number in \(0, 1\)"):
            kl_cov_surrogate(logp, old, adv, mask, kl_cov_ratio=ratio)
    with pytest.raises(ValueError, match="clip_cov_lb < clip_cov_ub"):
        clip_cov_surrogate(logp, old, adv, mask, clip_cov_lb=5.0, clip_cov_ub=1.0)
    with pytest.raises(ValueError, match="unknown policy_loss"):
        policy_loss("ppo2", logp, old, adv, mask)


def test_entropy_advantage_hand_computed():
    adv = torch.tensor([1.0, -2.0, 0.0])
    entropy = torch.tensor([[0.5, 3.0], [1.0, 10.0], [2.0, 2.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    out = entropy_advantage(adv, entropy, mask, alpha=0.4, kappa=2.0)
    # min(0.4·H, |A|/2): row 0: 0.2, 0.5 (capped); row 1: 0.4, padding: no bonus; row 2: A = 0, none
    torch.testing.assert_close(out, torch.tensor([[1.2, 1.5], [-1.6, -2.0], [0.0, 0.0]]))
    for alpha, kappa in ((0.0, 2.0), (0.4, 1.0), (0.4, 0.5)):
        with pytest.raises(
            ValueError,
            match=r"alpha=.* must be a number in \(0, inf\)|kappa=.* must be a number in \(1, inf\)",
        ):
            entropy_advantage(adv, entropy, mask, alpha=alpha, kappa=kappa)


def test_sage_loss_routes_the_policy_term_and_the_entropy_advantage():
    logp, old, adv, mask = _batch()
    ref = logp.detach() - 0.1
    entropy = torch.rand(4, 6, generator=torch.Generator().manual_seed(2)) * 3
    plain = sage_loss(logp, old, ref, adv, mask, beta=0.05)
    same = sage_loss(logp, old, ref, adv, mask, beta=0.05, policy_loss="clip")
    torch.testing.assert_close(plain.loss, same.loss)
    shaped = sage_loss(logp, old, ref, adv, mask, beta=0.05, entropy=entropy, entropy_adv_alpha=0.4)
    expected_adv = entropy_advantage(adv, entropy, mask.bool())
    torch.testing.assert_close(shaped.advantages, expected_adv)
    kl = sage_loss(
        logp,
        old,
        ref,
        adv,
        mask,
        beta=0.05,
        policy_loss="kl_cov",
        policy_loss_params={"kl_cov_ratio": 0.1, "kl_cov_coef": 1.0},
    )
    direct = kl_cov_surrogate(logp, old, adv, mask, kl_cov_ratio=0.1, kl_cov_coef=1.0)
    torch.testing.assert_close(kl.surrogate.loss, direct.loss)
    torch.testing.assert_close(kl.per_token_loss, direct.loss + 0.05 * kl.kl)
    with pytest.raises(ValueError, match="needs entropy"):
        sage_loss(logp, old, ref, adv, mask, entropy_adv_alpha=0.4)


def _large_batch(seed: int = 0, rows: int = 40, width: int = 150):
    """A random batch of mixed lengths (3,537 valid tokens for the defaults), log-ratios spread as after a few
    optimizer steps (σ = 0.4), per-sequence advantages."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(rows, width, generator=gen) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(rows, width, generator=gen)
    adv = torch.randn(rows, generator=gen)
    lengths = torch.randint(20, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return logp, old, adv, mask


def test_clip_cov_at_the_authors_epsilon_leaves_ppo_clip_to_extreme_ratios():
    # the authors' Clip-Cov recipe sets clip_ratio_low = clip_ratio_high = 1 (the clip-cov preset's epsilon: 1.0);
    # at GRPO's ε = 0.2, PPO's clip acts on 31% of this batch's tokens, at ε = 1 on 2% (the batch: 1,190 and
    # 27 of 4,619)
    logp, old, adv, mask = _large_batch()
    valid = mask.bool()
    assert int(valid.sum()) == 3537

    def clipped(epsilon):
        out = clip_cov_surrogate(logp, old, adv, mask, epsilon_low=epsilon, epsilon_high=epsilon)
        return int(((out.clipped_low | out.clipped_high) & valid).sum()), int(out.covariance_masked.sum())

    assert clipped(0.2) == (1085, 1)  # and max(int(2e-4 · 3,537), 1) = 1 token detached by the covariance
    assert clipped(1.0) == (77, 1)


@pytest.mark.parametrize(
    ("tokens", "kl_cov", "clip_cov"), [(1000, 2, 1), (4619, 9, 1), (499, 1, 1), (10000, 20, 2)]
)
def test_covariance_methods_pick_the_authors_token_counts(tokens, kl_cov, clip_cov):
    # KL-Cov: max(1, int(N · k_percent / 100)) with the authors' k_percent = 0.2 (kl_cov_ratio 2e-3); Clip-Cov:
    # max(int(2e-4 · N), 1) (docs/methods.md: "a micro-batch of ~1,000 tokens": KL-Cov picks 2, Clip-Cov 1)
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(1, tokens, generator=gen) * 3
    old = logp + 0.05 * torch.randn(1, tokens, generator=gen)
    adv = torch.randn(1, tokens, generator=gen)
    mask = torch.ones(1, tokens)
    assert max(1, int(tokens * 0.2 / 100)) == kl_cov
    assert int(kl_cov_surrogate(logp, old, adv, mask).covariance_masked.sum()) == kl_cov
    out = clip_cov_surrogate(logp, old, adv, mask, clip_cov_lb=-1e9, clip_cov_ub=1e9)
    assert int(out.covariance_masked.sum()) == clip_cov
