"""Exact expected updates on a softmax bandit, by enumeration of every group of n outcomes (shared by the tests
of the advantage estimators)."""

from __future__ import annotations

import itertools

import torch


def bandit(values, logits):
    """(θ with grad, arm values) in float64."""
    theta = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    return theta, torch.tensor(values, dtype=torch.float64)


def exact_expected_update(theta, values, n, advantage_fn):
    """∇ of E over every group of n outcomes of (1/n) Σ_i sg(A_i) log π(y_i): the expected update.

    ``advantage_fn(group_values, group_arms)`` returns the (n,) advantages of one group."""
    logp = torch.log_softmax(theta, dim=0)
    prob = logp.exp().detach()
    total = torch.zeros((), dtype=torch.float64)
    for outcome in itertools.product(range(len(values)), repeat=n):
        idx = torch.tensor(outcome)
        weight = prob[idx].prod()
        adv = advantage_fn(values[idx], idx)
        total = total + weight * (adv.detach() * logp[idx]).mean()
    return torch.autograd.grad(total, theta)[0]


def pass_rate_gradient(theta, correct_arms):
    """(p, ∇p) of the probability of drawing a correct arm."""
    p = torch.softmax(theta, dim=0)[list(correct_arms)].sum()
    (grad,) = torch.autograd.grad(p, theta)
    return p.item(), grad
