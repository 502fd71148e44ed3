"""W-REINFORCE, PSR and NSR: closed forms and the exact expected update on a bandit."""

from __future__ import annotations

import itertools

import pytest
import torch

from sagerl.objective import compute_advantages, w_reinforce_advantages


def test_closed_forms():
    r = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    torch.testing.assert_close(w_reinforce_advantages(r, 2), torch.tensor([0.1, -1.0, 0.0, 0.1]))
    torch.testing.assert_close(
        compute_advantages("w_reinforce", r, 2, lam=0.5), torch.tensor([0.5, -1.0, 0.0, 0.5])
    )
    torch.testing.assert_close(compute_advantages("psr", r, 2), torch.tensor([1.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(compute_advantages("nsr", r, 2), torch.tensor([0.0, -1.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    "name, lam", [("w_reinforce", 0.1), ("w_reinforce", 2.0), ("psr", None), ("nsr", None)]
)
def test_expected_update_is_the_gradient_of_the_signed_objective(name, lam):
    theta = torch.tensor([0.4, -1.0, 0.3, -0.2], dtype=torch.float64, requires_grad=True)
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    logp = torch.log_softmax(theta, 0)
    prob = logp.exp().detach()
    n = 3
    total = torch.zeros((), dtype=torch.float64)
    for outcome in itertools.product(range(4), repeat=n):
        idx = torch.tensor(outcome)
        adv = compute_advantages(name, correct[idx], n, lam=lam)
        total = total + prob[idx].prod() * (adv * logp[idx]).mean()
    (update,) = torch.autograd.grad(total, theta)
    p_correct = torch.softmax(theta, 0)[[0, 2]].sum()
    weight_pos = {"w_reinforce": lam, "psr": 1.0, "nsr": 0.0}[name]
    weight_neg = {"w_reinforce": 1.0, "psr": 0.0, "nsr": 1.0}[name]
    (grad,) = torch.autograd.grad(weight_pos * p_correct - weight_neg * (1 - p_correct), theta)
    torch.testing.assert_close(update, grad, atol=1e-12, rtol=1e-9)


def test_bad_lambda_and_rewards():
    r = torch.tensor([1.0, 0.0])
    for lam in (0.0, -0.1):
        with pytest.raises(ValueError, match=r"lam=.* must be a number in \(0, inf\)"):
            w_reinforce_advantages(r, 2, lam=lam)
    with pytest.raises(ValueError, match="binary rewards"):
        w_reinforce_advantages(torch.tensor([1.0, -0.25]), 2)
