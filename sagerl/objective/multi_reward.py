"""Advantages from several reward functions normalised one by one (GDPO; TRL's ``normalize_then_sum``)."""

from __future__ import annotations

import torch


def _nanstd(x: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Sample standard deviation (Bessel-corrected) ignoring NaNs."""
    n = (~torch.isnan(x)).sum(dim=dim, keepdim=keepdim) if dim is not None else (~torch.isnan(x)).sum()
    mean = torch.nanmean(x, dim=dim, keepdim=True) if dim is not None else torch.nanmean(x)
    sq = (
        torch.nansum((x - mean) ** 2, dim=dim, keepdim=keepdim)
        if dim is not None
        else torch.nansum((x - mean) ** 2)
    )
    return torch.sqrt(sq / (n - 1).clamp(min=1))


def normalize_then_sum_advantages(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int, eps: float = 1e-4
) -> torch.Tensor:
    """GDPO advantages: each reward standardised within its group, the weighted sum standardised over the batch.

    A_i = (R_i − mean(R)) / (std(R) + eps), R_i = Σ_k w_k (r_ik − mean_g(r_k)) / (std_g(r_k) + eps),
    with mean_g, std_g over the group of completion i (sample std) and mean, std over the whole batch. NaN
    rewards (a function that did not score a completion) are left out of the means and of the sum; a
    completion no function scored gets advantage 0.

    Args:
        rewards_per_func: (N, K) rewards of N = groups · group_size completions from K functions.
        weights: (K,) reward weights w_k.
        group_size: completions per prompt (consecutive rows).
        eps: added to every std (TRL's 1e-4).

    Returns:
        (N,) advantages.

    Raises:
        ValueError: shapes that do not match, or N not a multiple of group_size.

    Source: "GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL
    Optimization" (arXiv 2601.05242); the same computation as TRL's ``multi_objective_aggregation=
    "normalize_then_sum"``, which, like the paper, ignores ``scale_rewards``.
    """
    if rewards_per_func.dim() != 2 or weights.shape != (rewards_per_func.shape[1],):
        raise ValueError(
            f"rewards_per_func must be (N, K) and weights (K,), got {tuple(rewards_per_func.shape)}, "
            f"{tuple(weights.shape)}"
        )
    n, k = rewards_per_func.shape
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of {group_size}")
    grouped = rewards_per_func.view(-1, group_size, k)
    mean_g = torch.nanmean(grouped, dim=1, keepdim=True)
    std_g = _nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean_g)
    per_func = ((grouped - mean_g) / (std_g + eps)).view(n, k)
    summed = (per_func * weights.to(per_func).unsqueeze(0)).nansum(dim=1)
    summed[torch.isnan(rewards_per_func).all(dim=1)] = float("nan")
    std = _nanstd(summed) if n > 1 else torch.zeros(())
    return torch.nan_to_num((summed - torch.nanmean(summed)) / (std + eps), nan=0.0)
