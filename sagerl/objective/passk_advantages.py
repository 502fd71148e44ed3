"""Advantages that optimise pass@k instead of pass@1, from the rewards of a group of n completions.

Rewards arrive flat, (N,) with N = (number of groups) × n and each group contiguous, as TRL produces them.
NaN marks an unscorable completion: it is left out of its group (the group then has fewer samples) and gets
advantage 0. Two estimators:

- :func:`passk_advantages`: Pass@k Training's analytic advantage (Chen et al. 2025, arXiv 2508.10751), a
  group-normalised advantage of the pass@k reward, for binary rewards.
- :func:`pkpo_advantages`: Pass@k Policy Optimization (Walder & Karkhanis 2025, arXiv 2505.15201), the
  unbiased estimator of ∇pass@k (binary rewards) or of ∇maxg@k (any rewards), with the paper's
  leave-one-out baselines.

How the two relate (derived here; tests/objective/test_passk_advantages.py checks it): with ρ̄ the group's
pass@k estimate and s_i PKPO's un-baselined weights, Pass@k Training's advantage is
((n/k)·s_i − ρ̄)/σ: PKPO's weights with the group's own pass@k estimate as baseline, divided by its std.
That baseline depends on y_i, so the result is not an unbiased estimate of ∇pass@k (it is centred: it sums
to 0 over the group).
"""

from __future__ import annotations

import math

import torch

from sagerl.objective._checks import COUNT, Range, Setting, check_number, grouped

PKPO_BASELINES = ("loo_minus_one", "loo", "none")
K = Setting(
    "k",
    "passk_k",
    4,
    "k of the passk, pkpo, maxpo and passk_mix advantages (1 <= k <= num_generations; maxpo: "
    "<= num_generations - 1); with a passk_k_schedule, k at the first optimizer step.",
    COUNT,
    "int",
)
"""The k of pass@k (max@k), shared by every estimator that reads one; the engines schedule it
(``passk_k_schedule``)."""
PKPO_BASELINE = Setting(
    "baseline",
    "pkpo_baseline",
    "loo_minus_one",
    f"PKPO's baseline: one of {PKPO_BASELINES}.",
    PKPO_BASELINES,
    "str",
)
SETTINGS = (K, PKPO_BASELINE)
"""The settings this module's estimators read (:class:`sagerl.objective._checks.Setting`)."""


def _check_k(k: int, group_size: int) -> None:
    check_number("k", k, Range(1, group_size, integer=True))


def check_binary(rewards: torch.Tensor, method: str) -> None:
    """Raise ValueError unless every non-NaN reward is exactly 0 or 1 (the methods defined on correctness)."""
    finite = rewards[~torch.isnan(rewards)]
    bad = finite[(finite != 0) & (finite != 1)]
    if bad.numel():
        raise ValueError(
            f"{method} is defined for binary rewards (0 or 1 per completion), got {bad[0].item():g}; "
            "drop reward shaping (format reward, DAPO's overlong penalty) or use another advantage estimator"
        )


