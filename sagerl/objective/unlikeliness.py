"""The unlikeliness reward: correct but unlikely completions earn more than correct likely ones.

Source: He et al. 2025, "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening",
arXiv 2506.02355. GRPO sharpens the policy onto the completions it already finds likely; the unlikeliness
reward scales each completion's reward by its likelihood rank in its group before GRPO's normalisation:

    r'_i = r_i · (1 − β_rank · rank_i / G)

with rank_i the completion's place among the G completions of its group when they are sorted by their
mean log π_old per token, 0 for the least likely (which keeps its reward) and G − 1 for the most likely
(β_rank = 0.25 in the paper). The advantages are then GRPO's, (r' − mean)/(std + ε) per group. As in the
authors' code, groups whose raw rewards are all equal are dropped (advantage 0): an all-correct group
would otherwise turn its rank penalty into advantages of both signs without any correctness signal.
Ties in likelihood keep the completions' order in the group (stable sort).
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import UNIT, Setting, check_number, grouped
from sagerl.objective.advantages import grpo_advantages
from sagerl.objective.dapo import dynamic_sampling_mask

BETA_RANK = Setting(
    "beta_rank",
    "unlikeliness_beta",
    0.25,
    "The unlikeliness reward's β_rank in [0, 1] (the paper's 0.25).",
    UNIT,
)
SETTINGS = (BETA_RANK,)


def likelihood_ranks(sequence_logp: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) rank of each completion in its group by ``sequence_logp``, 0 for the least likely, as float.

    Args:
        sequence_logp: (N,) mean log π_old per completion token (nats), groups contiguous; NaN sorts first.
    """
    g = grouped(sequence_logp, group_size, name="sequence_logp")
    keys = torch.nan_to_num(g.double(), nan=-float("inf"))
    order = torch.sort(keys, dim=1, stable=True).indices
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(group_size, device=g.device).expand_as(order))
    return ranks.reshape(-1).to(sequence_logp.dtype)


def unlikeliness_rewards(
    rewards: torch.Tensor, sequence_logp: torch.Tensor, group_size: int, beta_rank: float = 0.25
) -> torch.Tensor:
    """(N,) shaped rewards r·(1 − β_rank·rank/G) (module docstring).

    Raises:
        ValueError: bad shapes or β_rank outside [0, 1].
    """
    check_number("beta_rank", beta_rank, UNIT)
    grouped(rewards, group_size)
    if sequence_logp.shape != rewards.shape:
        raise ValueError(
            f"sequence_logp has shape {tuple(sequence_logp.shape)}, rewards {tuple(rewards.shape)}"
        )
    ranks = likelihood_ranks(sequence_logp, group_size)
    return rewards * (1.0 - beta_rank * ranks / group_size)


def unlikeliness_advantages(
    rewards: torch.Tensor,
    group_size: int,
    sequence_logp: torch.Tensor,
    beta_rank: float = 0.25,
    drop_equal_groups: bool = True,
    scale: str = "group",
) -> torch.Tensor:
    """GRPO advantages of the unlikeliness reward (module docstring).

    Args:
        rewards: (N,) rewards (NaN for unscorable: left out of the statistics, advantage 0), groups of
            ``group_size`` contiguous.
        sequence_logp: (N,) mean log π_old per completion token, nats (the sampling policy's).
        beta_rank: β_rank ∈ [0, 1] (the paper's 0.25).
        drop_equal_groups: give 0 to groups whose raw rewards are all equal, as the authors' code does.
        scale: GRPO's std scaling (:func:`sagerl.objective.grpo_advantages`).

    Returns:
        (N,) advantages in the order of ``rewards``.

    Raises:
        ValueError: bad shapes or β_rank outside [0, 1].
    """
    shaped = unlikeliness_rewards(rewards, sequence_logp, group_size, beta_rank)
    adv = grpo_advantages(shaped, group_size, scale=scale)
    if drop_equal_groups:
        adv = torch.where(dynamic_sampling_mask(rewards, group_size), adv, torch.zeros_like(adv))
    return adv
