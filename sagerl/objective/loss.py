"""The SAGE policy loss: clipped surrogate + β · (shaped) anchor divergence, aggregated.

Per token, with ρ = π/π_old, advantage A and guide q (detached, 1 ≡ plain GRPO):

    kl_placement="loss"   (GRPO, TRL, verl, the SAGE authors):
        ℓ_t = −min(ρA, clip(ρ)A) + β · k(π, q·π_ref)
    kl_placement="reward" (KL in the reward, with reward-to-go):
        ℓ_t = −min(ρA_t, clip(ρ)A_t),   A_t = A − β · Σ_{t' ≥ t} sg(log π_t' − log q_t' − log π_ref,t')

The second form's expected gradient is the exact gradient of E[r] − β·D(π‖F) over whole sequences, with
F(y) = Π_t q_t·π_ref(y_t | s_t), so gradient descent converges to π*(y) ∝ F(y)·exp(r(y)/β): the optimum
SAGE states. The first form's gradient depends on the estimator (see :mod:`sagerl.objective.divergences`);
with k3 it is a forward KL to the normalised anchor. tests/objective/test_tabular.py checks both claims on
an exact token tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from sagerl.objective._checks import (
    NONNEGATIVE,
    POSITIVE,
    as_bool_mask,
    check_2d,
    check_number,
    check_same_shape,
    masked_zero,
)
from sagerl.objective.aggregation import aggregate_loss
from sagerl.objective.divergences import forward_kl, shaped_kl
from sagerl.objective.entropy_advantage import KAPPA, entropy_advantage
from sagerl.objective.policy_loss import IMPORTANCE_SAMPLING_LEVELS, SurrogateOutput, sequence_log_ratio
from sagerl.objective.policy_loss import policy_loss as compute_policy_loss

DIVERGENCES = ("reverse", "forward")
KL_PLACEMENTS = ("loss", "reward")


@dataclass
class LossOutput:
    """Everything :func:`sage_loss` computed; tensors are (B, T) unless noted."""

    loss: torch.Tensor
    """0-dim aggregated loss, with gradient."""
    per_token_loss: torch.Tensor
    """(B, T) loss before aggregation (padding included, unmasked)."""
    surrogate: SurrogateOutput
    """The clipped surrogate's per-token loss, ratio and clip masks."""
    kl: torch.Tensor | None
    """(B, T) detached per-token divergence estimate (nats), None when β = 0."""
    advantages: torch.Tensor
    """(B, 1) or (B, T) detached advantages the surrogate used (per token with ``kl_placement="reward"``)."""


