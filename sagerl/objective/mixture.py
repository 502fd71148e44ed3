"""A per-group mixture of GRPO's advantage and Pass@k Training's (sagerl's own method, in no paper).

    A_i = (1 − w)·A_GRPO,i + w·A_pass@k,i

with A_GRPO GRPO's (r − mean)/(std + ε) (:func:`sagerl.objective.grpo_advantages`, the ``grpo`` preset's) and
A_pass@k Pass@k Training's analytic advantage (:func:`sagerl.objective.passk_advantages`), both normalised by
their group's std, so the two are on one scale. The weight w is either a constant in [0, 1], or, per group,
w = 1 − (the group's success rate c/n): the pass@k advantage where the group fails, GRPO's where it succeeds.

Why (the motivation of issue 23): with 0/1 rewards Pass@k Training gives a group zero advantage once more than
n − k of its n samples are correct, so easy prompts stop being sharpened, while GRPO keeps sharpening them and
collapses the rare modes that only the hard prompts need. The mixture keeps GRPO's pressure on the groups that
succeed and the pass@k pressure on those that fail.

What it optimises (derived here; tests/objective/test_mixture.py checks it by exact enumeration): with 0/1
rewards, any advantage that depends only on the rewards of the group (its own and the count c of correct ones)
has the expected update D(p)·∇p on a prompt of pass rate p, with

    D(p) = E_{c ~ Bin(n−1, p)}[A(correct, c + 1) − A(wrong, c)]

(:func:`sagerl.objective.prompt_weight`). Over a data set the expected update is Σ_x D(p_x)·∇p_x, the exact
gradient of Σ_x Φ(p_x) with Φ(p) = ∫₀^p D(s) ds: every such method moves each prompt's pass rate in the
direction ∇p_x and differs only in the weight D it gives the prompt at pass rate p. For a constant w the
mixture's weight is (1 − w)·D_GRPO + w·D_pass@k, so it optimises (1 − w)·Φ_GRPO + w·Φ_pass@k. For the per-group w
the weight is not such a mixture of the two (w depends on c inside the expectation):

    D_mix(p) = E[(c+1)/n · A_GRPO(1, c+1) + (1 − (c+1)/n)·A_pass@k(1, c+1)]
               − E[c/n · A_GRPO(0, c) + (1 − c/n)·A_pass@k(0, c)],   c ~ Bin(n − 1, p),

which follows Pass@k Training's weight at small p and GRPO's at large p, and is positive for every p in (0, 1)
(so Φ_mix is increasing in every prompt's pass rate). docs/methods.md tabulates D for n = 8, k = 4.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import UNIT, Setting, check_number, grouped
from sagerl.objective.advantages import grpo_advantages
from sagerl.objective.passk_advantages import K, passk_advantages

MIX_WEIGHT = Setting(
    "mix_weight",
    "passk_mix_weight",
    None,
    "passk_mix: the weight w in [0, 1] of Pass@k Training's advantage in (1 - w)·A_GRPO + w·A_pass@k; "
    "None: per group, w = 1 - the group's success rate.",
    UNIT,
    "float | None",
)
SETTINGS = (K, MIX_WEIGHT)


def check_mix_weight(mix_weight: float | None) -> None:
    """Raise ValueError unless ``mix_weight`` is None (per group) or a number in [0, 1]."""
    if mix_weight is not None:
        check_number("mix_weight", mix_weight, UNIT)


def passk_mix_advantages(
    rewards: torch.Tensor, group_size: int, k: int, mix_weight: float | None = None
) -> torch.Tensor:
    """(1 − w)·A_GRPO + w·A_pass@k (module docstring).

    Args:
        rewards: (N,) binary rewards (0/1; NaN for unscorable completions: left out of their group, advantage 0),
            groups of ``group_size`` contiguous.
        group_size: n. k: the k of Pass@k Training's advantage, 1 ≤ k ≤ n.
        mix_weight: w in [0, 1] for every group, or None: per group, w = 1 − c/n with c the group's correct
            completions and n its scorable ones.

    Returns:
        (N,) advantages in the order of ``rewards``.

    Raises:
        ValueError: bad shapes, k outside 1..n, w outside [0, 1], or rewards other than 0/1.
    """
    check_mix_weight(mix_weight)
    g = grouped(rewards, group_size)
    passk = passk_advantages(rewards, group_size, k).view_as(g)
    grpo = grpo_advantages(rewards, group_size).view_as(g)
    if mix_weight is None:
        success = torch.nan_to_num(torch.nanmean(g.double(), dim=1, keepdim=True), nan=0.0)
        w = (1.0 - success).to(g.dtype)
    else:
        w = torch.full((g.shape[0], 1), float(mix_weight), dtype=g.dtype, device=g.device)
    return ((1.0 - w) * grpo + w * passk).reshape(-1)
