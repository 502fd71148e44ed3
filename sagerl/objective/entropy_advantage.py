"""The entropy advantage: a bounded bonus for high-entropy tokens added to the advantage.

Source: Cheng et al. 2025, "Reasoning with Exploration: An Entropy Perspective", arXiv 2506.14758. Per
token, with the entropy H_t of the policy at s_t (nats) taken as a constant (no gradient through it),

    A'_t = A + ψ_t,   ψ_t = min(α · H_t, |A| / κ)

so the bonus grows with the entropy but never exceeds |A|/κ: with κ > 1 it cannot flip the advantage's
sign, and a completion with A = 0 (an equal-reward group) gets no bonus. The paper uses α = 0.4, κ = 2.
It acts on the advantage before the policy loss (whichever surrogate), not on the KL anchor.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import (
    NONNEGATIVE,
    POSITIVE,
    Range,
    Setting,
    as_bool_mask,
    check_number,
    masked_zero,
    per_token,
)

KAPPA = Range(1.0, low_open=True)
"""κ > 1, so that the bonus |A|/κ never flips the sign of A."""
SETTINGS = (
    Setting(
        "entropy_adv_alpha",
        "entropy_adv_alpha",
        0.0,
        "Entropy advantage A + min(α·H, |A|/κ): α (0: off; the paper's 0.4).",
        NONNEGATIVE,
    ),
    Setting(
        "entropy_adv_kappa", "entropy_adv_kappa", 2.0, "Entropy advantage: κ > 1 (the paper's 2).", KAPPA
    ),
)
"""The entropy advantage's settings, keywords of :func:`sagerl.objective.sage_loss` (α = 0 turns it off)."""


def check_entropy_advantage(alpha: float, kappa: float) -> None:
    """Raise ValueError unless α > 0 and κ > 1 (finite)."""
    check_number("alpha", alpha, POSITIVE)
    check_number("kappa", kappa, KAPPA)


def entropy_advantage(
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 0.4,
    kappa: float = 2.0,
) -> torch.Tensor:
    """(B, T) shaped advantages A + min(α·H_t, |A|/κ), detached; A itself at padding.

    Args:
        advantages: (B,), (B, 1) or (B, T). entropy: (B, T) policy entropy H_t in nats (detached here; NaN or
            inf at valid tokens counts as no bonus). mask: (B, T) valid tokens.
        alpha: α > 0. kappa: κ > 1.

    Raises:
        ValueError: α ≤ 0 or κ ≤ 1, or shape mismatches.
    """
    check_entropy_advantage(alpha, kappa)
    mask = as_bool_mask(mask, entropy)
    adv = per_token(advantages, entropy)
    h = torch.nan_to_num(entropy.detach().to(adv.dtype), nan=0.0, posinf=0.0, neginf=0.0).clamp(min=0.0)
    bonus = torch.minimum(alpha * h, adv.abs() / kappa)
    return adv + masked_zero(bonus, mask)
