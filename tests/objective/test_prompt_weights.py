"""With 0/1 rewards every group-relative advantage has the expected update D(p)·∇p: exact enumeration checks the
derivation for every binary estimator, and the table of D that docs/methods.md quotes."""

from __future__ import annotations

import pytest
import torch
from bandit import bandit, exact_expected_update, pass_rate_gradient

from sagerl.objective import compute_advantages, prompt_weight

CASES = [
    ("grpo", {}),
    ("dr_grpo", {}),
    ("passk", {"k": 2}),
    ("passk", {"k": 3}),
    ("pkpo", {"k": 2}),
    ("pkpo", {"k": 3, "baseline": "loo"}),
    ("pkpo", {"k": 2, "baseline": "none"}),
    ("w_reinforce", {"lam": 0.1}),
    ("rs_grpo", {"risk_beta": 2.0}),
    ("passk_mix", {"k": 2}),
    ("passk_mix", {"k": 3, "mix_weight": 0.3}),
]


@pytest.mark.parametrize("name, params", CASES, ids=[f"{n}{p}" for n, p in CASES])
def test_expected_update_is_prompt_weight_times_grad_p(name, params):
    n = 4
    # three correct arms of five, a skewed policy (p ≈ 0.3)
    theta, values = bandit([1.0, 0.0, 1.0, 0.0, 1.0], [-1.0, 0.5, -2.0, 0.3, -0.7])
    update = exact_expected_update(theta, values, n, lambda r, _: compute_advantages(name, r, n, **params))
    p, grad_p = pass_rate_gradient(theta, [0, 2, 4])
    weight = prompt_weight(name, p, n, **params)
    torch.testing.assert_close(update, weight * grad_p, rtol=1e-9, atol=1e-12)
    assert abs(weight) > 1e-3


def test_closed_forms():
    for p in (0.05, 0.4, 0.9):
        for k in (1, 2, 4):  # PKPO: the unbiased ∇pass@k, d/dp (1 − (1 − p)^k)
            assert prompt_weight("pkpo", p, 8, k=k) == pytest.approx(k * (1 - p) ** (k - 1), rel=1e-12)
        assert prompt_weight("dr_grpo", p, 8) == pytest.approx(7 / 8, rel=1e-12)
        assert prompt_weight("w_reinforce", p, 8, lam=0.1) == pytest.approx(1.1, rel=1e-12)


TABLE = {  # n = 8, k = 4; p = 0.02, 0.1, 0.5, 0.9, 0.98 (docs/methods.md)
    ("grpo", ()): [2.406, 2.177, 1.735, 2.177, 2.406],
    ("passk", (("k", 4),)): [0.954, 0.789, 0.230, 0.004, 0.000],
    ("pkpo", (("k", 4),)): [3.765, 2.916, 0.500, 0.004, 0.000],
    ("rs_grpo", (("risk_beta", 0.5),)): [1.041, 1.008, 0.862, 0.749, 0.729],
    ("rs_grpo", (("risk_beta", 2.0),)): [1.498, 1.299, 0.709, 0.462, 0.431],
    ("rs_grpo", (("risk_beta", 4.0),)): [1.440, 1.159, 0.472, 0.271, 0.250],
    ("passk_mix", (("k", 4),)): [1.155, 1.060, 1.014, 1.771, 2.077],
    ("passk_mix", (("k", 4), ("mix_weight", 0.25))): [2.043, 1.830, 1.359, 1.633, 1.805],
    ("passk_mix", (("k", 4), ("mix_weight", 0.5))): [1.680, 1.483, 0.983, 1.090, 1.203],
}


@pytest.mark.parametrize("key", list(TABLE), ids=[f"{n}{dict(p)}" for n, p in TABLE])
def test_the_table_in_the_docs(key):
    name, params = key
    got = [prompt_weight(name, p, 8, **dict(params)) for p in (0.02, 0.1, 0.5, 0.9, 0.98)]
    assert got == pytest.approx(TABLE[key], abs=1e-3)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"p=1.5 must be a number in \[0, 1\]"):
        prompt_weight("grpo", 1.5, 8)
    with pytest.raises(ValueError, match=r"n=1 must be an integer in \[2, inf\)"):
        prompt_weight("grpo", 0.5, 1)
