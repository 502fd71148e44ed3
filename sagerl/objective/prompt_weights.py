"""What a group-relative advantage optimises with 0/1 rewards: the weight D(p) it gives a prompt of pass rate p.

Derived here (tests/objective/test_prompt_weights.py checks it by exact enumeration on bandits). Let a group be n
completions y_1..y_n of one prompt, drawn from π, with rewards r_i ∈ {0, 1}, and let the advantage of y_i depend
only on r_i and the number c of correct completions of its group, A_i = A(r_i, c). The expected update
E[(1/n)·Σ_i A_i·∇log π(y_i)] is, by symmetry, E[A_1·∇log π(y_1)]; conditioning on y_1, with c' ~ Bin(n − 1, p)
the correct completions among the other n − 1 and g(r) = E[A(r, c' + r)],

    E[g(r(y))·∇log π(y)] = Σ_y g(r(y))·∇π(y) = g(1)·∇p + g(0)·∇(1 − p) = (g(1) − g(0))·∇p.

So the expected update is D(p)·∇p with

    D(p) = E_{c' ~ Bin(n−1, p)}[A(1, c' + 1) − A(0, c')],

and over a data set Σ_x D(p_x)·∇p_x = ∇ Σ_x Φ(p_x) with Φ(p) = ∫₀^p D(s) ds. Every such estimator (GRPO, Dr.GRPO,
Pass@k Training, PKPO, W-REINFORCE, RS-GRPO, the pass@k mixture) moves each prompt's pass rate along ∇p_x and
differs only in the weight D it gives a prompt at pass rate p: PKPO's unbiased ∇pass@k has D(p) = k(1 − p)^{k−1},
Dr.GRPO's r − mean has D = (n − 1)/n (the mean reward's gradient, scaled). docs/methods.md tabulates D for the
binary methods at n = 8.
"""

from __future__ import annotations

import math

import torch

from sagerl.objective._checks import UNIT, Range, check_number


def prompt_weight(name: str, p: float, n: int, **params: object) -> float:
    """D(p) of advantage estimator ``name`` (module docstring): E_{c'~Bin(n−1,p)}[A(1, c'+1) − A(0, c')], each
    A read off :func:`sagerl.objective.compute_advantages` on a group of c correct and n − c wrong completions.

    Valid for estimators whose advantages depend only on the group's 0/1 rewards (not for ``unlikely``, which
    reads log-probs, nor for the ones that read completions or counts).

    Args:
        name: an estimator of :data:`sagerl.objective.ADVANTAGES`. p: the pass rate, in [0, 1]. n: group size ≥ 2.
        **params: the estimator's keyword parameters (``k``, ``risk_beta``, ...).

    Raises:
        ValueError: p outside [0, 1], n < 2, and whatever the estimator raises.
    """
    from sagerl.objective.registry import compute_advantages

    check_number("p", p, UNIT)
    check_number("n", n, Range(2, integer=True))
    groups = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in range(n + 1)], dtype=torch.float64)
    adv = compute_advantages(name, groups.reshape(-1), n, **params).view(n + 1, n)
    total = 0.0
    for c in range(n):  # c correct among the other n − 1
        prob = math.comb(n - 1, c) * p**c * (1 - p) ** (n - 1 - c)
        correct = adv[c + 1, 0].item()  # a correct completion in a group of c + 1 correct
        wrong = adv[c, n - 1].item()  # a wrong completion in a group of c correct
        total += prob * (correct - wrong)
    return total