def check_pass_at_k(n: int, c: int, k: int) -> None:
    """Raise ValueError (one line: the argument, its value, its range) unless n is an integer >= 1, c an
    integer in [0, n] and k an integer in [1, n]."""
    check_number("n", n, COUNT)
    check_number("c", c, Range(0, n, integer=True))
    check_number("k", k, Range(1, n, integer=True))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate 1 − C(n−c, k)/C(n, k) from n samples with c correct (Chen et al. 2021,
    "Evaluating Large Language Models Trained on Code", Eq. 1): the probability that at least one of k samples
    drawn without replacement from the n is correct.

    Exact for any n: the binomial coefficients are Python integers and their ratio is rounded once (C(256, 128)
    alone is ~1e75). The one pass@k of sagerl: :mod:`sagerl.eval` (the harness) and the pass@k advantages use it.

    Args:
        n: samples drawn (an integer >= 1). c: how many are correct (an integer in [0, n]).
        k: the budget (an integer in [1, n]).

    Returns:
        A probability in [0, 1]: 0 when c = 0, 1 when n − c < k (every k-subset holds a correct sample).

    Raises:
        ValueError: an argument that is not an integer in its range (the message names it, its value and
            the range).
    """
    check_pass_at_k(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def passk_advantages(rewards: torch.Tensor, group_size: int, k: int) -> torch.Tensor:
    """Pass@k Training's analytic advantage (Chen et al. 2025, arXiv 2508.10751, the analytical derivation).

    In a group of n completions with c correct, ρ̄ = 1 − C(n−c, k)/C(n, k) is the group's pass@k and
    σ = √(ρ̄(1 − ρ̄)) its std; then

        correct:  A = (1 − ρ̄) / σ
        wrong:    A = (1 − ρ̄ − C(n−c−1, k−1)/C(n−1, k−1)) / σ

    and every advantage of the group is 0 where σ = 0: no correct completion (c = 0), or too few wrong
    ones to fill a k-subset (n − c < k, so every subset succeeds). The advantages of a group sum to 0.
    k = 1 gives GRPO's advantage with the population std ((r − p)/√(p(1 − p))).

    Args:
        rewards: (N,) binary rewards (0/1; NaN for unscorable completions, left out of their group),
            groups of ``group_size`` contiguous.
        group_size: n, the completions per prompt.
        k: the k of pass@k, 1 ≤ k ≤ n. A group with fewer than k scorable completions gets 0.

    Returns:
        (N,) advantages, in the order of ``rewards``.

    Raises:
        ValueError: bad shapes, k outside 1..n, or rewards other than 0/1.
    """
    g = grouped(rewards, group_size)
    _check_k(k, group_size)
    check_binary(rewards, "the passk advantage")
    out = torch.zeros_like(g, dtype=torch.float64)
    for row, values in enumerate(g.tolist()):
        valid = [v for v in values if not math.isnan(v)]
        n, c = len(valid), int(sum(valid))
        if n < k:
            continue
        rho = pass_at_k(n, c, k)
        sigma = math.sqrt(max(rho * (1.0 - rho), 0.0))
        if sigma == 0.0:
            continue
        wrong_share = math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1) if n - c >= 1 else 0.0
        for col, v in enumerate(values):
            if math.isnan(v):
                continue
            out[row, col] = (1.0 - rho - (0.0 if v == 1 else wrong_share)) / sigma
    return out.to(rewards.dtype).reshape(-1)


def _max_at_k(values: list[float], k: int) -> float:
    """The unbiased maxg@k estimate from ``values`` (ascending): the mean over every k-subset of its max,
    Σ_m v_(m)·C(m−1, k−1)/C(n, k) (1-based sorted positions). k = 0 gives 0."""
    n = len(values)
    if k == 0 or n < k:
        return 0.0
    total = math.comb(n, k)
    return sum(v * math.comb(m, k - 1) for m, v in enumerate(values)) / total


def _pkpo_group(values: list[float], k: int, baseline: str) -> list[float]:
    """PKPO's weights s_i for one group (no NaN), in input order. See :func:`pkpo_advantages`."""
    n = len(values)
    order = sorted(range(n), key=lambda i: values[i])
    v = [values[i] for i in order]  # ascending
    total = math.comb(n, k)
    # s_(j) = [v_(j)·C(j−1, k−1) + Σ_{m>j} v_(m)·C(m−2, k−2)] / C(n, k), sorted positions j, m from 1
    tail = [0.0] * (n + 1)  # tail[j] = Σ_{m > j} v_(m)·C(m−2, k−2), with 0-based m here (C(m−1, k−2))
    if k >= 2:
        for m in range(n - 1, -1, -1):
            tail[m] = tail[m + 1] + (v[m + 1] * math.comb(m, k - 2) if m + 1 < n else 0.0)
    s_sorted = [(v[j] * math.comb(j, k - 1) + (tail[j] if k >= 2 else 0.0)) / total for j in range(n)]
    s = [0.0] * n
    for position, i in enumerate(order):
        s[i] = s_sorted[position]
    if baseline == "none":
        return s
    out = []
    for i in range(n):
        others = [values[j] for j in order if j != i]  # ascending
        if baseline == "loo":
            # the mean over j ≠ i of s_j computed on the other n − 1 samples: k·maxg@k(others)/(n − 1)
            out.append(s[i] - k * _max_at_k(others, k) / (n - 1))
        else:  # loo_minus_one: each k-subset's max less the max of its other k − 1 members
            out.append(s[i] - (k / n) * _max_at_k(others, k - 1))
    return out


