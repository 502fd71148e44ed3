"""Per-token anchor divergences: reverse KL to the shaped anchor f = q·π_ref, and forward KL.

Notation, per token: π = π_θ(y_t | s_t) the policy, π_ref the reference policy, q > 0 the detached guide,
f = q·π_ref the unnormalised anchor, Z_q = Σ_y f(y) its mass at the state, and d = log f − log π
(``ref_logp + log_q − logp``). All log-probabilities are in nats; every tensor is (B, T).

What the pseudo-KL is (SAGE, arXiv 2605.18864): D(π‖f) = Σ_y π log(π/f) − π + f, which is ≥ 0, zero iff
π = f, and whose regularised optimum max_π E_π[r] − β·D(π‖f) over normalised π is
π* ∝ q·π_ref·exp(r/β).

What the gradient of each estimator is. Libraries (TRL, verl) add β·k to the per-token loss and let
autograd differentiate the *value* k at samples y ~ π. The expected gradient then depends on the
estimator, not only on the divergence it estimates (see Tang & Munos 2025, "On a few pitfalls in KL
divergence gradient estimation for RL", and Shah et al. 2025, "A Comedy of Estimators", arXiv 2512.21852):

========  ============================  ==========================================================
k         E_π[k] (value)                E_π[∇k] (what the optimizer follows)
========  ============================  ==========================================================
k1 = −d   Σ π log(π/f)                  0  (use k1 as a reward penalty instead, see ``sage_loss``)
k2 = d²/2  (no closed form)             Σ π log(π/f) ∇log π  = ∇D(π‖f) at this state (exact)
k3        D(π‖f)  (unbiased)            −Σ f ∇log π = Z_q·∇KL(f/Z_q ‖ π)  (a *forward* KL)
ρ·k3      D(π‖f) off-policy             ∇D(π‖f) at this state (exact), ρ = π/π_old with gradient
========  ============================  ==========================================================

So β·k3 in the loss, as in GRPO and in the SAGE authors' setup, pulls π toward the normalised anchor
f/Z_q with strength β·Z_q; its one-step stationary point is π(y) = β f(y) / (c − r(y)), with c > max r
fixed by Σ π = 1 (tests/objective/test_tabular.py checks it). The exact optimum π* ∝ f·exp(r/β) of a
whole sequence is reached by putting k1 in the reward (``sage_loss(kl_placement="reward")``).
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import POSITIVE, check_number, check_same_shape

KL_ESTIMATORS = ("k1", "k2", "k3")


def _log_ratio(logp: torch.Tensor, target_logp: torch.Tensor, log_ratio_clip: float | None) -> torch.Tensor:
    d = target_logp - logp
    if log_ratio_clip is not None:
        check_number("log_ratio_clip", log_ratio_clip, POSITIVE)
        d = d.clamp(-log_ratio_clip, log_ratio_clip)
    return d


def shaped_kl(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    log_q: torch.Tensor | None = None,
    estimator: str = "k3",
    *,
    log_ratio_clip: float | None = 20.0,
    old_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token estimate of the reverse pseudo-KL D(π‖q·π_ref) from tokens sampled from π.

    With d = ref_logp + log_q − logp:  k1 = −d,  k2 = d²/2,  k3 = e^d − d − 1. With ``log_q=None`` this is
    the plain reverse KL(π‖π_ref) estimator of Schulman (2020), as in TRL's GRPO (k3).

    The k3 form is an unbiased estimate of the pseudo-KL: E_π[e^d − d − 1] = Σ f − Σ π log(f/π) − 1
    = Σ π log(π/f) − 1 + Z_q. The expected *gradient* of each form is in the module docstring.

    Args:
        logp: (B, T) log π of the sampled tokens, nats (carries the gradient).
        ref_logp: (B, T) log π_ref of the same tokens, nats.
        log_q: (B, T) log of the guide q (detached), or None for q ≡ 1.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.
        log_ratio_clip: clamp d to [−c, c] before the estimator (default 20, so e^d stays finite for
            any input, including log-ratios of ±1e4; None disables it). Clipped tokens get no gradient.
        old_logp: (B, T) log π_old of the sampling policy. When given, the estimate is multiplied by the
            importance ratio π/π_old *with* its gradient (TRL's ``use_bias_correction_kl``), which makes it
            unbiased off-policy and turns E[∇(ρ·k3)] into the exact gradient of the per-token pseudo-KL.

    Returns:
        (B, T) per-token values, nats; finite when the inputs are finite. Masking is left to the caller.

    Raises:
        ValueError: unknown estimator, shape mismatch, or a non-positive clip.
    """
    if log_q is None:
        log_q = torch.zeros((), dtype=logp.dtype, device=logp.device)
    else:
        check_same_shape(logp=logp, ref_logp=ref_logp, log_q=log_q)
        log_q = log_q.detach()
    check_same_shape(logp=logp, ref_logp=ref_logp, old_logp=old_logp)
    d = _log_ratio(logp, ref_logp.detach() + log_q, log_ratio_clip)
    if estimator == "k1":
        kl = -d
    elif estimator == "k2":
        kl = 0.5 * d.square()
    elif estimator == "k3":
        kl = torch.expm1(d) - d
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")
    if old_logp is not None:
        kl = kl * torch.exp((logp - old_logp.detach()).clamp(max=20.0))
    return kl


def forward_kl(
    logp: torch.Tensor, ref_logp: torch.Tensor, *, log_ratio_clip: float | None = 20.0
) -> torch.Tensor:
    """Per-token estimate of the forward KL(π_ref‖π) from tokens sampled from π.

    Value: ρ log ρ − ρ + 1 with ρ = π_ref/π (an unbiased estimate: E_π[ρ log ρ − ρ + 1] = KL(π_ref‖π)).

    Gradient: −sg(ρ)·∇log π, whose expectation −Σ π_ref ∇log π is the exact gradient of KL(π_ref‖π).
    (Autograd of the value itself would follow ∇½·E_{π_ref}[log²(π_ref/π)] instead, another divergence.)

    Stationary point: with the policy gradient of E_π[r], gradient descent on E[−A·log π] + β·KL(π_ref‖π)
    at one state stops at π(y) = β·π_ref(y) / (c − r(y)), where c > max_y r(y) is the unique constant with
    Σ_y π(y) = 1 (c = β + E_π[r]). Unlike reverse KL's π_ref·exp(r/β), it keeps mass on every token π_ref
    supports: the "mass off-target" the SAGE paper compares against.

    Args:
        logp: (B, T) log π of the sampled tokens, nats (carries the gradient).
        ref_logp: (B, T) log π_ref, nats.
        log_ratio_clip: clamp log ρ to [−c, c] (default 20; None disables).

    Returns:
        (B, T) per-token values, nats.

    Raises:
        ValueError: shape mismatch or a non-positive clip.
    """
    check_same_shape(logp=logp, ref_logp=ref_logp)
    log_rho = _log_ratio(logp, ref_logp.detach(), log_ratio_clip).detach()
    rho = torch.exp(log_rho)
    value = rho * log_rho - torch.expm1(log_rho)
    surrogate = -rho * (logp - logp.detach())  # zero-valued; carries the gradient −ρ ∇log π
    return value + surrogate
