"""The unbiased pass@k estimator (Chen et al. 2021) and the bootstrap CIs."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from sagerl.eval import ks_up_to, pass_at_k, pass_at_k_matrix
from sagerl.eval.passk import bootstrap_average_ci, bootstrap_ci
from sagerl.eval.results import summarize


def brute_force(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) that hold a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(i < c for i in s) for s in subsets)
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_enumeration_over_all_subsets(n):
    for c in range(n + 1):
        ks = list(range(1, n + 1))
        row = pass_at_k_matrix(n, [c], ks)[0]
        for k in ks:
            exact = brute_force(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
            assert row[k - 1] == pytest.approx(float(exact), abs=1e-12)


def test_edge_cases():
    assert pass_at_k(16, 0, 1) == 0.0
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(16, 16, 16) == 1.0
    assert pass_at_k(16, 1, 16) == 1.0  # k = n: any correct sample is in the only subset
    assert pass_at_k(16, 3, 14) == 1.0  # n - c < k
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(1, 0, 1) == 0.0


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 5), (4, 0, 5), (4, 2, 0), (4, 5, 1), (4, -1, 1), (0, 0, 1)])
def test_invalid_arguments_raise(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_k_greater_than_n_raises_in_matrix_form_too():
    with pytest.raises(ValueError, match=r"k=8 must be an integer in \[1, 4\]"):
        pass_at_k_matrix(4, [1, 2], [1, 8])
    with pytest.raises(ValueError):
        pass_at_k_matrix(4, [5], [1])


def test_known_values():
    assert pass_at_k(10, 5, 1) == pytest.approx(0.5)  # pass@1 = c / n
    assert pass_at_k(100, 7, 1) == pytest.approx(0.07)
    assert pass_at_k(10, 5, 2) == pytest.approx(1 - math.comb(5, 2) / math.comb(10, 2))  # 7/9
    assert pass_at_k(10, 5, 2) == pytest.approx(7 / 9)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_stable_for_large_n_where_binomials_overflow_floats():
    # C(1024, 512) ~ 4e306 overflows float64 arithmetic with naive products; the exact value via integers:
    n, c, k = 1024, 3, 512
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k_matrix(n, [c], [k])[0, 0] == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(256, 1, 1) == pytest.approx(1 / 256)


def test_matrix_matches_scalar_for_many_counts():
    n = 64
    counts = list(range(n + 1))
    ks = ks_up_to(n)
    mat = pass_at_k_matrix(n, counts, ks)
    assert mat.shape == (n + 1, len(ks))
    for i, c in enumerate(counts):
        for j, k in enumerate(ks):
            assert mat[i, j] == pytest.approx(pass_at_k(n, c, k), abs=1e-12)
    # monotone in k and in c
    assert np.all(np.diff(mat, axis=1) >= -1e-12)
    assert np.all(np.diff(mat, axis=0) >= -1e-12)


def test_ks_up_to():
    assert ks_up_to(1) == [1]
    assert ks_up_to(2) == [1, 2]
    assert ks_up_to(16) == [1, 2, 4, 8, 16]
    assert ks_up_to(12) == [1, 2, 4, 8, 12]
    assert ks_up_to(256)[-1] == 256 and len(ks_up_to(256)) == 9


def test_bootstrap_ci_contains_estimate_and_shrinks_with_more_problems():
    rng = np.random.default_rng(0)
    n = 8
    small = rng.binomial(n, 0.3, size=20)
    large = rng.binomial(n, 0.3, size=2000)
    widths = []
    for counts in (small, large):
        vals = pass_at_k_matrix(n, counts, [1, 8])
        ci = bootstrap_ci(vals)
        est = vals.mean(axis=0)
        assert np.all(ci[:, 0] <= est) and np.all(est <= ci[:, 1])
        widths.append(ci[:, 1] - ci[:, 0])
    assert np.all(widths[1] < widths[0] / 4)  # ~ 1/sqrt(100) = 1/10 of the width
    # deterministic: a fixed seed gives the same interval
    again = bootstrap_ci(pass_at_k_matrix(n, small, [1, 8]))
    first = bootstrap_ci(pass_at_k_matrix(n, small, [1, 8]))
    assert np.array_equal(again, first)


def test_bootstrap_constant_values_give_degenerate_interval():
    ci = bootstrap_ci(np.full((10, 1), 0.25))
    assert ci[0, 0] == pytest.approx(0.25) and ci[0, 1] == pytest.approx(0.25)


def test_average_ci_contains_unweighted_mean():
    a = pass_at_k_matrix(4, [0, 1, 2, 4, 4], [1, 4])
    b = pass_at_k_matrix(4, [0] * 50 + [4] * 50, [1, 4])
    ci = bootstrap_average_ci([a, b])
    mean = (a.mean(0) + b.mean(0)) / 2
    assert np.all(ci[:, 0] <= mean) and np.all(mean <= ci[:, 1])


def test_summarize_values_and_keys():
    # dataset A: 2 problems, n = 4, correct 0 and 2; dataset B: 1 problem with 4 correct
    res = summarize({"A": [0, 2], "B": [4]}, 4)
    a, b, avg = res["datasets"]["A"], res["datasets"]["B"], res["average"]
    assert res["ks"] == [1, 2, 4]
    assert a["pass@1"] == pytest.approx(0.25)
    assert a["pass@2"] == pytest.approx((0 + (1 - 1 / 6)) / 2)
    assert a["pass@4"] == pytest.approx(0.5)
    assert a["mean_accuracy"] == pytest.approx(0.25)
    assert a["num_problems"] == 2 and a["n"] == 4
    assert b["pass@1"] == b["pass@4"] == 1.0
    # unweighted mean across datasets, not pooled over problems
    assert avg["pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert avg["mean_accuracy"] == pytest.approx((0.25 + 1.0) / 2)
    assert avg["num_problems"] == 3
    assert set(a["ci"]) == {"pass@1", "pass@2", "pass@4"}
    for entry in (a, b, avg):
        for k in res["ks"]:
            lo, hi = entry["ci"][f"pass@{k}"]
            assert lo <= entry[f"pass@{k}"] + 1e-12 and entry[f"pass@{k}"] <= hi + 1e-12


def test_one_pass_at_k_with_one_check():
    # sagerl.eval delegates to sagerl.objective's estimator (the pass@k advantages use it too): same values,
    # same one-line error naming the argument, the value and the range
    from sagerl.objective import pass_at_k as objective_pass_at_k

    for n, c, k in [(8, 3, 2), (256, 1, 128), (5, 5, 5), (1, 0, 1)]:
        assert pass_at_k(n, c, k) == objective_pass_at_k(n, c, k)
    for args, message in [
        ((8, 3, 9), r"^k=9 must be an integer in \[1, 8\]$"),
        ((8, 9, 1), r"^c=9 must be an integer in \[0, 8\]$"),
        ((0, 0, 1), r"^n=0 must be an integer in \[1, inf\)$"),
        ((8.0, 3, 2), r"^n=8.0 must be an integer"),
        ((8, 3, float("nan")), r"^k=nan must be an integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            pass_at_k(*args)
        with pytest.raises(ValueError, match=message):
            pass_at_k_matrix(args[0], [args[1]], [args[2]])


def test_the_bootstrap_settings_are_checked():
    values = np.ones((3, 1))
    with pytest.raises(ValueError, match=r"^resamples=0 must be an integer in \[1, inf\)$"):
        bootstrap_ci(values, resamples=0)
    for confidence in (float("nan"), 1.0, 0.0, float("inf")):
        with pytest.raises(ValueError, match=rf"^confidence={confidence!r} must be a number in \(0, 1\)$"):
            bootstrap_ci(values, confidence=confidence)
    with pytest.raises(ValueError, match=r"^seed=-1 must be an integer in \[0, inf\)$"):
        bootstrap_average_ci([values], seed=-1)
    with pytest.raises(ValueError, match=r"^n=nan must be an integer"):
        ks_up_to(float("nan"))


def test_import_sagerl_eval_needs_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, sagerl.eval as e; r = e.pass_at_k_matrix(8, [3], [2]); e.ks_up_to(8);"
        " print('torch' in sys.modules, round(float(r[0, 0]), 6))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", str(round(1 - math.comb(5, 2) / math.comb(8, 2), 6))]


@pytest.mark.parametrize("n,g", [(4, 2), (6, 3), (8, 8), (5, 1)])
def test_mixed_group_share_matches_enumeration_of_every_group(n, g):
    from sagerl.eval.passk import mixed_group_share

    counts = list(range(n + 1))
    exact = []
    for c in counts:
        outcomes = [1] * c + [0] * (n - c)
        groups = list(itertools.combinations(outcomes, g))
        exact.append(Fraction(sum(0 < sum(gr) < g for gr in groups), len(groups)))
    assert mixed_group_share(n, counts, g) == pytest.approx(float(sum(exact) / len(exact)), abs=1e-12)


def test_mixed_group_share_known_values():
    from sagerl.eval.passk import mixed_group_share

    # groups of 8 from 8 samples: mixed exactly when 0 < c < 8 (3 of these 5 problems)
    assert mixed_group_share(8, [0, 1, 4, 7, 8], 8) == pytest.approx(0.6)
    # n = 4, c = 2, groups of 2: 4 of the 6 pairs hold one correct and one wrong sample
    assert mixed_group_share(4, [2], 2) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="at least one problem"):
        mixed_group_share(8, [], 8)
    with pytest.raises(ValueError, match="k"):
        mixed_group_share(8, [3], 9)
