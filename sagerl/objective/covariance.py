"""Clip-Cov and KL-Cov: policy losses that restrain the few tokens whose covariance drives entropy down.

Source: Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
arXiv 2505.22617. Under a softmax policy the change of entropy at a state follows −Cov(log π(y), A(y)):
tokens that are both likely and high-advantage collapse the entropy. Per token, with the means taken over
the valid tokens of the (micro-)batch,

    Cov_t = (A_t − mean A) · (log π_t − mean log π)

- **Clip-Cov** (``clip_cov``): PPO's clipped surrogate, except that a random share ``clip_cov_ratio`` of the
  valid tokens (at least one) among those with clip_cov_lb < Cov_t < clip_cov_ub, and not already clipped
  by PPO, contribute nothing (their loss and gradient are 0).
- **KL-Cov** (``kl_cov``): the *unclipped* policy gradient −A·ρ, plus kl_cov_coef·|log π − log π_old| on
  the top ``kl_cov_ratio`` share of valid tokens by Cov_t (at least one).

Semantics are those of verl 0.9.1's ``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``
(equal on random batches: tests/integrations/verl/test_verl_covariance.py): the means are token means over
the micro-batch, the random choice draws ``torch.randperm`` from ``generator`` (torch's global generator
when None, as verl), the ratio is not clamped beyond sagerl's ±20-nat log-ratio clamp, and there is no dual
clip. Defaults: verl's are ``clip_cov_ratio = 2e-4``, ``clip_cov_lb = 1``, ``clip_cov_ub = 5``,
``kl_cov_ratio = 2e-4``, ``ppo_kl_coef = 0.1``; the authors' (their recipes for Qwen2.5-7B) keep Clip-Cov's
and use ``kl_cov_ratio = 2e-3`` and coefficient 1 for KL-Cov. sagerl's presets and these functions'
defaults are the authors'.

KL-Cov's penalty vanishes when training is strictly on-policy (one optimizer step per rollout batch):
then log π = log π_old in value, |·| is 0 and so is its gradient (torch's subgradient of |x| at 0), and
KL-Cov is the plain policy gradient. The TRL adapter refuses it there (:class:`sagerl.train.SAGEConfig`).
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import (
    FINITE,
    NONNEGATIVE,
    SHARE,
    Setting,
    as_bool_mask,
    check_number,
    check_same_shape,
    masked_zero,
    per_token,
)
from sagerl.objective.surrogate import SurrogateOutput, _check_epsilons, clipped_surrogate

CLIP_COV_DEFAULTS = {"clip_cov_ratio": 2e-4, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
KL_COV_DEFAULTS = {"kl_cov_ratio": 2e-3, "kl_cov_coef": 1.0}
CLIP_COV_SETTINGS = (
    Setting(
        "clip_cov_ratio",
        "clip_cov_ratio",
        CLIP_COV_DEFAULTS["clip_cov_ratio"],
        "Clip-Cov: share in (0, 1) of tokens detached (authors and verl: 2e-4).",
        SHARE,
    ),
    Setting(
        "clip_cov_lb",
        "clip_cov_lb",
        CLIP_COV_DEFAULTS["clip_cov_lb"],
        "Clip-Cov: lower covariance bound.",
        FINITE,
    ),
    Setting(
        "clip_cov_ub",
        "clip_cov_ub",
        CLIP_COV_DEFAULTS["clip_cov_ub"],
        "Clip-Cov: upper covariance bound.",
        FINITE,
    ),
)
"""Clip-Cov's settings (the ``clip_cov`` policy term's keywords)."""
KL_COV_SETTINGS = (
    Setting(
        "kl_cov_ratio",
        "kl_cov_ratio",
        KL_COV_DEFAULTS["kl_cov_ratio"],
        "KL-Cov: share in (0, 1) of tokens penalised (authors 2e-3, verl's default 2e-4).",
        SHARE,
    ),
    Setting(
        "kl_cov_coef",
        "kl_cov_coef",
        KL_COV_DEFAULTS["kl_cov_coef"],
        "KL-Cov: coefficient of |log π − log π_old| (authors 1, verl's default 0.1).",
        NONNEGATIVE,
    ),
)
"""KL-Cov's settings (the ``kl_cov`` policy term's keywords)."""


def check_ratio(name: str, value: float) -> None:
    """Raise ValueError unless 0 < ``value`` < 1 (a share of the batch's tokens)."""
    check_number(name, value, SHARE)


def token_covariance(advantages: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) Cov_t = (A_t − mean A)·(log π_t − mean log π), means over the valid tokens; detached, 0 at padding.

    Args:
        advantages: (B,), (B, 1) or (B, T). logp: (B, T) log π of the sampled tokens. mask: (B, T).
    """
    mask = as_bool_mask(mask, logp)
    adv = per_token(advantages, logp)
    count = mask.sum().clamp(min=1)
    mean_adv = masked_zero(adv, mask).sum() / count
    lp = logp.detach()
    mean_logp = masked_zero(lp, mask).sum() / count
    return masked_zero((adv - mean_adv) * (lp - mean_logp), mask)


def clip_cov_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    clip_cov_ratio: float = CLIP_COV_DEFAULTS["clip_cov_ratio"],
    clip_cov_lb: float = CLIP_COV_DEFAULTS["clip_cov_lb"],
    clip_cov_ub: float = CLIP_COV_DEFAULTS["clip_cov_ub"],
    generator: torch.Generator | None = None,
) -> SurrogateOutput:
    """Clip-Cov's per-token loss (module docstring): PPO's clipped surrogate with a random share of the
    tokens with clip_cov_lb < Cov_t < clip_cov_ub detached (loss 0).

    Args:
        logp, old_logp: (B, T) log-probs (nats) of the policy (with gradient) and of the sampling policy.
        advantages: (B,), (B, 1) or (B, T). mask: (B, T) valid tokens.
        epsilon_low, epsilon_high: PPO's clip range. delta: must be None (verl's Clip-Cov has no dual clip).
        clip_cov_ratio: share of valid tokens to detach, in (0, 1); clip_cov_lb < clip_cov_ub: the band.
        generator: for the random choice (None: torch's global generator).

    Returns:
        :class:`SurrogateOutput`; ``covariance_masked`` marks the detached tokens.

    Raises:
        ValueError: a ratio outside (0, 1), lb ≥ ub, delta given, or shape mismatches.
    """
    check_ratio("clip_cov_ratio", clip_cov_ratio)
    check_number("clip_cov_lb", clip_cov_lb, FINITE)
    check_number("clip_cov_ub", clip_cov_ub, FINITE)
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"need clip_cov_lb < clip_cov_ub, got {clip_cov_lb} and {clip_cov_ub}")
    if delta is not None:
        raise ValueError(f"delta={delta!r} must be None (clip_cov has no dual clip)")
    mask = as_bool_mask(mask, logp)
    base = clipped_surrogate(logp, old_logp, advantages, epsilon_low, epsilon_high)
    adv = per_token(advantages, logp)
    # tokens PPO's clip already acts on: −A·clip(ρ) > −A·ρ (verl's clip_by_origin)
    ratio = base.ratio.detach()
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    clip_by_origin = -adv * ratio.clamp(1 - epsilon_low, 1 + eps_high) > -adv * ratio
    cov = token_covariance(adv, logp, mask)
    candidates = (cov > clip_cov_lb) & (cov < clip_cov_ub) & mask & ~clip_by_origin
    chosen = torch.zeros_like(mask)
    index = torch.nonzero(candidates)
    if len(index):
        count = max(int(clip_cov_ratio * mask.sum().item()), 1)
        perm = torch.randperm(len(index), generator=generator, device=index.device)
        picked = index[perm[: min(count, len(index))]]
        chosen[picked[:, 0], picked[:, 1]] = True
    loss = torch.where(chosen, torch.zeros((), dtype=base.loss.dtype, device=logp.device), base.loss)
    return SurrogateOutput(
        loss=loss,
        ratio=base.ratio,
        clipped_low=base.clipped_low,
        clipped_high=base.clipped_high,
        covariance_masked=chosen,
    )


def kl_cov_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    kl_cov_ratio: float = KL_COV_DEFAULTS["kl_cov_ratio"],
    kl_cov_coef: float = KL_COV_DEFAULTS["kl_cov_coef"],
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """KL-Cov's per-token loss (module docstring): −A·ρ, plus kl_cov_coef·|log π − log π_old| on the top
    ``kl_cov_ratio`` share of valid tokens by covariance. No clipping (ε only sets the logged clip masks).

    Args:
        logp, old_logp: (B, T) log-probs, nats. advantages: (B,), (B, 1) or (B, T). mask: (B, T).
        kl_cov_ratio: share in (0, 1) of valid tokens penalised (at least one). kl_cov_coef: ≥ 0.
        delta: must be None (KL-Cov has no clip).

    Returns:
        :class:`SurrogateOutput`; ``covariance_masked`` marks the penalised tokens.

    Raises:
        ValueError: a ratio outside (0, 1), a negative coefficient, delta given, or shape mismatches.
    """
    check_ratio("kl_cov_ratio", kl_cov_ratio)
    check_number("kl_cov_coef", kl_cov_coef, NONNEGATIVE)
    if delta is not None:
        raise ValueError(f"delta={delta!r} must be None (kl_cov has no clip)")
    _check_epsilons(epsilon_low, epsilon_high, None, log_ratio_clip)
    check_same_shape(logp=logp, old_logp=old_logp)
    mask = as_bool_mask(mask, logp)
    adv = per_token(advantages, logp)
    log_ratio = (logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    ratio = torch.exp(log_ratio)
    loss = -adv * ratio
    chosen = torch.zeros_like(mask)
    valid = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
    if len(valid):
        flat_adv = adv.reshape(-1)[valid]
        flat_logp = logp.detach().reshape(-1)[valid]
        cov = (flat_adv - flat_adv.mean()) * (flat_logp - flat_logp.mean())
        count = max(1, int(len(cov) * kl_cov_ratio))
        top = valid[torch.topk(cov, count, largest=True).indices]
        chosen.view(-1)[top] = True
        loss = torch.where(chosen, loss + kl_cov_coef * log_ratio.abs(), loss)
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    detached = ratio.detach()
    return SurrogateOutput(
        loss=loss,
        ratio=ratio,
        clipped_low=(detached < 1 - epsilon_low) & (adv < 0),
        clipped_high=(detached > 1 + eps_high) & (adv > 0),
        covariance_masked=chosen,
    )
