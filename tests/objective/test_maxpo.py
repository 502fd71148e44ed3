"""MaxPO (arXiv 2606.06080): its subset definition, the co-authors' code's values, closed forms for 0/1 rewards,
exact centring, and by exact enumeration on a bandit, that the expected update is ∇max@K."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from bandit import bandit, exact_expected_update

from sagerl.objective import compute_advantages, maxpo_advantages, pkpo_advantages

# a tie (0.5, 0.5): ranked in any fixed order, the two get the same advantages
REWARDS = [0.3, 0.9, 0.1, 0.5, 0.7, 0.5]


def _subset_definition(values: list[float], k: int) -> list[float]:
    """K·(EI_i − b_i) by enumerating every comparator set: EI_j over the (K−1)-subsets of j's comparators (K = 1:
    the reward), b_i the mean over j ≠ i of EI_j with i left out of every comparator set."""
    n = len(values)

    def ei(j: int, pool: list[int]) -> float:
        if k == 1:
            return values[j]
        subsets = list(itertools.combinations(pool, k - 1))
        return sum(max(values[j] - max(values[s] for s in S), 0.0) for S in subsets) / len(subsets)

    out = []
    for i in range(n):
        own = ei(i, [j for j in range(n) if j != i])
        left_two = [ei(j, [m for m in range(n) if m not in (i, j)]) for j in range(n) if j != i]
        out.append(k * (own - sum(left_two) / (n - 1)))
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_maxpo_equals_its_subset_definition_and_is_centred(k):
    got = maxpo_advantages(torch.tensor(REWARDS, dtype=torch.float64), 6, k=k)
    torch.testing.assert_close(got, torch.tensor(_subset_definition(REWARDS, k), dtype=torch.float64))
    assert abs(got.sum().item()) < 1e-12  # exactly centred
    assert got.abs().max() > 0.05


def _authors_batch_ei(returns: np.ndarray, m: int) -> np.ndarray:
    """nissymori/ReMAC brax/remax_utils.py ``compute_batch_ei`` in numpy: sort, D = (v_a − v_c)₊, weights
    C(c, m−2)/C(b−1, m−1) over the sorted comparators, back to input order."""
    b = len(returns)
    order = np.argsort(returns, kind="stable")
    v = returns[order]
    d = np.maximum(v[:, None] - v[None, :], 0.0)
    w = np.array([math.comb(c, m - 2) for c in range(b)], dtype=float) / math.comb(b - 1, m - 1)
    return (d @ w)[np.argsort(order)]


def _authors_l2o_baseline(returns: np.ndarray, m: int) -> np.ndarray:
    """The same file's ``compute_l2o_baseline``: the column sums of D less row i, over b − 1, weighted by
    C(ℓ − [ℓ > i], m−2)/C(b−2, m−1) off the diagonal."""
    b = len(returns)
    order = np.argsort(returns, kind="stable")
    v = returns[order]
    d = np.maximum(v[:, None] - v[None, :], 0.0)
    mean_others = (d.sum(axis=0)[None, :] - d) / (b - 1)
    w = np.array(
        [
            [0.0 if i == j else math.comb(j - (j > i), m - 2) / math.comb(b - 2, m - 1) for j in range(b)]
            for i in range(b)
        ]
    )
    return (mean_others * w).sum(axis=1)[np.argsort(order)]


def test_maxpo_matches_the_authors_code():
    """K·(compute_batch_ei − compute_l2o_baseline) of the co-authors' code, and its values on these rewards."""
    r = np.array(REWARDS)
    expected = {  # (EI, L2O baseline) of the authors' functions at m = K
        2: ([0.04, 0.48, 0.0, 0.12, 0.28, 0.12], [0.18, 0.14, 0.14, 0.2, 0.18, 0.2]),
        3: ([0.0, 0.34, 0.0, 0.02, 0.14, 0.02], [0.08, 0.06, 0.08, 0.1, 0.1, 0.1]),
        4: ([0.0, 0.28, 0.0, 0.0, 0.08, 0.0], [0.06, 0.04, 0.06, 0.06, 0.08, 0.06]),
    }
    for k, (ei, baseline) in expected.items():
        np.testing.assert_allclose(_authors_batch_ei(r, k), ei, atol=1e-12)
        np.testing.assert_allclose(_authors_l2o_baseline(r, k), baseline, atol=1e-12)
        got = maxpo_advantages(torch.tensor(r), 6, k=k).numpy()
        np.testing.assert_allclose(got, k * (np.array(ei) - np.array(baseline)), atol=1e-12)
    rng = np.random.default_rng(0)
    for n, k in ((8, 4), (8, 7), (12, 3), (16, 9)):
        r = rng.normal(size=n).round(1)  # ties on purpose
        got = maxpo_advantages(torch.tensor(r), n, k=k).numpy()
        np.testing.assert_allclose(
            got, k * (_authors_batch_ei(r, k) - _authors_l2o_baseline(r, k)), atol=1e-12
        )


