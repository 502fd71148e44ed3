"""Pass@k Training's analytic advantage and PKPO: closed forms, the authors' listing, and exact unbiasedness."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sagerl.objective import compute_advantages, pass_at_k, passk_advantages, pkpo_advantages


def test_passk_hand_computed_group():
    # n = 4, c = 1, k = 2: rho = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2
    adv = passk_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, k=2)
    wrong = (1 - 0.5 - math.comb(2, 1) / math.comb(3, 1)) / 0.5  # -1/3
    torch.testing.assert_close(adv, torch.tensor([1.0, wrong, wrong, wrong]))
    assert adv.sum().abs() < 1e-6  # centred


@pytest.mark.parametrize(
    "rewards, k",
    [([0.0, 0, 0, 0], 2), ([1.0, 1, 1, 1], 1), ([1.0, 1, 1, 0], 2), ([1.0, 0, 1, 0], 3)],
)
def test_passk_is_zero_where_sigma_vanishes(rewards, k):
    # c = 0, all correct, or n - c < k (every k-subset holds a correct completion)
    assert torch.equal(passk_advantages(torch.tensor(rewards), 4, k=k), torch.zeros(4))


def test_passk_k1_is_grpo_with_population_std_and_groups_are_centred():
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1])
    p = rewards.view(3, 4).mean(1, keepdim=True)
    expected = ((rewards.view(3, 4) - p) / torch.sqrt(p * (1 - p))).reshape(-1)
    torch.testing.assert_close(passk_advantages(rewards, 4, k=1), expected)
    for k in (1, 2, 3):
        sums = passk_advantages(rewards, 4, k=k).view(3, 4).sum(1)
        torch.testing.assert_close(sums, torch.zeros(3), atol=1e-6, rtol=0)


def test_passk_is_pkpo_with_its_own_group_baseline_over_sigma():
    # ((n/k)·s_i − ρ̄)/σ, s = PKPO's weights without baseline (A_pkpo = n·s)
    g = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0], dtype=torch.float64)
    n, c = 8, 2
    for k in (2, 3, 5):
        rho = pass_at_k(n, c, k)
        s = pkpo_advantages(g, n, k=k, baseline="none") / n
        expected = ((n / k) * s - rho) / math.sqrt(rho * (1 - rho))
        torch.testing.assert_close(passk_advantages(g, n, k=k), expected)


def test_passk_unscorable_completions_leave_the_group():
    with_nan = passk_advantages(torch.tensor([1.0, float("nan"), 0.0, 0.0]), 4, k=2)
    without = passk_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, k=2)
    assert with_nan[1] == 0
    torch.testing.assert_close(with_nan[[0, 2, 3]], without)


def _brute_s(values, k):
    n = len(values)
    s = [0.0] * n
    for subset in itertools.combinations(range(n), k):
        top = max(values[j] for j in subset)
        for j in subset:
            s[j] += top
    return [x / math.comb(n, k) for x in s]


def _brute_weights(values, k, baseline):
    """The definitions, by enumeration of every k-subset."""
    n = len(values)
    s = _brute_s(values, k)
    if baseline == "none":
        return s
    if baseline == "loo":
        return [s[i] - sum(_brute_s(values[:i] + values[i + 1 :], k)) / (n - 1) for i in range(n)]
    out = [0.0] * n
    for subset in itertools.combinations(range(n), k):
        top = max(values[j] for j in subset)
        for i in subset:
            rest = [values[j] for j in subset if j != i]
            out[i] += top - (max(rest) if rest else 0.0)
    return [x / math.comb(n, k) for x in out]


@pytest.mark.parametrize("baseline", ["none", "loo", "loo_minus_one"])
def test_pkpo_equals_its_subset_definition(baseline):
    gen = torch.Generator().manual_seed(3)
    for n, k in [(5, 2), (6, 3), (6, 5), (4, 1), (7, 4)]:
        if baseline == "loo" and k > n - 1:
            continue
        values = torch.rand(n, generator=gen, dtype=torch.float64)
        values[1] = values[3]  # a tie
        got = pkpo_advantages(values, n, k=k, baseline=baseline) / n
        expected = torch.tensor(_brute_weights(values.tolist(), k, baseline), dtype=torch.float64)
        torch.testing.assert_close(got, expected)


def test_pkpo_matches_the_authors_listing():
    # Values of the paper's Listing 1 (s, sloo = Eq. 29, sloo_minus_one = Eq. 33), computed with that code on
    # these rewards; PKPO's advantages are n times its weights.
    g = torch.tensor([0.3, 0.9, 0.1, 0.5, 0.7, 0.5], dtype=torch.float64)
    listing = {
        ("none", 3): [0.36, 0.45, 0.36, 0.36, 0.39, 0.36],
        ("loo", 3): [-0.12, 0.078, -0.12, -0.12, -0.054, -0.12],
        ("loo_minus_one", 3): [0.0, 0.17, 0.0, 0.01, 0.07, 0.01],
        ("loo", 2): [-0.09466666667, 0.076, -0.09466666667, -0.07333333333, -0.00933333333, -0.07333333333],
        ("loo_minus_one", 2): [0.01333333333, 0.16, 0.0, 0.04, 0.09333333333, 0.04],
    }
    for (baseline, k), values in listing.items():
        got = pkpo_advantages(g, 6, k=k, baseline=baseline) / 6
        torch.testing.assert_close(got, torch.tensor(values, dtype=torch.float64), atol=1e-9, rtol=0)
    binary = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 0], dtype=torch.float64)
    torch.testing.assert_close(
        pkpo_advantages(binary, 8, k=2) / 8,
        torch.tensor([0.2142857142857, 0, 0, 0.2142857142857, 0, 0, 0, 0], dtype=torch.float64),
    )


def test_pkpo_binary_closed_forms():
    n, c = 8, 3
    rewards = torch.tensor([1.0] * c + [0.0] * (n - c), dtype=torch.float64)
    for k in (1, 2, 4, 6):
        none = pkpo_advantages(rewards, n, k=k, baseline="none")
        torch.testing.assert_close(none[:c], torch.full((c,), float(k), dtype=torch.float64))
        torch.testing.assert_close(
            none[c:],
            torch.full((n - c,), (k * pass_at_k(n - 1, c, k - 1) if k > 1 else 0.0), dtype=torch.float64),
        )
        loo1 = pkpo_advantages(rewards, n, k=k)
        correct = k * math.comb(n - c, k - 1) / math.comb(n - 1, k - 1)
        torch.testing.assert_close(loo1, torch.tensor([correct] * c + [0.0] * (n - c), dtype=torch.float64))


def _bandit(arms_values, logits):
    theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    return theta, torch.tensor(arms_values, dtype=torch.float64)


def _exact_expected_update(theta, values, n, advantage_fn):
    """∇ of E over every group of n outcomes of (1/n) Σ_i sg(A_i) log π(y_i): the expected update."""
    logp = torch.log_softmax(theta, dim=0)
    prob = logp.exp().detach()
    total = torch.zeros((), dtype=torch.float64)
    arms = range(len(values))
    for outcome in itertools.product(arms, repeat=n):
        idx = torch.tensor(outcome)
        weight = prob[idx].prod()
        adv = advantage_fn(values[idx])
        total = total + weight * (adv.detach() * logp[idx]).mean()
    return torch.autograd.grad(total, theta)[0]


def _max_at_k_exact(theta, values, k):
    """E[max of k i.i.d. draws] = Σ_a v_a·(F(v_a)^k − F(v_a⁻)^k), values distinct; binary: pass@k."""
    prob = torch.softmax(theta, dim=0)
    order = torch.argsort(values)
    cdf = torch.cumsum(prob[order], dim=0)
    below = torch.cat([torch.zeros(1, dtype=cdf.dtype), cdf[:-1]])
    return (values[order] * (cdf**k - below**k)).sum()


@pytest.mark.parametrize("baseline", ["none", "loo", "loo_minus_one"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pkpo_expected_update_is_the_gradient_of_pass_at_k(baseline, k):
    n = 4
    if baseline == "loo" and k > n - 1:
        pytest.skip("loo needs n - 1 >= k")
    # binary: arms 0 and 2 correct; a skewed policy so that pass@k is far from 0 and 1
    theta, values = _bandit([1.0, 0.0, 1.0, 0.0], [-1.0, 0.5, -2.0, 0.3])
    update = _exact_expected_update(theta, values, n, lambda r: pkpo_advantages(r, n, k=k, baseline=baseline))
    pass_k = 1 - (1 - torch.softmax(theta, 0)[[0, 2]].sum()) ** k
    (grad,) = torch.autograd.grad(pass_k, theta)
    torch.testing.assert_close(update, grad, atol=1e-12, rtol=1e-9)
    assert grad.abs().max() > 1e-3  # not a vacuous comparison


@pytest.mark.parametrize("baseline", ["none", "loo", "loo_minus_one"])
def test_pkpo_expected_update_is_the_gradient_of_max_at_k_for_continuous_rewards(baseline):
    n, k = 4, 2
    theta, values = _bandit([0.1, 0.7, 0.4], [0.2, -0.5, 0.1])
    update = _exact_expected_update(theta, values, n, lambda r: pkpo_advantages(r, n, k=k, baseline=baseline))
    (grad,) = torch.autograd.grad(_max_at_k_exact(theta, values, k), theta)
    torch.testing.assert_close(update, grad, atol=1e-12, rtol=1e-9)


def test_bad_k_and_non_binary_rewards_are_refused():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    for k in (0, 5, 2.5, True):
        with pytest.raises(ValueError, match=r"k=.* must be an integer in \[1, 4\]"):
            passk_advantages(r, 4, k=k)
        with pytest.raises(ValueError, match="k=.* must be an integer"):
            pkpo_advantages(r, 4, k=k)
    with pytest.raises(ValueError, match="binary rewards"):
        passk_advantages(torch.tensor([1.0, 0.5, 0.0, 0.0]), 4, k=2)
    with pytest.raises(ValueError, match="unknown PKPO baseline"):
        pkpo_advantages(r, 4, k=2, baseline="mean")
    with pytest.raises(ValueError, match="needs k"):
        compute_advantages("pkpo", r, 4)
    torch.testing.assert_close(compute_advantages("pkpo", r, 4, k=2, lam=3.0), pkpo_advantages(r, 4, k=2))
