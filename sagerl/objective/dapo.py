"""DAPO helpers: dynamic sampling and overlong reward shaping.

Source: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import COUNT, NONNEGATIVE, Range, check_number, grouped


def dynamic_sampling_mask(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Keep-mask of DAPO's dynamic sampling: drop every group whose rewards are all equal.

    Such groups (all right or all wrong) have zero advantage and only dilute the token-mean. DAPO then
    samples more prompts to refill the batch (:mod:`sagerl.train.refill`); the groups still equal after the
    last round are dropped from the loss with this mask. NaN rewards are ignored; an all-NaN group is
    dropped.

    Args:
        rewards: (N,) rewards, groups of ``group_size`` contiguous.

    Returns:
        (N,) bool, True for completions of kept groups.
    """
    g = grouped(rewards, group_size)
    nan = torch.isnan(g)
    hi = torch.where(nan, torch.full_like(g, -float("inf")), g).max(dim=1).values
    lo = torch.where(nan, torch.full_like(g, float("inf")), g).min(dim=1).values
    keep = hi > lo  # False for constant groups and for all-NaN groups (-inf > inf is False)
    return keep.repeat_interleave(group_size)


ZERO_ADVANTAGE_ATOL = 1e-6
"""An advantage at most this in absolute value (reward units) counts as zero in :func:`zero_advantage_mask`: the
float rounding of a group's terms that cancel (a leave-one-out mean of equal bonuses, r·div − mean(r·div) with
equal factors) is far below it."""


def zero_advantage_mask(
    advantages: torch.Tensor, group_size: int, atol: float = ZERO_ADVANTAGE_ATOL
) -> torch.Tensor:
    """Keep-mask of dynamic sampling for an estimator whose advantages can be nonzero on a group of equal
    rewards (:data:`sagerl.objective.SIGNAL_ON_EQUAL_REWARDS`: DARLING, the outcome-based bonuses): drop every
    group whose advantages are all zero (|A| <= ``atol``), that is, the groups that give no gradient, as DAPO's
    filter drops them for the estimators of the rewards alone (their advantages vanish exactly on the groups of
    equal rewards). A group of equal rewards that carries a bonus (an all-wrong group whose answers differ, under
    UCB) is kept; a group whose bonus is constant but nonzero (UCB-Con's b − b₀ on fresh answers) is kept too,
    since it moves the policy.

    Args:
        advantages: (N,) advantages, groups of ``group_size`` contiguous (NaN counts as zero).
        atol: the largest |A| that counts as zero, >= 0 (:data:`ZERO_ADVANTAGE_ATOL`).

    Returns:
        (N,) bool, True for completions of kept groups.

    Raises:
        ValueError: bad shapes, ±inf, or ``atol`` not a finite number >= 0.
    """
    check_number("atol", atol, NONNEGATIVE)
    g = torch.nan_to_num(grouped(advantages, group_size, name="advantages"), nan=0.0)
    keep = (g.abs() > atol).any(dim=1)
    return keep.repeat_interleave(group_size)


def overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer_length: int, penalty_factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment, in reward units.

    ``min(−(L − (L_max − L_buf)) / L_buf · factor, 0)``: 0 up to L_max − L_buf tokens, then a linear ramp
    down to −factor at L_max, and −factor beyond (as DAPO; the trainer never exceeds L_max anyway).

    Args:
        lengths: (N,) completion lengths in tokens.
        max_length: L_max, the generation budget in tokens. buffer_length: L_buf, the ramp length in tokens.
        penalty_factor: the penalty at L_max.

    Returns:
        (N,) float penalties ≤ 0.

    Raises:
        ValueError: ``max_length`` not an integer >= 1, ``buffer_length`` not an integer in [1, max_length], or
            ``penalty_factor`` not a finite number >= 0.
    """
    check_number("max_length", max_length, COUNT)
    check_number("buffer_length", buffer_length, Range(1, max_length, integer=True))
    check_number("penalty_factor", penalty_factor, NONNEGATIVE)
    excess = lengths.to(torch.float32) - (max_length - buffer_length)
    penalty = -excess / buffer_length * penalty_factor
    return penalty.clamp(min=-penalty_factor, max=0.0)
