"""The surrogates of POLICY_LOSSES (GSPO, CISPO, SAPO, VESPO) and GDPO's advantages, on fixed tensors.

Each surrogate is checked against its paper's formula computed by hand (values and gradients), and
sage_loss is checked to add the same (shaped) KL anchor on top of every surrogate.
"""

from __future__ import annotations

import math

import pytest
import torch

from sagerl.objective import sage_loss, shaped_kl
from sagerl.objective.multi_reward import normalize_then_sum_advantages
from sagerl.objective.policy_loss import (
    POLICY_LOSSES,
    cispo_surrogate,
    gspo_surrogate,
    sapo_surrogate,
    sequence_log_ratio,
    vespo_surrogate,
    vespo_weights,
)

LOGP = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.2, -1.5, -2.5, -0.7]], dtype=torch.float64)
OLD = torch.tensor([[-1.3, -1.6, -0.5, -2.0], [-0.9, -1.5, -2.0, -0.1]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float64)
ADV = torch.tensor([1.5, -0.8], dtype=torch.float64)


def leaf():
    return LOGP.clone().requires_grad_(True)


def test_registry_names():
    names = {"clip", "gspo", "cispo", "sapo", "vespo", "clip_cov", "kl_cov", "simko", "flowrl", "apo"}
    assert set(POLICY_LOSSES) == names


def test_sequence_log_ratio_is_the_masked_mean():
    s = sequence_log_ratio(LOGP, OLD, MASK)
    assert s[0, 0].item() == pytest.approx((0.3 - 0.4 + 0.0) / 3)
    assert s[1, 0].item() == pytest.approx((0.7 + 0.0 - 0.5 - 0.6) / 4)


def test_gspo_clips_the_sequence_ratio_and_spreads_its_gradient():
    logp = leaf()
    out = gspo_surrogate(logp, OLD, ADV, MASK, epsilon_low=0.05, epsilon_high=0.05)
    s = torch.exp(sequence_log_ratio(LOGP, OLD, MASK)).squeeze(1)
    # row 0: s = exp(-0.0333) = 0.967, A > 0: unclipped (below 1 + ε) -> -s·A, gradient -s·A/|y| per token
    assert out.loss[0, 0].item() == pytest.approx(-s[0].item() * 1.5)
    # row 1: s = exp(-0.1) = 0.905 < 1 - ε, A < 0: clipped -> constant loss -(1 - ε)·A, no gradient
    assert out.loss[1, 2].item() == pytest.approx(0.95 * 0.8)
    assert out.clipped_low[1].all() and not out.clipped_low[0].any()
    (out.loss * MASK).sum().backward()
    expected = torch.zeros_like(LOGP)
    expected[0, :3] = -s[0] * 1.5 * 3 / 3  # three tokens' losses, each with gradient s·A/3 on every token
    torch.testing.assert_close(logp.grad, expected)


def test_cispo_weight_is_clipped_and_detached():
    logp = leaf()
    out = cispo_surrogate(logp, OLD, ADV, MASK, epsilon_low=0.2, epsilon_high=0.2, ratio_max=1.2)
    ratio = torch.exp(LOGP - OLD)
    weight = ratio.clamp(max=1.2)
    torch.testing.assert_close(out.loss, -weight * ADV.unsqueeze(1) * LOGP)
    out.loss.sum().backward()
    torch.testing.assert_close(logp.grad, -weight * ADV.unsqueeze(1))  # every token keeps a gradient
    assert out.clipped_high.tolist() == [[True, False, False, False], [False, False, False, False]]
    # MiniMax-M1's two-sided form: clip(ρ, 1 − ε_low, 1 + ε_high)
    two_sided = cispo_surrogate(LOGP, OLD, ADV, MASK, epsilon_low=0.2, epsilon_high=0.28)
    torch.testing.assert_close(two_sided.loss, -ratio.clamp(0.8, 1.28) * ADV.unsqueeze(1) * LOGP)


def test_sapo_gate_value_and_gradient():
    logp = leaf()
    out = sapo_surrogate(logp, OLD, ADV, MASK, temperature_pos=1.0, temperature_neg=2.0)
    ratio = torch.exp(LOGP - OLD)
    tau = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    sig = torch.sigmoid(tau * (ratio - 1))
    torch.testing.assert_close(out.loss, -sig * 4 / tau * ADV.unsqueeze(1))
    out.loss.sum().backward()
    # d/dlogp [σ(τ(ρ−1))·4/τ] = 4σ(1−σ)·ρ: weight 1 at ρ = 1 (token 0,2 and 1,1 are on-policy)
    torch.testing.assert_close(logp.grad, -4 * sig * (1 - sig) * ratio * ADV.unsqueeze(1))
    assert logp.grad[0, 2].item() == pytest.approx(-1.5)


def test_vespo_gamma_weight():
    log_ratio = LOGP - OLD
    phi = vespo_weights(ADV, log_ratio, MASK)
    w0 = math.exp(0.3 - 0.4 + 0.0)  # product of the ratios over the 3 valid tokens
    w1 = math.exp(0.7 + 0.0 - 0.5 - 0.6)
    assert phi[0, 0].item() == pytest.approx(math.exp(3.0) * w0**2 * math.exp(-3.0 * w0))  # A >= 0: k=2, λ=3
    assert phi[1, 0].item() == pytest.approx(math.exp(2.0) * w1**3 * math.exp(-2.0 * w1))  # A < 0: k=3, λ=2
    assert vespo_weights(ADV, torch.zeros_like(LOGP), MASK).flatten().tolist() == pytest.approx([1.0, 1.0])
    logp = leaf()
    out = vespo_surrogate(logp, OLD, ADV, MASK)
    out.loss.sum().backward()
    torch.testing.assert_close(logp.grad, (-phi * ADV.unsqueeze(1)).expand_as(LOGP))


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("placement", ["loss", "reward"])
def test_the_anchor_is_the_same_on_top_of_every_surrogate(name, placement):
    """The guide and the KL shape the anchor; the surrogate choice does not touch them."""
    ref = LOGP - torch.tensor([[0.1, -0.2, 0.3, 0.0], [0.05, 0.4, -0.3, 0.2]], dtype=torch.float64)
    q = torch.tensor([[1.2, 0.8, 1.0, 1.0], [0.7, 1.3, 1.1, 0.9]], dtype=torch.float64)
    inputs = {}
    # SimKO's per-token inputs (issue 38): top-2 log-probs, entropies, top-1 flags, correctness
    if name == "simko":
        topk = torch.stack([LOGP, LOGP - 1.0], dim=-1)
        inputs = dict(
            topk_logp=topk, old_topk_logp=topk + 0.05, entropy=-LOGP, is_top1=LOGP > -1.0,
            correct=ADV > 0, simko_top_k=2, simko_tau=0.5, simko_mix=0.3,
        )  # fmt: skip
    if name == "apo":  # APO's (issue 38): the log-probs of the reference's top-2 tokens under π_θ and π_old
        manifold = torch.stack([LOGP - 0.3, LOGP - 1.2], dim=-1)
        inputs = dict(manifold_logp=manifold, old_manifold_logp=manifold + 0.1, apo_top_k=2, apo_lambda=1.5)
    if name == "flowrl" and placement == "reward":
        pytest.skip("FlowRL takes one advantage per completion: the KL-to-go's per-token ones are refused")
    if name == "flowrl":  # FlowRL's: log Z(x) and the reference log-probs (issue 38)
        inputs = dict(log_z=torch.tensor([0.3, -0.2], dtype=torch.float64), ref_logp=LOGP - 0.2)
    common = dict(
        beta=0.1, epsilon_low=0.2, epsilon_high=0.28, kl_placement=placement, policy_loss=name,
        policy_loss_params=inputs,
    )  # fmt: skip
    guided = sage_loss(LOGP, OLD, ref, ADV, MASK, log_q=q.log(), **common)
    plain = sage_loss(LOGP, OLD, ref, ADV, MASK, **common)
    if placement == "loss":
        surrogate = POLICY_LOSSES[name](
            LOGP, OLD, ADV, MASK, epsilon_low=0.2, epsilon_high=0.28, delta=None, **inputs
        )
        torch.testing.assert_close(
            guided.per_token_loss, surrogate.loss + 0.1 * shaped_kl(LOGP, ref, q.log(), "k3")
        )
        torch.testing.assert_close(
            plain.per_token_loss, surrogate.loss + 0.1 * shaped_kl(LOGP, ref, None, "k3")
        )
    else:  # the KL-to-go enters the advantages, the same for every surrogate
        assert guided.advantages.shape == LOGP.shape
        reference = sage_loss(LOGP, OLD, ref, ADV, MASK, log_q=q.log(), beta=0.1, kl_placement="reward")
        torch.testing.assert_close(guided.advantages, reference.advantages)
    assert abs(guided.loss.item() - plain.loss.item()) > 1e-4


def test_clip_entry_is_the_default_surrogate():
    a = sage_loss(LOGP, OLD, None, ADV, MASK, epsilon_low=0.2)
    b = sage_loss(LOGP, OLD, None, ADV, MASK, epsilon_low=0.2, policy_loss="clip", policy_loss_params={})
    c = sage_loss(LOGP, OLD, None, ADV, MASK, policy_loss="gspo", policy_loss_params={})
    torch.testing.assert_close(a.loss, b.loss)
    assert a.loss.item() != pytest.approx(c.loss.item())
    with pytest.raises(ValueError, match="unknown policy_loss 'ppo'"):
        sage_loss(LOGP, OLD, None, ADV, MASK, policy_loss="ppo")


def test_normalize_then_sum_by_hand():
    # two groups of 3, two reward functions; the second function misses one completion (NaN)
    r = torch.tensor(
        [[1.0, 0.0], [0.0, 2.0], [1.0, 4.0], [0.0, 1.0], [0.0, float("nan")], [3.0, 1.0]], dtype=torch.float64
    )
    w = torch.tensor([1.0, 0.5], dtype=torch.float64)
    eps = 1e-4

    def z(values):  # group standardisation with the sample std, NaN left out
        v = torch.tensor([x for x in values if not math.isnan(x)], dtype=torch.float64)
        return [(x - v.mean().item()) / (v.std().item() + eps) if not math.isnan(x) else 0.0 for x in values]

    summed = []
    for g in range(2):
        rows = r[3 * g : 3 * g + 3]
        z0, z1 = z(rows[:, 0].tolist()), z(rows[:, 1].tolist())
        summed += [z0[i] * 1.0 + z1[i] * 0.5 for i in range(3)]
    s = torch.tensor(summed, dtype=torch.float64)
    expected = (s - s.mean()) / (s.std() + eps)
    torch.testing.assert_close(normalize_then_sum_advantages(r, w, 3), expected)
    nothing = r.clone()
    nothing[1] = float("nan")
    assert normalize_then_sum_advantages(nothing, w, 3)[1].item() == 0.0
    with pytest.raises(ValueError, match="groups of 4"):
        normalize_then_sum_advantages(r, w, 4)
