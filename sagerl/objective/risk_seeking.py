"""Risk-seeking GRPO (RS-GRPO): the advantage of the entropic risk objective instead of the mean reward.

Source: Jiang, Huang, Yuan, Mao, Yue, Zhao, Yan 2025, "Risk-Sensitive RL for Alleviating Exploration Dilemmas
in Large Language Models", arXiv 2509.24261 (the authors' repository, Jackory/RS-GRPO, links an older id). The
objective is the entropic risk J_RS = (1/β_r)·log E_{y~π}[exp(β_r·r(y))], which moves from the mean reward
(β_r → 0) to the maximum (β_r → ∞); its policy gradient is E[A_β(y)·∇log π(y)] with
A_β(y) = (1/β_r)·(exp(β_r·r(y))/E[exp(β_r·r)] − 1). RS-GRPO estimates the expectation in the denominator by the
group's mean, which is the advantage of :func:`rs_grpo_advantages`:

    b = (1/β_r)·log((1/n)·Σ_j exp(β_r·r_j)),     A_i = (exp(β_r·(r_i − b)) − 1)/β_r

with no std normalisation (the authors' README and their verl function ``compute_rs_grpo_advantage``; default
β_r = 2, the README's recommendation).

What its expected update is the gradient of (derived here; tests/objective/test_risk_seeking.py checks it by
exact enumeration): the group mean replaces E[exp(β_r·r)] inside a ratio, so for a finite group the estimate is
not unbiased for ∇J_RS. With 0/1 rewards, every advantage that depends only on the rewards of the group has the
expected update D(p)·∇p, p the prompt's pass rate, so the update is the exact gradient of Φ_n(p) = ∫₀^p D_n(s) ds
with

    D_n(p) = (1/β_r)·E_{c ~ Bin(n−1, p)}[e^{β_r}/M(c+1) − 1/M(c)],    M(c) = (c·e^{β_r} + n − c)/n,

(:func:`sagerl.objective.prompt_weight` computes it for any such estimator), which tends to
J_RS'(p) = (e^{β_r} − 1)/(β_r·(1 + p(e^{β_r} − 1))) (:func:`entropic_risk_weight`) as n → ∞: RS-GRPO optimises
the entropic risk of each prompt only in the limit of large groups.
"""

from __future__ import annotations

import math

import torch

from sagerl.objective._checks import POSITIVE, UNIT, Setting, check_number, grouped

RISK_BETA = Setting(
    "risk_beta",
    "risk_beta",
    2.0,
    "RS-GRPO's risk-seeking β_r, a finite number > 0 (the authors' 2): "
    "A = (exp(β_r(r - b)) - 1)/β_r, b = (1/β_r)·log mean exp(β_r·r).",
    POSITIVE,
)
SETTINGS = (RISK_BETA,)


def check_risk_beta(risk_beta: float) -> None:
    """Raise ValueError unless β_r is a finite number > 0 (one line: the name, the value, the range)."""
    check_number("risk_beta", risk_beta, POSITIVE)


def rs_grpo_advantages(rewards: torch.Tensor, group_size: int, risk_beta: float = 2.0) -> torch.Tensor:
    """RS-GRPO's risk-seeking advantages (module docstring): A_i = expm1(β_r·(r_i − b))/β_r with the group's
    soft-max baseline b = (1/β_r)·log mean_j exp(β_r·r_j).

    Args:
        rewards: (N,) rewards, any real values (NaN: an unscorable completion, left out of its group's baseline,
            advantage 0), groups of ``group_size`` contiguous.
        group_size: n.
        risk_beta: β_r, a finite number > 0 (the authors' 2). β_r → 0 gives r_i − mean(r) (Dr.GRPO).

    Returns:
        (N,) advantages in the order of ``rewards``: 0 for a group whose rewards are all equal, and the baseline
        is computed in float64 with a log-sum-exp, so large β_r·r do not overflow (A_i ≤ (n − 1)/β_r).

    Raises:
        ValueError: bad shapes, or β_r not a finite number > 0.
    """
    check_risk_beta(risk_beta)
    g = grouped(rewards, group_size).double()
    valid = ~torch.isnan(g)
    count = valid.sum(dim=1, keepdim=True)
    scaled = torch.where(valid, risk_beta * g, torch.full_like(g, -math.inf))
    log_mean = torch.logsumexp(scaled, dim=1, keepdim=True) - count.clamp(min=1).double().log()
    baseline = log_mean / risk_beta
    adv = torch.expm1(risk_beta * (g - baseline)) / risk_beta
    adv = torch.where(valid & (count > 0), adv, torch.zeros_like(adv))
    return adv.to(rewards.dtype).reshape(-1)


def entropic_risk_weight(p: float, risk_beta: float) -> float:
    """J_RS'(p) for 0/1 rewards: d/dp of (1/β_r)·log(1 − p + p·e^{β_r}), the limit as n → ∞ of RS-GRPO's
    per-prompt weight D_n(p) (:func:`sagerl.objective.prompt_weight` of ``"rs_grpo"``)."""
    check_number("p", p, UNIT)
    check_risk_beta(risk_beta)
    return math.expm1(risk_beta) / (risk_beta * (1 + p * math.expm1(risk_beta)))
