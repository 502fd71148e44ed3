"""SimKO (arXiv 2510.14807): equal to the authors' compute_policy_loss_simko (written again in torch) in value and
gradient, the gradient SimKO's formula gives on a high-entropy token, and its bounds."""

from __future__ import annotations

import pytest
import torch

from sagerl.objective.simko import high_entropy_tokens, simko_surrogate

B, T, K, V = 4, 6, 3, 7


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64) * 1.5
    old_logits = logits + 0.1 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 5:] = False
    return logits.requires_grad_(True), old_logits, tokens, mask


def _per_token(logits, old_logits, tokens):
    logprobs = torch.log_softmax(logits, -1)
    old_logprobs = torch.log_softmax(old_logits, -1)
    top = old_logprobs.topk(K, dim=-1).indices  # the K tokens most likely under π_old
    logp = logprobs.gather(-1, tokens[..., None]).squeeze(-1)
    old_logp = old_logprobs.gather(-1, tokens[..., None]).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).detach()
    is_top1 = tokens == logprobs.argmax(-1)
    return logp, old_logp, logprobs.gather(-1, top), old_logprobs.gather(-1, top), entropy, is_top1


def _authors(old_logp, old_topk, logp, topk, entropy, advantages, mask, clip, scores, max_token, coef, tau):
    """CLR-Lab/SimKO compute_policy_loss_simko, written again: the top-K mix on correct rows, the 1.1 scale on the
    negative rows' top-1 high-entropy tokens, PPO's clip, the masked token mean."""
    correct = (scores.sum(-1) == 1).view(-1, 1).expand_as(logp)
    diff = logp - old_logp
    diff_k = topk - old_topk
    terms = (torch.exp(diff.detach())[..., None] / (torch.exp(diff_k.detach()) + 1e-8)) * torch.exp(diff_k)
    thresholds = torch.stack([torch.quantile(e[m], tau) for e, m in zip(entropy, mask, strict=True)]).view(
        -1, 1
    )
    w = (entropy > thresholds).float()
    mix = coef * w * mask
    ratio = torch.where(
        correct & mask, (1.0 - mix) * torch.exp(diff) + (mix / float(K)) * terms.sum(-1), torch.exp(diff)
    )
    neg = (advantages.sum(-1) < 0).unsqueeze(-1) & (max_token > 0) & (entropy > thresholds)
    advantages = advantages * torch.ones_like(advantages).masked_fill(neg, 1.1)
    losses = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip, 1 + clip))
    return (losses * mask).sum() / mask.sum()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simko_equals_the_authors_loss_and_gradient(seed):
    logits, old_logits, tokens, mask = _inputs(seed)
    logp, old_logp, topk, old_topk, entropy, is_top1 = _per_token(logits, old_logits, tokens)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    advantages = (rewards - rewards.mean())[:, None].expand(B, T) * mask  # verl's, masked
    scores = torch.zeros(B, T, dtype=torch.float64)
    scores[:, 0] = rewards
    expected = _authors(
        old_logp, old_topk, logp, topk, entropy, advantages, mask, 0.2, scores, is_top1.double(), 0.3, 0.6
    )
    (grad_expected,) = torch.autograd.grad(expected, logits, retain_graph=True)
    out = simko_surrogate(
        logp, old_logp, rewards - rewards.mean(), mask, topk_logp=topk, old_topk_logp=old_topk, entropy=entropy,
        is_top1=is_top1, correct=rewards == 1, simko_top_k=K, simko_mix=0.3, simko_tau=0.6,
    )  # fmt: skip
    loss = (out.loss * mask).sum() / mask.sum()
    (grad,) = torch.autograd.grad(loss, logits)
    torch.testing.assert_close(loss, expected, rtol=1e-7, atol=1e-9)  # the authors' 1e-8 in the denominator
    torch.testing.assert_close(grad, grad_expected, rtol=1e-6, atol=1e-9)
    assert out.covariance_masked.any() and grad.abs().max() > 1e-3


