"""SimKO: Simple Pass@K Optimization (Peng, Ren, Yu, Liu, Wen 2025, arXiv 2510.14807; the authors' code:
CLR-Lab/SimKO, ``verl/trainer/ppo/core_algos.py`` ``compute_policy_loss_simko`` and the actor that feeds it).

SimKO changes PPO's clipped surrogate on the high-entropy tokens of a completion, asymmetrically:

- a **correct** completion (reward 1) also raises its top-K candidates there: the token's ratio ρ_t = π/π_old of
  the sampled token becomes

      ρ̃_t = (1 − α·w_t)·ρ_t + (α·w_t/K)·Σ_{k=1..K} sg(ρ_t/ρ_{t,k})·ρ_{t,k},

  ρ_{t,k} the ratio of the k-th most likely token at t. Its value is ρ_t (so the loss and the clip are PPO's); its
  gradient is ρ_t·((1 − α·w_t)·∇log π(y_t) + (α·w_t/K)·Σ_k ∇log π(v_{t,k})): a share α of the update on such a
  token goes to its top-K candidates instead of the sampled one;
- a **wrong** completion (negative advantage) is penalised harder where it took the top-1 candidate: the advantage
  is multiplied by λ (the authors' 1.1) on the high-entropy tokens whose sampled token is the most likely one.

w_t = 1 on the tokens whose entropy exceeds the τ-quantile of the completion's own token entropies (the authors'
``row_quantile_masked``, torch's linear-interpolation quantile; τ = 0.8 in their scripts), 0 elsewhere. The rest is
PPO: −min(ρ̃A′, clip(ρ̃, 1 − ε_low, 1 + ε_high)A′).

Per-token inputs beyond PPO's (B, T): the log-probs of the K most likely tokens at each position under the policy
(with gradient) and π_old ((B, T, K)), the token entropies (nats), whether the sampled token is the most likely
one, and each completion's correctness (B,).
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import (
    COUNT,
    POSITIVE,
    UNIT,
    Setting,
    as_bool_mask,
    check_number,
    check_same_shape,
)
from sagerl.objective.surrogate import SurrogateOutput, _advantages_2d, _check_epsilons, _clip_ratio

SETTINGS = (
    Setting(
        "simko_top_k",
        "simko_top_k",
        3,
        "SimKO: how many of the most likely tokens a correct completion raises on its high-entropy tokens "
        "(the authors' scripts: 3).",
        COUNT,
        "int",
    ),
    Setting(
        "simko_mix",
        "simko_mix",
        0.01,
        "SimKO: the share α in [0, 1] of a correct completion's update on a high-entropy token that goes to its "
        "top-K candidates (the authors' mix_topk_coef, 0.01).",
        UNIT,
    ),
    Setting(
        "simko_tau",
        "simko_tau",
        0.8,
        "SimKO: the tokens above this quantile τ in [0, 1] of their completion's entropies are the ones it acts on "
        "(the authors' scripts: 0.8; τ = 1 leaves none, PPO).",
        UNIT,
    ),
    Setting(
        "simko_neg_scale",
        "simko_neg_scale",
        1.1,
        "SimKO: the factor λ > 0 of a negative advantage on the high-entropy tokens where the completion took the "
        "top-1 candidate (the authors' 1.1, fixed in their code).",
        POSITIVE,
    ),
)
"""SimKO's settings (keywords of :func:`simko_surrogate`; the engines' config fields of the same names)."""
INPUTS = ("topk_logp", "old_topk_logp", "entropy", "is_top1", "correct")
"""The per-token inputs an engine computes for :func:`simko_surrogate`, beyond PPO's."""


