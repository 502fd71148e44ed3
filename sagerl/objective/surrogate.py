"""The policy-gradient surrogates: the clipped surrogate (PPO / GRPO) with asymmetric clipping ε_low, ε_high
(DAPO's clip-higher), and TRL's alternative loss types GSPO, CISPO, SAPO and VESPO.

The covariance variants (Clip-Cov, KL-Cov in :mod:`sagerl.objective.covariance`) build on the clipped surrogate;
:mod:`sagerl.objective.policy_loss` dispatches between all of them by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sagerl.objective._checks import NONNEGATIVE, POSITIVE, UNIT, Range, check_number, check_same_shape


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
        ValueError: shape mismatch, ε_low outside [0, 1], ε_high < 0, delta <= 1, a log-ratio clamp <= 0, or
            one of them not a finite number.

    Source: Schulman et al. 2017 (PPO); Shao et al. 2024 (GRPO); Yu et al. 2025 (DAPO, clip-higher).
    """
    check_same_shape(logp=logp, old_logp=old_logp)
    _check_epsilons(epsilon_low, epsilon_high, delta, log_ratio_clip)
    adv = _advantages_2d(advantages, logp)
    log_ratio = (logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    return _clip_ratio(torch.exp(log_ratio), adv, epsilon_low, epsilon_high, delta)


EPSILON_LOW = UNIT
"""ε_low: 1 − ε_low is the lower clip of ρ, so ε_low = 1 already leaves every ρ > 0 unclipped below."""
DELTA = Range(1.0, low_open=True)
"""The two-sided clip's bound on the unclipped ρ (INTELLECT-2; TRL's ``delta``)."""


def _check_epsilons(
    epsilon_low: float, epsilon_high: float | None, delta: float | None = None, log_ratio_clip: float = 20.0
) -> None:
    """Raise ValueError unless ε_low ∈ [0, 1], ε_high ≥ 0 (None: ε_low), delta > 1 (or None) and the
    log-ratio clamp > 0."""
    check_number("epsilon_low", epsilon_low, EPSILON_LOW)
    if epsilon_high is not None:
        check_number("epsilon_high", epsilon_high, NONNEGATIVE)
    if delta is not None:
        check_number("delta", delta, DELTA)
    check_number("log_ratio_clip", log_ratio_clip, POSITIVE)


def _clip_ratio(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float | None,
    delta: float | None,
) -> SurrogateOutput:
    """−min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A) for a (B, T) ratio ρ (token or sequence) and (B, 1) or
    (B, T) advantages, with the optional bound ``delta`` on the unclipped ρ, and the clip masks."""
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
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


# ---------------------------------------------------------------------------------------------------------
# Alternative surrogates (TRL's loss types). Each takes the registry signature
#   fn(logp, old_logp, advantages, mask, *, epsilon_low, epsilon_high, delta, **params) -> SurrogateOutput
# and changes the policy-gradient term only: sage_loss adds the (shaped) KL anchor on top, unchanged.
# ---------------------------------------------------------------------------------------------------------

IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


def _advantages_2d(advantages: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """Advantages as (B, 1) or (B, T), detached. Raises ValueError on any other shape."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    if adv.dim() != 2 or adv.shape[0] != logp.shape[0] or adv.shape[1] not in (1, logp.shape[1]):
        raise ValueError(
            f"advantages must be (B,), (B, 1) or (B, T) for logp {tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    return adv.detach()


def sequence_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, log_ratio_clip: float = 20.0
) -> torch.Tensor:
    """GSPO's length-normalised sequence log-ratio (1/|y|) Σ_t log(π_θ/π_old)(y_t), with gradient.

    Args:
        logp, old_logp: (B, T) log-probs (nats); old_logp is detached. mask: (B, T) completion mask.
        log_ratio_clip: clamp of each token's log-ratio before the mean.

    Returns:
        (B, 1) log s_i; 0 for a row without valid tokens.

    Source: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071), eq. (7).
    """
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    m = mask.to(logp.dtype)
    log_ratio = (logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    return ((log_ratio * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)).to(
        logp.dtype
    )


def _log_ratio(logp, old_logp, mask, level: str, log_ratio_clip: float) -> torch.Tensor:
    """Per-token (B, T) or per-sequence (B, 1) log importance ratio, with gradient."""
    if level == "token":
        return (logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    if level == "sequence":
        return sequence_log_ratio(logp, old_logp, mask, log_ratio_clip)
    raise ValueError(f"importance_sampling_level={level!r}; expected one of {IMPORTANCE_SAMPLING_LEVELS}")


def _no_clip(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x, dtype=torch.bool)


def clip_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """Registry entry ``"clip"``: :func:`clipped_surrogate` (the mask is not used)."""
    return clipped_surrogate(
        logp, old_logp, advantages, epsilon_low, epsilon_high, delta=delta, log_ratio_clip=log_ratio_clip
    )


def gspo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """GSPO: the clipped surrogate on the sequence ratio s_i = exp((1/|y_i|) Σ_t log ρ_i,t).

    ℓ_i,t = −min(s_i·A, clip(s_i, 1 − ε_low, 1 + ε_high)·A), the same value on every token of row i (so the
    token-mean of row i is the paper's per-sequence term); with per-token advantages A_t (the KL in the
    reward) each token keeps its own A_t. ``delta`` bounds the unclipped s_i as in :func:`clipped_surrogate`.

    Args:
        logp, old_logp, mask: (B, T). advantages: (B,), (B, 1) or (B, T).
        epsilon_low, epsilon_high: the clip range of s_i. The paper clips far tighter than token-level PPO
            (ε_low = 3e-4, ε_high = 4e-4 in its experiments); TRL keeps its token-level defaults (0.2), which
            is what ``importance_sampling_level="sequence"`` gives here too.

    Returns:
        :class:`SurrogateOutput`, every field (B, T) (the sequence ratio broadcast over the row).

    Source: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071), eqs. (5)-(7).
    """
    _check_epsilons(epsilon_low, epsilon_high, delta, log_ratio_clip)
    adv = _advantages_2d(advantages, logp)
    ratio = torch.exp(sequence_log_ratio(logp, old_logp, mask, log_ratio_clip)).expand_as(logp)
    return _clip_ratio(ratio, adv, epsilon_low, epsilon_high, delta)


def cispo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    ratio_max: float | None = None,
    importance_sampling_level: str = "token",
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """CISPO: REINFORCE weighted by the clipped, detached importance ratio, ℓ_t = −sg(r̂_t)·A·log π_θ(y_t).

    The gradient is −sg(r̂_t)·A·∇log π_θ for every token: the clip bounds the weight but never drops a
    token's gradient (PPO's clip does). Two forms of r̂:

    - ``ratio_max`` given (ScaleRL, TRL's ``loss_type="cispo"``): r̂ = min(ρ, ratio_max); TRL passes its
      ``epsilon_high`` as ratio_max (recommended 5.0; TRL's default ε_high = ε = 0.2 clips every ratio above
      0.2, which SAGETrainer keeps for parity).
    - ``ratio_max`` None (MiniMax-M1 eq. (5)): r̂ = clip(ρ, 1 − ε_low, 1 + ε_high).

    Args:
        logp, old_logp, mask: (B, T). advantages: (B,), (B, 1) or (B, T).
        importance_sampling_level: ``"token"`` (ρ per token) or ``"sequence"`` (GSPO's s_i for every token).
        delta: unused (CISPO's weight is bounded already); accepted for the registry signature.

    Returns:
        :class:`SurrogateOutput`; ``clipped_high``: ρ above the upper bound with A > 0 (TRL's
        ``cispo_clip_ratio``), ``clipped_low``: ρ below 1 − ε_low with A < 0 (MiniMax form only).

    Source: MiniMax 2025, "MiniMax-M1" (arXiv 2506.13585), eqs. (4)-(5); Khatri et al. 2025, "The Art of
    Scaling RL Compute" (ScaleRL, arXiv 2510.13786) for the one-sided form.
    """
    _check_epsilons(epsilon_low, epsilon_high, None, log_ratio_clip)
    if ratio_max is not None:
        check_number("ratio_max", ratio_max, POSITIVE)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    adv = _advantages_2d(advantages, logp)
    ratio = torch.exp(_log_ratio(logp, old_logp, mask, importance_sampling_level, log_ratio_clip))
    if ratio_max is not None:
        weight, low, high = ratio.clamp(max=ratio_max), None, ratio_max
    else:
        weight, low, high = ratio.clamp(1 - epsilon_low, 1 + epsilon_high), 1 - epsilon_low, 1 + epsilon_high
    loss = -weight.detach() * adv * logp
    detached = ratio.detach().expand_as(logp)
    return SurrogateOutput(
        loss=loss,
        ratio=ratio.expand_as(logp),
        clipped_low=_no_clip(logp) if low is None else (detached < low) & (adv < 0),
        clipped_high=(detached > high) & (adv > 0),
    )


def sapo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    temperature_pos: float = 1.0,
    temperature_neg: float = 1.05,
    importance_sampling_level: str = "token",
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """SAPO: a smooth gate in place of the clip, ℓ_t = −(4/τ)·σ(τ(ρ_t − 1))·A.

    The gate's gradient weight 4σ(1 − σ) is 1 at ρ = 1 and decays smoothly off-policy, τ = τ_pos for A > 0
    and τ_neg otherwise (the paper takes τ_neg > τ_pos: negative tokens are damped faster). The defaults are
    TRL's (``sapo_temperature_pos`` = 1.0, ``sapo_temperature_neg`` = 1.05). ε and delta are unused.

    Args:
        logp, old_logp, mask: (B, T). advantages: (B,), (B, 1) or (B, T).
        importance_sampling_level: ``"token"`` or ``"sequence"`` (GSPO's s_i in the gate).

    Returns:
        :class:`SurrogateOutput` (no hard clip: both clip masks are all False).

    Raises:
        ValueError: a temperature <= 0.

    Source: Gao et al. 2025, "Soft Adaptive Policy Optimization" (arXiv 2511.20347), eqs. (6)-(8).
    """
    check_number("temperature_pos", temperature_pos, POSITIVE)
    check_number("temperature_neg", temperature_neg, POSITIVE)
    check_number("log_ratio_clip", log_ratio_clip, POSITIVE)
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    adv = _advantages_2d(advantages, logp)
    ratio = torch.exp(_log_ratio(logp, old_logp, mask, importance_sampling_level, log_ratio_clip))
    tau = torch.where(adv > 0, temperature_pos, temperature_neg).to(logp.dtype)
    loss = -(torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv).expand_as(logp)
    return SurrogateOutput(
        loss=loss, ratio=ratio.expand_as(logp), clipped_low=_no_clip(logp), clipped_high=_no_clip(logp)
    )


@torch.no_grad()
def vespo_weights(
    advantages: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
    importance_sampling_ratio: torch.Tensor | None = None,
) -> torch.Tensor:
    """VESPO's Gamma weight φ(w) = e^λ · w^k · e^(−λw) of the sequence ratio w (φ(1) = 1), detached.

    Args:
        advantages: (B, 1) or (B,); k, λ are (k_pos, λ_pos) where A >= 0, else (k_neg, λ_neg).
        log_ratio: (B, T) token log-ratios log(π_θ/π_old); w = exp(Σ_t log ρ_t), the product over the
            sequence (not GSPO's length-normalised mean), with log w clamped to [log 1e-8, 20].
        mask: (B, T). importance_sampling_ratio: optional (B, T) sampler correction π_old/π_sampler,
            multiplied into w (TRL's vLLM correction).

    Returns:
        (B, 1) φ(w); non-finite values become 0.

    Raises:
        ValueError: k < 0 or λ <= 0.

    Source: "VESPO: Variational Sequence-Level Soft Policy Optimization" (arXiv 2602.10693); defaults are
    TRL's (k_pos 2, λ_pos 3, k_neg 3, λ_neg 2).
    """
    for name, value, allowed in (
        ("k_pos", k_pos, NONNEGATIVE),
        ("lambda_pos", lambda_pos, POSITIVE),
        ("k_neg", k_neg, NONNEGATIVE),
        ("lambda_neg", lambda_neg, POSITIVE),
    ):
        check_number(name, value, allowed)
    lower = math.log(1e-8)
    m = mask.to(log_ratio.dtype)
    log_w = (log_ratio.clamp(-20.0, 20.0) * m).sum(dim=1, keepdim=True)
    if importance_sampling_ratio is not None:
        log_w = log_w + torch.log(importance_sampling_ratio).clamp(lower, 20.0).sum(dim=1, keepdim=True)
    log_w = log_w.clamp(lower, 20.0)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages[:, :1]
    nonneg = adv >= 0
    k = torch.where(nonneg, k_pos, k_neg).to(log_w.dtype)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).to(log_w.dtype).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
    importance_sampling_ratio: torch.Tensor | None = None,
) -> SurrogateOutput:
    """VESPO: ℓ_t = −φ(w_i)·A·log π_θ(y_t) with the detached Gamma weight φ of :func:`vespo_weights`.

    The gradient is −φ(w)·A·∇log π_θ: φ replaces the hard clip by a smooth, asymmetric down-weighting of
    sequences whose ratio w strays from 1. ε and delta are unused; the sampler correction enters w itself
    (pass it here, not as sage_loss's ``importance_weights``).

    Args:
        logp, old_logp, mask: (B, T). advantages: (B,) or (B, 1) (φ is chosen per sequence; a (B, T)
            advantage is used per token in the loss, its first column picks k, λ).

    Returns:
        :class:`SurrogateOutput`; ``ratio`` is w broadcast over the row; the clip masks are all False.

    Source: "VESPO: Variational Sequence-Level Soft Policy Optimization" (arXiv 2602.10693).
    """
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    adv = _advantages_2d(advantages, logp)
    log_ratio = logp.detach() - old_logp.detach()
    phi = vespo_weights(
        adv,
        log_ratio,
        mask,
        k_pos=k_pos,
        lambda_pos=lambda_pos,
        k_neg=k_neg,
        lambda_neg=lambda_neg,
        importance_sampling_ratio=importance_sampling_ratio,
    )
    m = mask.to(logp.dtype)
    w = torch.exp((log_ratio.clamp(-20.0, 20.0) * m).sum(dim=1, keepdim=True).clamp(max=20.0))
    return SurrogateOutput(
        loss=-phi * adv * logp,
        ratio=w.expand_as(logp),
        clipped_low=_no_clip(logp),
        clipped_high=_no_clip(logp),
    )
