"""The policy term by name: the clipped surrogate (PPO / GRPO, :mod:`sagerl.objective.surrogate`) and its
covariance variants (:mod:`sagerl.objective.covariance`)."""

from __future__ import annotations

import torch

from sagerl.objective.surrogate import SurrogateOutput, clipped_surrogate

__all__ = ["POLICY_LOSSES", "SurrogateOutput", "clipped_surrogate", "policy_loss"]


def _clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
) -> SurrogateOutput:
    return clipped_surrogate(logp, old_logp, advantages, epsilon_low, epsilon_high, delta=delta)


def _registry() -> dict:
    from sagerl.objective.covariance import clip_cov_surrogate, kl_cov_surrogate

    return {"clip": _clip, "clip_cov": clip_cov_surrogate, "kl_cov": kl_cov_surrogate}


POLICY_LOSSES = ("clip", "clip_cov", "kl_cov")
"""The policy-loss variants :func:`policy_loss` dispatches on (``sage_loss(policy_loss=...)``)."""


def policy_loss(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    **params,
) -> SurrogateOutput:
    """The per-token policy term of variant ``name``: ``"clip"`` (:func:`clipped_surrogate`), ``"clip_cov"``
    or ``"kl_cov"`` (:mod:`sagerl.objective.covariance`); ``params`` are the variant's own keywords.

    Every variant has the signature ``fn(logp, old_logp, advantages, mask, *, epsilon_low, epsilon_high,
    delta, **params) -> SurrogateOutput`` with (B, T) tensors.

    Raises:
        ValueError: unknown name or parameters, and whatever the variant raises.
    """
    table = _registry()
    if name not in table:
        raise ValueError(f"unknown policy_loss {name!r}; expected one of {POLICY_LOSSES}")
    try:
        return table[name](
            logp,
            old_logp,
            advantages,
            mask,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            delta=delta,
            **params,
        )
    except TypeError as exc:
        raise ValueError(f"policy_loss {name!r}: {exc}") from exc