def kl_to_go(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse cumulative sum Σ_{t' ≥ t} log_ratio_t' over valid tokens, detached. (B, T) in and out."""
    check_2d(log_ratio, "log_ratio")
    mask = as_bool_mask(mask, log_ratio)
    x = masked_zero(log_ratio.detach(), mask)
    return torch.flip(torch.cumsum(torch.flip(x, dims=[1]), dim=1), dims=[1])


def sage_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    log_q: torch.Tensor | None = None,
    beta: float = 0.0,
    divergence: str = "reverse",
    kl_estimator: str = "k3",
    kl_log_ratio_clip: float | None = 20.0,
    kl_bias_correction: bool = False,
    kl_placement: str = "loss",
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    num_tokens: float | torch.Tensor | None = None,
    max_len: int | None = None,
    importance_weights: torch.Tensor | None = None,
    policy_loss: str = "clip",
    policy_loss_params: Mapping[str, Any] | None = None,
    kl_bias_correction_level: str = "token",
    entropy: torch.Tensor | None = None,
    entropy_adv_alpha: float = 0.0,
    entropy_adv_kappa: float = 2.0,
) -> LossOutput:
    """SAGE loss on one (micro-)batch.

    Args:
        logp: (B, T) log π_θ of the sampled completion tokens, nats, with gradient.
        old_logp: (B, T) log π_old of the sampling policy; None means on-policy (``logp.detach()``).
        ref_logp: (B, T) log π_ref; required when β ≠ 0.
        advantages: (B,) or (B, T) advantages (see :mod:`sagerl.objective.advantages`).
        mask: (B, T) completion mask (0/1 or bool).
        log_q: (B, T) log of the guide q (detached); None for q ≡ 1 (plain GRPO).
        beta: β, the KL coefficient; 0 disables the anchor (GRPO without KL).
        divergence: ``"reverse"`` (to the shaped anchor q·π_ref) or ``"forward"`` (KL(π_ref‖π); no guide).
        kl_estimator: ``"k1"``, ``"k2"`` or ``"k3"`` for the reverse divergence in the loss.
        kl_log_ratio_clip: clamp of the log-ratio inside the divergence (None: off).
        kl_bias_correction: multiply the divergence by ρ = π/π_old (TRL's ``use_bias_correction_kl``).
        kl_placement: ``"loss"`` or ``"reward"`` (module docstring). ``"reward"`` needs ``divergence="reverse"``
            and uses k1 whatever ``kl_estimator`` says; ``kl_estimator`` is then only what is logged.
        epsilon_low, epsilon_high, delta: clipping (see :func:`clipped_surrogate`).
        loss_agg_mode, num_tokens, max_len: aggregation (see :func:`aggregate_loss`).
        importance_weights: (B, T) or (B, 1) detached weights multiplying the surrogate term only (TRL's
            vLLM importance-sampling correction; also TRL's entropy and off-policy masks).
        policy_loss: the policy term, a name in :data:`sagerl.objective.policy_loss.POLICY_LOSSES`: ``"clip"``
            (the clipped surrogate), ``"gspo"``, ``"cispo"``, ``"sapo"``, ``"vespo"`` (TRL's loss types,
            :mod:`sagerl.objective.surrogate`), ``"clip_cov"`` or ``"kl_cov"`` (:mod:`sagerl.objective.covariance`);
            it changes the policy-gradient term only, the KL anchor and the guide are the same for every choice.
        policy_loss_params: extra keyword arguments of that term (e.g. ``{"ratio_max": 5.0}`` for CISPO,
            ``{"kl_cov_ratio": 2e-3}`` for KL-Cov).
        kl_bias_correction_level: with ``kl_bias_correction``, the ratio that weights the divergence:
            ``"token"`` (ρ_t) or ``"sequence"`` (GSPO's s_i on every token of row i, as TRL does with
            ``importance_sampling_level="sequence"``).
        entropy: (B, T) policy entropies (nats), read when ``entropy_adv_alpha`` > 0.
        entropy_adv_alpha, entropy_adv_kappa: the entropy advantage A + min(α·H_t, |A|/κ)
            (:mod:`sagerl.objective.entropy_advantage`), applied to the task advantage before the policy term
            (and before the KL-in-reward shaping); α = 0 turns it off.

    Returns:
        :class:`LossOutput`.

    Raises:
        ValueError: unknown option names, missing ``ref_logp`` with β ≠ 0, a guide with the forward
            divergence, shape mismatches, or a numeric argument that is not a finite number in its range
            (β >= 0, ``kl_log_ratio_clip`` > 0, ``entropy_adv_alpha`` >= 0, ``entropy_adv_kappa`` > 1, and the
            surrogate's and the aggregation's own).
    """
    check_2d(logp, "logp")
    mask = as_bool_mask(mask, logp)
    check_number("beta", beta, NONNEGATIVE)
    if kl_log_ratio_clip is not None:
        check_number("kl_log_ratio_clip", kl_log_ratio_clip, POSITIVE)
    check_number("entropy_adv_alpha", entropy_adv_alpha, NONNEGATIVE)
    check_number("entropy_adv_kappa", entropy_adv_kappa, KAPPA)
    old_logp = logp.detach() if old_logp is None else old_logp
    check_same_shape(logp=logp, old_logp=old_logp, ref_logp=ref_logp, log_q=log_q)
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}; expected one of {DIVERGENCES}")
    if kl_placement not in KL_PLACEMENTS:
        raise ValueError(f"unknown kl_placement {kl_placement!r}; expected one of {KL_PLACEMENTS}")
    use_kl = beta != 0.0
    if use_kl and ref_logp is None:
        raise ValueError("ref_logp is required when beta != 0")
    if divergence == "forward" and log_q is not None:
        raise ValueError("the forward divergence takes no guide (log_q must be None)")
    if use_kl and kl_placement == "reward" and divergence != "reverse":
        raise ValueError('kl_placement="reward" is defined for the reverse divergence only')

    kl = None
    if use_kl:
        if divergence == "reverse":
            kl = shaped_kl(
                logp,
                ref_logp,
                log_q,
                kl_estimator,
                log_ratio_clip=kl_log_ratio_clip,
                old_logp=old_logp if kl_bias_correction and kl_bias_correction_level == "token" else None,
            )
            if kl_bias_correction and kl_bias_correction_level == "sequence":
                kl = kl * torch.exp(sequence_log_ratio(logp, old_logp, mask.to(logp.dtype)))
            elif kl_bias_correction_level not in IMPORTANCE_SAMPLING_LEVELS:
                raise ValueError(
                    f"unknown kl_bias_correction_level {kl_bias_correction_level!r}; "
                    f"expected one of {IMPORTANCE_SAMPLING_LEVELS}"
                )
        else:
            kl = forward_kl(logp, ref_logp, log_ratio_clip=kl_log_ratio_clip)

    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    if entropy_adv_alpha:
        if entropy is None:
            raise ValueError("the entropy advantage (entropy_adv_alpha > 0) needs entropy")
        adv = entropy_advantage(adv, entropy, mask, entropy_adv_alpha, entropy_adv_kappa)
    if use_kl and kl_placement == "reward":
        log_f = ref_logp.detach() + (0.0 if log_q is None else log_q.detach())
        log_ratio = logp.detach() - log_f
        if kl_log_ratio_clip is not None:
            log_ratio = log_ratio.clamp(-kl_log_ratio_clip, kl_log_ratio_clip)
        adv = adv - beta * kl_to_go(log_ratio, mask)

    surrogate = compute_policy_loss(
        policy_loss,
        logp,
        old_logp,
        adv,
        mask,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        delta=delta,
        **(policy_loss_params or {}),
    )
    per_token = surrogate.loss
    if importance_weights is not None:
        per_token = per_token * importance_weights.detach()
    if use_kl and kl_placement == "loss":
        per_token = per_token + beta * kl
    loss = aggregate_loss(per_token, mask, loss_agg_mode, num_tokens=num_tokens, max_len=max_len)
    return LossOutput(
        loss=loss,
        per_token_loss=per_token,
        surrogate=surrogate,
        kl=None if kl is None else kl.detach(),
        advantages=adv,
    )
