"""MaxPO: max@K advantages with a leave-two-out baseline (Takashiro, Nishimori, Parmas et al. 2026, "On Advantage
Estimates for Max@K Policy Gradients", arXiv 2606.06080; the co-authors' code: nissymori/ReMAC,
``brax/remax_utils.py`` ``compute_batch_ei`` and ``compute_l2o_baseline``, and paavo5/ordergrad).

For a group of n completions with rewards r_1..r_n (any real values), max@K is the expected best reward of K
independent draws, and its gradient is K·E_y[∇log π(y)·EI(y)] with EI(y) = E[(r(y) − M_{K−1})₊], M_{K−1} the best
of K − 1 other draws (the other draws' own max is a constant that the baseline absorbs). In a group, the
without-replacement estimate of EI for completion i compares it with K − 1 of the other n − 1 completions:

    EI_i = (1/C(n−1, K−1)) · Σ_{S ⊆ [n]∖{i}, |S| = K−1} (r_i − max_{j ∈ S} r_j)₊
         = Σ_{ℓ: r_ℓ < r_i} (r_i − r_ℓ) · C(c_ℓ, K−2)/C(n−1, K−1),

c_ℓ the number of the other completions ranked below ℓ (ascending order, ties in any fixed order). K·EI_i is
PKPO's advantage with its leave-one-out-minus-one baseline (:func:`sagerl.objective.pkpo_advantages`): unbiased for
∇max@K, but not centred (an all-correct-but-one group's advantages do not sum to 0).

MaxPO's leave-two-out (L2O) baseline for completion i is the mean over the other completions j of j's EI computed
without i (its K − 1 comparators drawn from the n − 2 completions other than i and j):

    b_i = (1/(n−1)) · Σ_{j ≠ i} EI_j^{(−i)},     A_i = K·(EI_i − b_i).

b_i does not depend on y_i, so the estimate stays unbiased, and Σ_i b_i = Σ_i EI_i (averaging over the left-out i
makes j's comparators a uniform (K−1)-subset of its n − 1 others), so every group's advantages sum to exactly 0.
Both terms cost O(n²) per group (the authors' quadratic-time form). K = 1 has no comparator: EI_i is r_i up to a
constant, and MaxPO is the leave-one-out baseline, A_i = r_i − mean_{j≠i} r_j (RLOO).
"""

from __future__ import annotations

import math

import torch

from sagerl.objective._checks import Range, check_number, grouped
from sagerl.objective.passk_advantages import K

SETTINGS = (K,)
"""MaxPO reads the k of pass@k's estimators (:data:`sagerl.objective.passk_advantages.K`)."""


def _check_k(k: int, group_size: int) -> None:
    check_number("k", k, Range(1, max(group_size - 1, 1), integer=True))
    if group_size < 2:
        raise ValueError(f"maxpo needs group_size >= 2 (a leave-two-out baseline), got {group_size}")


def _maxpo_group(values: list[float], k: int) -> list[float]:
    """A_i = K·(EI_i − b_i) for one group (no NaN, n ≥ k + 1), in input order, in O(n²).

    With the rewards in ascending order v_0 ≤ … ≤ v_{n−1} and D[j, ℓ] = (v_j − v_ℓ)₊ (nonzero only for ℓ ranked
    below j): EI_j = Σ_ℓ D[j, ℓ]·C(ℓ, K−2)/C(n−1, K−1), and j's EI without i sees ℓ − [i < ℓ] comparators below ℓ,
    so b_i = Σ_{ℓ ≠ i} C(ℓ − [i < ℓ], K−2)/C(n−2, K−1) · Σ_{j ≠ i} D[j, ℓ]/(n − 1)."""
    n = len(values)
    x = torch.tensor(values, dtype=torch.float64)
    if k == 1:
        return (x - (x.sum() - x) / (n - 1)).tolist()
    v, order = torch.sort(x, stable=True)
    diff = (v[:, None] - v[None, :]).clamp(min=0.0)  # D[j, ℓ]
    rank = torch.arange(n)
    comb = torch.tensor([float(math.comb(m, k - 2)) for m in range(n)], dtype=torch.float64)
    ei = diff @ comb / math.comb(n - 1, k - 1)
    below = rank[None, :] - (rank[:, None] < rank[None, :]).long()  # [i, ℓ]: ℓ − [i < ℓ]
    weights = comb[below.clamp(min=0)] / math.comb(n - 2, k - 1)
    weights.fill_diagonal_(0.0)
    others = (diff.sum(dim=0)[None, :] - diff) / (n - 1)  # [i, ℓ]: Σ_{j ≠ i} D[j, ℓ]/(n − 1)
    baseline = (weights * others).sum(dim=1)
    out = torch.empty_like(x)
    out[order] = k * (ei - baseline)
    return out.tolist()


def maxpo_advantages(rewards: torch.Tensor, group_size: int, k: int) -> torch.Tensor:
    """MaxPO's advantages A_i = K·(EI_i − b_i^{L2O}) (module docstring; arXiv 2606.06080).

    The advantages carry the factor K, so that the group mean of A_i·∇log π(y_i) is an unbiased estimate of ∇max@K
    itself (for 0/1 rewards, ∇pass@K), on the scale of :func:`sagerl.objective.pkpo_advantages` (whose
    ``loo_minus_one`` advantages are K·EI_i: the two differ by the baseline K·b_i only). The authors'
    ``compute_batch_ei`` and ``compute_l2o_baseline`` return EI_i and b_i without K, a constant factor at a fixed K
    that the learning rate absorbs; with a k schedule it is not constant, and sagerl keeps the gradient's scale.
    No std normalisation (as the authors' code).

    For 0/1 rewards, with c correct of n: a correct completion has EI = C(n−c, K−1)/C(n−1, K−1) and
    b = ((c−1)/(n−1))·C(n−c, K−1)/C(n−2, K−1); a wrong one EI = 0 and b = (c/(n−1))·C(n−c−1, K−1)/C(n−2, K−1).
    A group whose rewards are all equal gets 0.

    Args:
        rewards: (N,) rewards, any real values (NaN: an unscorable completion, left out of its group, advantage
            0); groups of ``group_size`` contiguous.
        group_size: n ≥ 2.
        k: K, an integer in [1, n − 1] (the L2O baseline compares j with K − 1 of the n − 2 completions other
            than i and j). A group with K or fewer scorable completions gets 0.

    Returns:
        (N,) advantages in the order of ``rewards``; each group's sum to 0.

    Raises:
        ValueError: bad shapes, n < 2, or k not an integer in [1, n − 1] (one line naming k and the range).
    """
    g = grouped(rewards, group_size)
    _check_k(k, group_size)
    out = torch.zeros_like(g, dtype=torch.float64)
    for row, values in enumerate(g.tolist()):
        cols = [col for col, v in enumerate(values) if not math.isnan(v)]
        if len(cols) <= k:
            continue
        for col, a in zip(cols, _maxpo_group([values[c] for c in cols], k), strict=True):
            out[row, col] = a
    return out.to(rewards.dtype).reshape(-1)
