"""W-REINFORCE and its two halves, PSR and NSR: REINFORCE on the sign of correctness, no baseline, no std.

Source: Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
arXiv 2506.01347. With binary rewards, RLVR's REINFORCE objective splits into positive-sample reinforcement
(PSR: raise the likelihood of correct completions) and negative-sample reinforcement (NSR: lower that of
wrong ones). The paper finds NSR alone keeps pass@k at large k, and proposes W-REINFORCE, which weights PSR
by λ = 0.1:

    W-REINFORCE:  A = λ for a correct completion, −1 for a wrong one
    PSR:          A = +1 for a correct completion, 0 for a wrong one
    NSR:          A = 0 for a correct completion, −1 for a wrong one

With these advantages the expected update E[A·∇log π(y)] is exactly ∇(λ·P(correct) − P(wrong)) (PSR:
∇P(correct); NSR: −∇P(wrong)), which tests/objective/test_signed_advantages.py checks by enumeration.
Rewards arrive flat, (N,) with groups contiguous; NaN (unscorable) gets 0.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import POSITIVE, Setting, check_number, grouped
from sagerl.objective.passk_advantages import check_binary

LAM = Setting(
    "lam",
    "w_reinforce_lambda",
    0.1,
    "W-REINFORCE's weight λ > 0 of correct completions (the paper's 0.1).",
    POSITIVE,
)
SETTINGS = (LAM,)

SIGNED_ESTIMATORS = ("w_reinforce", "psr", "nsr")


def w_reinforce_advantages(
    rewards: torch.Tensor, group_size: int, lam: float = 0.1, kind: str = "w_reinforce"
) -> torch.Tensor:
    """(N,) advantages of W-REINFORCE (``kind="w_reinforce"``: λ if correct, −1 if wrong), PSR (+1 / 0) or
    NSR (0 / −1); see the module docstring.

    Args:
        rewards: (N,) binary rewards (0/1, NaN for unscorable: advantage 0); groups of ``group_size``
            contiguous (the grouping is only checked: the advantage of a completion does not depend on its
            group).
        lam: λ > 0, the weight of correct completions in W-REINFORCE (the paper's 0.1); unused by PSR/NSR.
        kind: one of :data:`SIGNED_ESTIMATORS`.

    Raises:
        ValueError: bad shapes, λ not a finite number > 0, an unknown kind, or rewards other than 0/1.
    """
    grouped(rewards, group_size)
    if kind not in SIGNED_ESTIMATORS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {SIGNED_ESTIMATORS}")
    check_number("lam", lam, POSITIVE)
    check_binary(rewards, kind)
    positive = {"w_reinforce": lam, "psr": 1.0, "nsr": 0.0}[kind]
    negative = {"w_reinforce": -1.0, "psr": 0.0, "nsr": -1.0}[kind]
    adv = torch.where(rewards == 1, torch.full_like(rewards, positive), torch.full_like(rewards, negative))
    return torch.where(torch.isnan(rewards), torch.zeros_like(adv), adv)