def high_entropy_tokens(entropy: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """(B, T) bool: the valid tokens whose entropy exceeds the τ-quantile of their row's valid entropies (linear
    interpolation, ``torch.quantile``; a row without valid tokens takes its whole row, as the authors' code).

    Raises:
        ValueError: τ outside [0, 1], or shapes that differ.
    """
    check_number("simko_tau", tau, UNIT)
    valid = as_bool_mask(mask, entropy)
    h = entropy.detach().double()
    thresholds = torch.stack(
        [torch.quantile(row[keep] if keep.any() else row, tau) for row, keep in zip(h, valid, strict=True)]
    )
    return (h > thresholds[:, None]) & valid


def simko_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    topk_logp: torch.Tensor,
    old_topk_logp: torch.Tensor,
    entropy: torch.Tensor,
    is_top1: torch.Tensor,
    correct: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    simko_top_k: int = 3,
    simko_mix: float = 0.01,
    simko_tau: float = 0.8,
    simko_neg_scale: float = 1.1,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """SimKO's per-token loss (module docstring), PPO's clip with ε_low, ε_high and the optional ``delta``.

    Args:
        logp: (B, T) log π_θ of the sampled tokens, nats, with gradient. old_logp: (B, T) log π_old (detached).
        advantages: (B,), (B, 1) or (B, T). mask: (B, T) valid tokens.
        topk_logp: (B, T, K) log π_θ of the K tokens most likely under π_old at each position, with gradient.
        old_topk_logp: (B, T, K) their log π_old. entropy: (B, T) π_θ's token entropies, nats (detached here).
        is_top1: (B, T) bool, whether the sampled token is the most likely one. correct: (B,) bool, whether the
            completion is correct (the authors: its reward is 1).
        simko_top_k: K, an integer ≥ 1 (must be ``topk_logp.shape[-1]``). simko_mix: α in [0, 1].
        simko_tau: τ in [0, 1]. simko_neg_scale: λ > 0. log_ratio_clip: clamp of every log-ratio.

    Returns:
        :class:`~sagerl.objective.surrogate.SurrogateOutput`: ``loss`` (B, T) with gradient, the ratio ρ̃ (whose
        value is ρ), the clip masks, and ``covariance_masked``: the high-entropy tokens SimKO acted on.

    Raises:
        ValueError: shapes that differ (or a last dimension other than K), K, α, τ, λ or the PPO bounds out of range.
    """
    check_same_shape(logp=logp, old_logp=old_logp, entropy=entropy, is_top1=is_top1)
    _check_epsilons(epsilon_low, epsilon_high, delta, log_ratio_clip)
    check_number("simko_top_k", simko_top_k, COUNT)
    check_number("simko_mix", simko_mix, UNIT)
    check_number("simko_neg_scale", simko_neg_scale, POSITIVE)
    if topk_logp.shape != (*logp.shape, simko_top_k) or old_topk_logp.shape != topk_logp.shape:
        raise ValueError(
            f"topk_logp and old_topk_logp must be (B, T, K) = {(*logp.shape, simko_top_k)}, got "
            f"{tuple(topk_logp.shape)} and {tuple(old_topk_logp.shape)}"
        )
    if correct.shape != logp.shape[:1]:
        raise ValueError(f"correct must be (B,) = {tuple(logp.shape[:1])}, got {tuple(correct.shape)}")
    valid = as_bool_mask(mask, logp)
    w = high_entropy_tokens(entropy, valid, simko_tau)
    adv = _advantages_2d(advantages, logp).expand_as(logp)

    ratio = torch.exp((logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip))
    topk_ratio = torch.exp((topk_logp - old_topk_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip))
    # Σ_k sg(ρ/ρ_k)·ρ_k: value K·ρ, gradient ρ·Σ_k ∇log π(v_k)
    spread = ((ratio.detach()[..., None] / topk_ratio.detach()) * topk_ratio).sum(dim=-1)
    alpha = simko_mix * w.to(ratio.dtype)
    mixed = (1 - alpha) * ratio + (alpha / simko_top_k) * spread
    raised = correct.bool()[:, None] & valid
    ratio_tilde = torch.where(raised, mixed, ratio)

    negative = (adv.sum(dim=1, keepdim=True) < 0) & is_top1.bool() & w
    adv = torch.where(negative, adv * simko_neg_scale, adv)
    out = _clip_ratio(ratio_tilde, adv, epsilon_low, epsilon_high, delta)
    out.covariance_masked = w & (raised | negative)
    return out
