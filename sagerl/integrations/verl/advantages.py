"""BNPO advantages as a verl advantage estimator: ``algorithm.adv_estimator=bnpo``.

Registered through verl's public ``register_adv_est`` when the plugin loads. verl hands an estimator the
token-level rewards (B, T), the response mask (B, T) and the prompt ids (``index``, one per row; the rows of a
group need not be contiguous); the advantage is :func:`sagerl.objective.bnpo_advantages` of each row's summed
reward, broadcast over its response tokens (returns = advantages, as verl's GRPO does).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sagerl.objective import bnpo_advantages


def compute_bnpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (B, T): BNPO's (R − p)/Beta_pdf(p; α, β) per row, times the response mask.

    Args:
        token_level_rewards: (B, T) rewards; a row's outcome reward is its sum, in [0, 1].
        response_mask: (B, T) 0/1.
        index: (B,) group id (verl's ``uid``) of each row.
        config, kwargs: verl's other arguments (unused).

    Raises:
        ValueError: groups of different sizes, or rewards outside [0, 1] (BNPO models a success rate; DAPO's
            overlong penalty makes rewards negative).

    Source: Xiao et al. 2025, "BNPO: Beta Normalization Policy Optimization", arXiv 2506.02864.
    """
    scores = token_level_rewards.sum(dim=-1)
    ids, group_of_row = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    sizes = np.bincount(group_of_row)
    if len(set(sizes.tolist())) != 1:
        raise ValueError(
            f"bnpo needs groups of equal size (rollout.n each), got sizes {sorted(set(sizes.tolist()))}"
        )
    order = torch.as_tensor(np.argsort(group_of_row, kind="stable"))
    advantages = torch.empty_like(scores)
    advantages[order] = bnpo_advantages(scores[order], int(sizes[0]))
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages
