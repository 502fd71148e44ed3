"""Group-relative advantages over groups of G completions of the same prompt.

Rewards arrive flat, (N,) with N = (number of groups) × G and each group contiguous, as TRL produces them.
NaN marks an unscorable completion: it is left out of its group's statistics and gets advantage 0.
"""

from __future__ import annotations

import math

import torch

from sagerl.objective._checks import NONNEGATIVE, POSITIVE, check_number, grouped

ADVANTAGE_SCALES = ("group", "batch", "none")


def _nanstd(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """Sample (Bessel-corrected) std ignoring NaN; NaN where fewer than two values."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True) if dim is not None else (~torch.isnan(x)).sum()
    sq = (
        torch.nansum((x - mean) ** 2, dim=dim, keepdim=True)
        if dim is not None
        else torch.nansum((x - mean) ** 2)
    )
    var = torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.full_like(sq, float("nan")))
    std = var.sqrt()
    return std if keepdim or dim is None else std.squeeze(dim)


def grpo_advantages(
    rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-4
) -> torch.Tensor:
    """GRPO advantages: A_i = (R_i − mean_group(R)) / (std + eps).

    Args:
        rewards: (N,) rewards, groups of ``group_size`` contiguous.
        group_size: G.
        scale: ``"group"`` (std of the group, GRPO), ``"batch"`` (std over the whole batch) or ``"none"``
            (no division: Dr.GRPO). The std is the sample (Bessel-corrected) std, as in TRL 1.16.
        eps: added to the std (TRL uses 1e-4).

    Returns:
        (N,) advantages, 0 for NaN rewards and for groups of one.

    Raises:
        ValueError: bad shapes, an unknown scale, or ``eps`` not a finite number >= 0.

    Source: Shao et al. 2024 (DeepSeekMath, GRPO); Liu et al. 2025 (Dr.GRPO, no std division).
    """
    g = grouped(rewards, group_size)
    check_number("eps", eps, NONNEGATIVE)
    mean = torch.nanmean(g, dim=1, keepdim=True)
    centred = g - mean
    if scale == "group":
        std = _nanstd(g, dim=1, keepdim=True)
        adv = centred / (torch.nan_to_num(std, nan=0.0) + eps)
    elif scale == "batch":
        std = _nanstd(rewards)
        adv = centred / (torch.nan_to_num(std, nan=0.0) + eps)
    elif scale == "none":
        adv = centred
    else:
        raise ValueError(f"unknown advantage scale {scale!r}; expected one of {ADVANTAGE_SCALES}")
    return torch.nan_to_num(adv, nan=0.0).reshape(-1)


def dr_grpo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr.GRPO advantages: A_i = R_i − mean_group(R) (no std division). (N,) in, (N,) out."""
    return grpo_advantages(rewards, group_size, scale="none")


def beta_parameters(group_means: torch.Tensor) -> tuple[float, float]:
    """BNPO's Beta(α, β) fitted to the batch's group mean rewards by the method of moments.

    With m the mean and v the sample (unbiased) variance of the group means, a = m·c and b = (1 − m)·c where
    c = m(1 − m)/v − 1; then α = max(1 + a/3, 1) and β = max(1 + b/3, 1).

    Degenerate batches (fewer than two groups, v = 0, or m ∈ {0, 1}) give α = β = 1 (uniform, pdf ≡ 1),
    so the advantages fall back to R − p instead of vanishing.
    """
    p = group_means[~torch.isnan(group_means)].double()
    if p.numel() < 2:
        return 1.0, 1.0
    m = p.mean().item()
    v = p.var(unbiased=True).item()
    if v <= 0 or m <= 0 or m >= 1:
        return 1.0, 1.0
    c = m * (1 - m) / v - 1
    a, b = m * c, (1 - m) * c
    return max(1 + a / 3, 1.0), max(1 + b / 3, 1.0)


def bnpo_advantages(rewards: torch.Tensor, group_size: int, max_inverse_pdf: float = 1e6) -> torch.Tensor:
    """BNPO advantages: A = (R − p) / Beta_pdf(p; α, β), p the group's mean reward.

    α, β come from :func:`beta_parameters` over the batch's group means; 1/pdf is clamped at
    ``max_inverse_pdf`` (1e6), which covers p ∈ {0, 1} where the pdf can vanish.

    Not TRL's ``loss_type="bnpo"``, which is only a way to aggregate the loss (token-mean per micro-batch).

    Args:
        rewards: (N,) rewards in [0, 1] (NaN allowed for unscorable completions), groups contiguous.
        group_size: G.
        max_inverse_pdf: clamp of 1/pdf.

    Returns:
        (N,) advantages.

    Raises:
        ValueError: bad shapes, rewards outside [0, 1] (BNPO models a Bernoulli success rate), or
            ``max_inverse_pdf`` not a finite number > 0.

    Source: Xiao et al. 2025, "BNPO: Beta Normalization Policy Optimization", arXiv 2506.02864.
    """
    g = grouped(rewards, group_size)
    check_number("max_inverse_pdf", max_inverse_pdf, POSITIVE)
    finite = rewards[~torch.isnan(rewards)]
    if finite.numel() and (finite.min() < 0 or finite.max() > 1):
        raise ValueError(
            f"bnpo_advantages needs rewards in [0, 1], got values in [{finite.min().item():g}, {finite.max().item():g}]"
        )
    p = torch.nanmean(g, dim=1, keepdim=True)  # (groups, 1)
    alpha, beta = beta_parameters(p.squeeze(1))
    log_b = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    pd = p.double().clamp(0.0, 1.0)
    log_pdf = (
        torch.xlogy(torch.tensor(alpha - 1.0, dtype=pd.dtype), pd)
        + torch.xlogy(torch.tensor(beta - 1.0, dtype=pd.dtype), 1.0 - pd)
        - log_b
    )
    inv_pdf = torch.exp(-log_pdf).clamp(max=max_inverse_pdf).to(rewards.dtype)
    adv = (g - p) * inv_pdf
    return torch.nan_to_num(adv, nan=0.0).reshape(-1)