def test_maxpo_is_pkpo_loo_minus_one_less_k_times_the_l2o_baseline():
    """PKPO's loo_minus_one advantage is K·EI_i (the non-centred estimator the paper starts from)."""
    r = np.array(REWARDS)
    for k in (2, 3, 4):
        pkpo = pkpo_advantages(torch.tensor(r), 6, k=k).numpy()
        np.testing.assert_allclose(pkpo, k * _authors_batch_ei(r, k), atol=1e-12)
        maxpo = maxpo_advantages(torch.tensor(r), 6, k=k).numpy()
        np.testing.assert_allclose(pkpo - maxpo, k * _authors_l2o_baseline(r, k), atol=1e-12)
        assert abs(pkpo.sum()) > 0.1 and abs(maxpo.sum()) < 1e-12


def test_maxpo_binary_closed_forms_and_k1_is_rloo():
    n, c = 8, 3
    rewards = torch.tensor([1.0] * c + [0.0] * (n - c), dtype=torch.float64)
    for k in (2, 3, 5, 7):
        correct = math.comb(n - c, k - 1) / math.comb(n - 1, k - 1)
        correct -= (c - 1) / (n - 1) * math.comb(n - c, k - 1) / math.comb(n - 2, k - 1)
        wrong = -c / (n - 1) * math.comb(n - c - 1, k - 1) / math.comb(n - 2, k - 1)
        expected = torch.tensor([k * correct] * c + [k * wrong] * (n - c), dtype=torch.float64)
        torch.testing.assert_close(maxpo_advantages(rewards, n, k=k), expected)
    # k = 3: 3·(10/21 − (2/7)·(10/15)) = 10/7 − 4/7 for a correct one; 3·(−(3/7)·(6/15)) = −18/35 for a wrong one
    torch.testing.assert_close(
        maxpo_advantages(rewards, n, k=3)[[0, c]], torch.tensor([6 / 7, -18 / 35], dtype=torch.float64)
    )
    g = torch.tensor([0.2, 1.0, 0.4, 0.0], dtype=torch.float64)  # K = 1: r_i − mean of the others (RLOO)
    torch.testing.assert_close(maxpo_advantages(g, 4, k=1), g - (g.sum() - g) / 3)


def test_equal_groups_get_zero_and_unscorable_completions_leave_the_group():
    for k in (1, 2, 3):
        assert maxpo_advantages(torch.tensor([1.0] * 4 + [0.0] * 4), 4, k=k).tolist() == [0.0] * 8
    with_nan = maxpo_advantages(torch.tensor([1.0, float("nan"), 0.0, 0.0, 0.5]), 5, k=2)
    without = maxpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.5]), 4, k=2)
    assert with_nan[1] == 0
    torch.testing.assert_close(with_nan[[0, 2, 3, 4]], without)
    # K or fewer scorable completions: no leave-two-out baseline, advantage 0
    short = maxpo_advantages(torch.tensor([1.0, float("nan"), float("nan"), 0.0]), 4, k=2)
    assert short.tolist() == [0.0] * 4


def _max_at_k(theta, values, k):
    """E[max of k i.i.d. draws] = Σ_a v_a·(F(v_a)^k − F(v_a⁻)^k), distinct values; binary values: pass@k."""
    prob = torch.softmax(theta, dim=0)
    order = torch.argsort(values)
    cdf = torch.cumsum(prob[order], dim=0)
    below = torch.cat([torch.zeros(1, dtype=cdf.dtype), cdf[:-1]])
    return (values[order] * (cdf**k - below**k)).sum()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_maxpo_expected_update_is_the_gradient_of_max_at_k(k):
    n = 4
    for values, logits in (([0.1, 0.7, 0.4], [0.2, -0.5, 0.1]), ([1.0, 0.0, 0.0], [-1.5, 0.5, 0.3])):
        theta, v = bandit(values, logits)
        if len(set(values)) < len(values):  # binary: merge the two wrong arms for max@K's closed form
            prob = torch.softmax(theta, 0)
            target = 1 - (1 - prob[0]) ** k
        else:
            target = _max_at_k(theta, v, k)
        update = exact_expected_update(theta, v, n, lambda r, _: maxpo_advantages(r, n, k=k))
        (grad,) = torch.autograd.grad(target, theta)
        torch.testing.assert_close(update, grad, atol=1e-12, rtol=1e-9)
        assert grad.abs().max() > 1e-3


def test_bad_k_is_refused_in_one_line():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    for k in (0, 4, 2.5, True):
        with pytest.raises(ValueError, match=r"^k=.* must be an integer in \[1, 3\]$"):
            maxpo_advantages(r, 4, k=k)
    with pytest.raises(ValueError, match="needs k"):
        compute_advantages("maxpo", r, 4)
    with pytest.raises(ValueError, match="group_size >= 2"):
        maxpo_advantages(torch.tensor([1.0]), 1, k=1)
    torch.testing.assert_close(
        compute_advantages("maxpo", r, 4, k=2, baseline="loo"), maxpo_advantages(r, 4, k=2)
    )