def test_the_gradient_on_a_correct_high_entropy_token_goes_to_its_top_k():
    """On policy (π = π_old): ∂loss/∂logits = −A·((1 − α)·∇log π(y) + (α/K)·Σ_k ∇log π(v_k)) on the tokens it acts on,
    −A·∇log π(y) elsewhere; the loss value is PPO's."""
    logits, _, tokens, mask = _inputs(3)
    logp, old_logp, topk, old_topk, entropy, is_top1 = _per_token(logits, logits.detach(), tokens)
    correct = torch.tensor([True, False, True, True])
    alpha, tau = 0.25, 0.5
    out = simko_surrogate(
        logp, old_logp, torch.ones(B), mask, topk_logp=topk, old_topk_logp=old_topk, entropy=entropy,
        is_top1=is_top1, correct=correct, simko_top_k=K, simko_mix=alpha, simko_tau=tau,
    )  # fmt: skip
    torch.testing.assert_close(out.loss.detach(), -torch.ones(B, T, dtype=torch.float64))
    w = high_entropy_tokens(entropy, mask, tau)
    share = torch.where(correct[:, None] & w, alpha, 0.0).double()
    surrogate = -((1 - share) * logp + (share / K) * topk.sum(-1)) * mask
    expected = torch.autograd.grad(surrogate.sum(), logits, retain_graph=True)[0]
    got = torch.autograd.grad((out.loss * mask).sum(), logits)[0]
    torch.testing.assert_close(got, expected)
    assert (w.sum(1) > 0).all() and (w.sum(1) < mask.sum(1)).all()  # some tokens above the quantile, not all


def test_the_top1_tokens_of_a_negative_completion_get_lambda_and_tau_1_is_ppo():
    logits, _, tokens, mask = _inputs(4)
    logp, old_logp, topk, old_topk, entropy, _ = _per_token(logits, logits.detach(), tokens)
    is_top1 = torch.ones(B, T, dtype=torch.bool)
    adv = torch.tensor([-1.0, 1.0, -0.5, 1.0], dtype=torch.float64)
    kwargs = dict(topk_logp=topk, old_topk_logp=old_topk, entropy=entropy, is_top1=is_top1, simko_top_k=K)
    out = simko_surrogate(
        logp, old_logp, adv, mask, correct=adv > 0, simko_neg_scale=2.0, simko_tau=0.5, **kwargs
    )
    w = high_entropy_tokens(entropy, mask, 0.5)
    scale = torch.where(w & (adv[:, None] < 0), 2.0, 1.0)
    torch.testing.assert_close(out.loss.detach(), -(adv[:, None] * scale).expand(B, T))
    ppo = simko_surrogate(logp, old_logp, adv, mask, correct=adv > 0, simko_tau=1.0, **kwargs)
    assert not ppo.covariance_masked.any()
    torch.testing.assert_close(ppo.loss.detach(), -adv[:, None].expand(B, T))


def test_bad_settings_and_shapes_are_refused():
    logits, _, tokens, mask = _inputs(5)
    logp, old_logp, topk, old_topk, entropy, is_top1 = _per_token(logits, logits.detach(), tokens)
    kwargs = dict(
        topk_logp=topk, old_topk_logp=old_topk, entropy=entropy, is_top1=is_top1, correct=torch.ones(B)
    )
    for name, bad, allowed in (
        ("simko_mix", 1.5, r"\[0, 1\]"),
        ("simko_tau", -0.1, r"\[0, 1\]"),
        ("simko_neg_scale", 0.0, r"\(0, inf\)"),
        ("simko_top_k", 0, r"\[1, inf\)"),
    ):
        with pytest.raises(ValueError, match=rf"^{name}={bad!r} must be .*{allowed}$"):
            simko_surrogate(logp, old_logp, torch.ones(B), mask, **{**kwargs, name: bad})
    with pytest.raises(ValueError, match=r"topk_logp and old_topk_logp must be \(B, T, K\) = \(4, 6, 2\)"):
        simko_surrogate(logp, old_logp, torch.ones(B), mask, simko_top_k=2, **kwargs)
