"""The clipped surrogate (PPO / GRPO) with asymmetric clipping ε_low, ε_high (DAPO's clip-higher).

Its variants (Clip-Cov, KL-Cov in :mod:`sagerl.objective.covariance`) build on it; :mod:`sagerl.objective.policy_loss`
dispatches between them by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sagerl.objective._checks import check_same_shape


@dataclass
class SurrogateOutput:
    """Per-token results of :func:`clipped_surrogate`, all (B, T)."""

    loss: torch.Tensor
    """−min(ρ·A, clip(ρ, 1 − ε_low, 1 + ε_high)·A), with gradient."""
    ratio: torch.Tensor
    """ρ = π/π_old (with gradient)."""
    clipped_low: torch.Tensor
    """bool: ρ < 1 − ε_low and A < 0 (the clip is active and stops the gradient)."""
    clipped_high: torch.Tensor
    """bool: ρ > 1 + ε_high and A > 0."""
    covariance_masked: torch.Tensor | None = None
    """bool: the tokens a covariance method acted on (Clip-Cov: detached; KL-Cov: penalised), else None."""


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    *,
    delta: float | None = None,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """Per-token clipped policy-gradient loss −min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A).

    Args:
        logp: (B, T) log π_θ of the sampled tokens, nats, with gradient.
        old_logp: (B, T) log π_old of the policy that sampled them (detached); pass ``logp.detach()``
            when fully on-policy, which makes ρ ≡ 1 with gradient ∇log π.
        advantages: (B,) or (B, 1) per sequence, or (B, T) per token.
        epsilon_low: ε_low. epsilon_high: ε_high (default: ε_low; DAPO uses 0.28).
        delta: optional upper bound on the unclipped ρ, which bounds the loss of negative-advantage tokens
            whose ratio exploded (two-sided clipping, TRL's ``delta``); None disables it.
        log_ratio_clip: clamp on log ρ before exponentiation, for finite values at extreme inputs.

    Returns:
        :class:`SurrogateOutput`.

    Raises:
        ValueError: shape mismatch or negative ε.

    Source: Schulman et al. 2017 (PPO); Shao et al. 2024 (GRPO); Yu et al. 2025 (DAPO, clip-higher).
    """
    check_same_shape(logp=logp, old_logp=old_logp)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    if epsilon_low < 0 or epsilon_high < 0:
        raise ValueError(f"epsilon_low and epsilon_high must be >= 0, got {epsilon_low}, {epsilon_high}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    if (
        advantages.dim() != 2
        or advantages.shape[0] != logp.shape[0]
        or advantages.shape[1] not in (1, logp.shape[1])
    ):
        raise ValueError(
            f"advantages must be (B,), (B, 1) or (B, T) for logp {tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    advantages = advantages.detach()
    log_ratio = (logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.min(unclipped * advantages, clipped * advantages)
    detached = ratio.detach()
    return SurrogateOutput(
        loss=loss,
        ratio=ratio,
        clipped_low=(detached < 1 - epsilon_low) & (advantages < 0),
        clipped_high=(detached > 1 + epsilon_high) & (advantages > 0),
    )
