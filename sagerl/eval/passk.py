"""The unbiased pass@k estimator and bootstrap confidence intervals over problems.

Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (Codex paper), eq. 1 and
its numerically stable product form. For one problem with ``n`` samples of which ``c`` are correct,

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

is the probability that at least one of ``k`` samples drawn *without replacement* from the ``n`` is
correct. It is unbiased for the true pass@k of the model, unlike "any correct among the first k"
(high variance) or ``1 - (1 - c/n)^k`` (biased). The dataset value is the mean over problems.

Confidence intervals resample *problems* with replacement (percentile bootstrap, fixed seed), so they
express uncertainty about the problem set, the dominant source of variance on small sets like AIME (30).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 1234
CONFIDENCE = 0.95


def _check(n: int, c: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"pass@k needs n >= 1 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if k > n:
        raise ValueError(f"pass@k needs k <= n, got k={k} > n={n} (draw more samples per problem)")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021).

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which never forms a binomial coefficient and so
    stays exact to float precision for any n (C(256, 128) alone is ~1e75).

    Args:
        n: samples drawn for the problem (>= 1).
        c: how many of them are correct (0 <= c <= n).
        k: the budget (1 <= k <= n).

    Returns:
        A probability in [0, 1]: 0 when c = 0, 1 when n - c < k (every k-subset holds a correct sample).

    Raises:
        ValueError: k > n, k < 1, c outside [0, n], or n < 1.
    """
    n, c, k = int(n), int(c), int(k)
    _check(n, c, k)
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_matrix(n: int, correct: Sequence[int] | np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Vectorised :func:`pass_at_k` for many problems and many k at once.

    Args:
        n: samples per problem (the same for every problem).
        correct: per-problem correct counts, shape (P,), each in [0, n].
        ks: budgets, each in [1, n].

    Returns:
        float64 array of shape (P, len(ks)); entry [p, j] = pass_at_k(n, correct[p], ks[j]).

    Uses suffix products: for a fixed k, S[j] = prod_{i=j+1}^{n} (1 - k/i), so pass@k(c) = 1 - S[n-c]
    when n - c >= k. Cost O(n * len(ks) + P * len(ks)).

    Raises:
        ValueError: as :func:`pass_at_k`.
    """
    c = np.asarray(correct, dtype=np.int64).reshape(-1)
    ks = [int(k) for k in ks]
    for k in ks:
        _check(n, 0, k)
    if c.size and (c.min() < 0 or c.max() > n):
        raise ValueError(f"pass@k needs 0 <= c <= n={n}, got counts in [{c.min()}, {c.max()}]")
    out = np.empty((c.size, len(ks)), dtype=np.float64)
    i = np.arange(1, n + 1, dtype=np.float64)
    for j, k in enumerate(ks):
        factors = 1.0 - k / i  # factor for i = 1..n
        # suffix[m] = prod_{i=m+1}^{n} factors (suffix[n] = 1, the empty product)
        suffix = np.ones(n + 1, dtype=np.float64)
        suffix[:n] = np.cumprod(factors[::-1])[::-1]
        vals = 1.0 - suffix[n - c]
        out[:, j] = np.where(n - c < k, 1.0, vals)
    return out


def ks_up_to(n: int) -> list[int]:
    """The reported budgets: 1, 2, 4, ... (powers of two up to n), plus n itself when it is not one."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks


def bootstrap_means(
    values: np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES, rng: np.random.Generator
) -> np.ndarray:
    """Means of ``values`` over problems resampled with replacement.

    Args:
        values: per-problem values, shape (P, K), P >= 1.
        resamples: number of bootstrap replicates B.
        rng: the random generator (callers fix its seed).

    Returns:
        array of shape (B, K): the mean over each resampled problem set.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    p = values.shape[0]
    if p == 0:
        raise ValueError("bootstrap needs at least one problem")
    idx = rng.integers(0, p, size=(resamples, p))
    # (B, P, K) would be large for big sets; sum column by column instead.
    return np.stack([values[idx, j].mean(axis=1) for j in range(values.shape[1])], axis=1)


def percentile_ci(replicates: np.ndarray, confidence: float = CONFIDENCE) -> np.ndarray:
    """Percentile interval of bootstrap replicates, shape (B, K) -> (K, 2) with [low, high] rows."""
    alpha = (1.0 - confidence) / 2.0
    lo = np.quantile(replicates, alpha, axis=0)
    hi = np.quantile(replicates, 1.0 - alpha, axis=0)
    return np.stack([lo, hi], axis=1)


def bootstrap_ci(
    values: np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
    """Percentile bootstrap CI of the mean over problems of ``values`` (P, K) -> (K, 2) [low, high]."""
    rng = np.random.default_rng(seed)
    return percentile_ci(bootstrap_means(values, resamples=resamples, rng=rng), confidence)


def bootstrap_average_ci(
    per_dataset: Sequence[np.ndarray],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
    """CI of the unweighted average across datasets of per-dataset means.

    Each replicate resamples problems *within* each dataset, takes each dataset's mean, then averages
    the datasets with equal weight (as the paper averages AIME, AMC and MATH-500).

    Args:
        per_dataset: one (P_d, K) array per dataset, the same K for all.

    Returns:
        (K, 2) array of [low, high].
    """
    rng = np.random.default_rng(seed)
    reps = [bootstrap_means(v, resamples=resamples, rng=rng) for v in per_dataset]
    return percentile_ci(np.mean(np.stack(reps, axis=0), axis=0), confidence)