def pkpo_advantages(
    rewards: torch.Tensor, group_size: int, k: int, baseline: str = "loo_minus_one"
) -> torch.Tensor:
    """PKPO's advantages: A_i = n·s_i, so that the group mean of A_i·∇log π(y_i) estimates ∇pass@k.

    Walder & Karkhanis (2025, arXiv 2505.15201). For n samples of a group with rewards g_i, the unbiased
    maxg@k estimate averages the max over every k-subset S (for binary rewards, the pass@k estimate
    1 − C(n−c, k)/C(n, k)), and its gradient is estimated without bias by Σ_i s_i ∇log π(y_i) with

        s_i = (1/C(n, k)) · Σ_{S ∋ i, |S| = k} max_{j ∈ S} g_j                      (baseline "none")

    (binary rewards: s_i = k/n when y_i is correct, (k/n)·ρ(n−1, c, k−1) when wrong, with
    ρ(n, c, k) = 1 − C(n−c, k)/C(n, k)). Baselines that depend only on the other samples keep it unbiased:

    - ``"loo_minus_one"`` (the paper's recommended estimator, its Eq. 33): every subset's max less the max
      of its other k − 1 members, s_i − (k/n)·maxg@(k−1)(y_{−i}). For binary rewards a wrong completion
      gets 0 and a correct one k·C(n−c, k−1)/C(n−1, k−1)/n; an all-correct or all-wrong group gets 0. For
      k = 1 it is the reward itself (no baseline).
    - ``"loo"`` (Eq. 29): s_i less the mean over j ≠ i of s_j computed on the other n − 1 samples,
      k·maxg@k(y_{−i})/(n − 1) (needs n − 1 ≥ k; otherwise the baseline is 0). Not centred: an all-correct
      group gets k/n − k/(n − 1) < 0 each.

    The returned advantages are n·s_i (the trainer averages over completions, so the step follows the
    estimate of ∇pass@k itself); there is no std normalisation. tests/objective/test_passk_advantages.py
    checks by exact enumeration of every group of outcomes on a bandit that E[(1/n) Σ_i A_i ∇log π(y_i)]
    equals ∇pass@k, for every baseline.

    Args:
        rewards: (N,) rewards, any real values (the paper's maxg@k generalisation; binary rewards give
            pass@k); NaN for unscorable completions (left out of their group, advantage 0). Groups of
            ``group_size`` contiguous.
        group_size: n. k: 1 ≤ k ≤ n; a group with fewer than k scorable completions gets 0.
        baseline: one of :data:`PKPO_BASELINES`.

    Returns:
        (N,) advantages in the order of ``rewards``.

    Raises:
        ValueError: bad shapes, k outside 1..n, or an unknown baseline.
    """
    g = grouped(rewards, group_size)
    _check_k(k, group_size)
    if baseline not in PKPO_BASELINES:
        raise ValueError(f"unknown PKPO baseline {baseline!r}; expected one of {PKPO_BASELINES}")
    out = torch.zeros_like(g, dtype=torch.float64)
    for row, values in enumerate(g.tolist()):
        cols = [col for col, v in enumerate(values) if not math.isnan(v)]
        n = len(cols)
        if n < k:
            continue
        if baseline == "loo" and n - 1 < k:
            weights = _pkpo_group([values[c] for c in cols], k, "none")
        else:
            weights = _pkpo_group([values[c] for c in cols], k, baseline)
        for col, w in zip(cols, weights, strict=True):
            out[row, col] = n * w
    return out.to(rewards.dtype).reshape(-1)
