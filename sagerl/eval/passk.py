"""The unbiased pass@k estimator and bootstrap confidence intervals over problems.

Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (Codex paper), eq. 1 and
its numerically stable product form. For one problem with ``n`` samples of which ``c`` are correct,

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

is the probability that at least one of ``k`` samples drawn *without replacement* from the ``n`` is
correct (:func:`pass_at_k`, the one of :mod:`sagerl.objective`, which the pass@k advantages use too). It is
unbiased for the true pass@k of the model, unlike "any correct among the first k"
(high variance) or ``1 - (1 - c/n)^k`` (biased). The dataset value is the mean over problems.

Confidence intervals resample *problems* with replacement (percentile bootstrap, fixed seed), so they
express uncertainty about the problem set, the dominant source of variance on small sets like AIME (30).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "bootstrap_average_ci",
    "bootstrap_ci",
    "bootstrap_means",
    "ks_up_to",
    "mixed_group_share",
    "pass_at_k",
    "pass_at_k_matrix",
    "percentile_ci",
]

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 1234
CONFIDENCE = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem, ``1 - C(n-c, k) / C(n, k)``: :func:`sagerl.objective.pass_at_k`, the one
    estimator of sagerl (with its check), imported on the first call so that ``import sagerl.eval`` needs no
    torch.

    Args:
        n: samples drawn for the problem (an integer >= 1).
        c: how many of them are correct (an integer in [0, n]).
        k: the budget (an integer in [1, n]).

    Returns:
        A probability in [0, 1]: 0 when c = 0, 1 when n - c < k.

    Raises:
        ValueError: an argument that is not an integer in its range (one line: the argument, the value, the
            range).
    """
    from sagerl.objective.passk_advantages import pass_at_k as estimate

    return estimate(n, c, k)


def _integer(x: object, low: int, high: float = float("inf")) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and low <= x <= high


def _check(ok: bool, name: str, value: object, **bounds) -> None:
    """Unless ``ok``, check ``value`` against ``Range(**bounds)`` with :func:`sagerl.objective.check_number` (the
    one-line error naming the argument, the value and the range). ``ok`` is a quick test, at least as strict as
    the range, made here so that a valid call imports no torch (``import sagerl.objective`` does)."""
    if not ok:
        from sagerl.objective import Range, check_number

        check_number(name, value, Range(**bounds))


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
        ValueError: as :func:`pass_at_k` (its check, on n, every k and the first count out of range).
    """
    c = np.asarray(correct).reshape(-1)
    _check(_integer(n, 1), "n", n, low=1, integer=True)
    for k in ks:
        _check(_integer(k, 1, n), "k", k, low=1, high=n, integer=True)
    if c.size and not (np.issubdtype(c.dtype, np.integer) and c.min() >= 0 and c.max() <= n):
        for count in c.tolist():
            _check(False, "c", count, low=0, high=n, integer=True)
    c = c.astype(np.int64)
    ks = [int(k) for k in ks]
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


def mixed_group_share(n: int, correct: Sequence[int] | np.ndarray, group_size: int) -> float:
    """The expected share of problems whose group of ``group_size`` rollouts is *mixed* (some correct, some
    wrong): the groups in which GRPO-family advantages are not all zero.

    For one problem with ``c`` of ``n`` samples correct, a group drawn without replacement is all wrong with
    probability 1 - pass@g(c) and all correct with probability 1 - pass@g(n - c), so

        P(mixed) = pass@g(c) + pass@g(n - c) - 1

    (unbiased, as pass@k; with g = n it is the indicator 0 < c < n). Returns the mean over problems.

    Args:
        n: samples per problem.
        correct: per-problem correct counts, shape (P,), each in [0, n]; at least one problem.
        group_size: g, in [1, n] (a group of 1 is never mixed).

    Raises:
        ValueError: as :func:`pass_at_k_matrix`, or no problems.
    """
    c = np.asarray(correct).reshape(-1)
    if c.size == 0:
        raise ValueError("correct: give the counts of at least one problem")
    hit = pass_at_k_matrix(n, c, [group_size])[:, 0]
    miss = pass_at_k_matrix(n, n - c.astype(np.int64), [group_size])[:, 0]
    return float(np.mean(np.clip(hit + miss - 1.0, 0.0, 1.0)))


def ks_up_to(n: int) -> list[int]:
    """The reported budgets: 1, 2, 4, ... (powers of two up to n), plus n itself when it is not one.

    Raises:
        ValueError: n not an integer >= 1.
    """
    _check(_integer(n, 1), "n", n, low=1, integer=True)
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

    Raises:
        ValueError: no problem, or ``resamples`` not an integer >= 1.
    """
    _check(_integer(resamples, 1), "resamples", resamples, low=1, integer=True)
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
    """Percentile interval of bootstrap replicates, shape (B, K) -> (K, 2) with [low, high] rows.

    Raises:
        ValueError: ``confidence`` not in (0, 1).
    """
    ok = isinstance(confidence, float | int) and not isinstance(confidence, bool) and 0 < confidence < 1
    _check(ok, "confidence", confidence, low=0, high=1, low_open=True, high_open=True)
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
    """Percentile bootstrap CI of the mean over problems of ``values`` (P, K) -> (K, 2) [low, high].

    Raises:
        ValueError: as :func:`bootstrap_means` and :func:`percentile_ci`, or ``seed`` not an integer >= 0.
    """
    _check(_integer(seed, 0), "seed", seed, low=0, integer=True)
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

    Raises:
        ValueError: as :func:`bootstrap_ci`.
    """
    _check(_integer(seed, 0), "seed", seed, low=0, integer=True)
    rng = np.random.default_rng(seed)
    reps = [bootstrap_means(v, resamples=resamples, rng=rng) for v in per_dataset]
    return percentile_ci(np.mean(np.stack(reps, axis=0), axis=0), confidence)
