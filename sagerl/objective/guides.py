"""Guide functions q > 0 that reshape the KL anchor from π_ref to the unnormalised q·π_ref.

Every guide returns a (B, T) tensor q that is

- detached: no gradient flows into q (the guide shapes the anchor; it is not optimised);
- exactly 1 at padding (``mask == 0``), so padding never changes the anchor;
- clamped to ``[q_min, q_max]`` at valid tokens.

Source: SAGE, "Shaping Anchors for Guided Exploration in RLVR of LLMs" (Lee, Kang, Hwang,
arXiv 2605.18864): the branch guide is the main variant, the token guide uses surprisal, and the random
guide is the paper's permutation baseline (``kind="permutation"``) or the Gaussian perturbation found in
the authors' code (``kind="gaussian"``). The default strengths of the token and Gaussian guides are
sagerl's choices, not the paper's.

Two guides go beyond the paper (sagerl's own, documented as such):

- :func:`branch_token_guide` gates the token guide's surprisal weight by the branch guide's entropy
  excess, so that q differs between the tokens of a state exactly where the model branches. (The branch
  guide gives every token of a state the same q, so with k3 in the loss it only rescales β there.)
- :func:`teacher_guide` reads q from a second, stronger model: q = (π_teacher/π_ref)^λ, the "guide
  functions learned from stronger models" the authors name as future work.
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import (
    NONNEGATIVE,
    UNIT,
    Range,
    as_bool_mask,
    check_2d,
    check_number,
    check_same_shape,
    masked_zero,
)

TOKEN_NORMALIZATIONS = ("minmax", "rank", "zscore", "prob")
RANDOM_KINDS = ("permutation", "gaussian")


Q_MIN = Range(0.0, 1.0, low_open=True)
Q_MAX = Range(1.0)
"""The clamp bounds of every guide bracket 1: 0 < q_min <= 1 <= q_max."""


def _check_bounds(q_min: float, q_max: float) -> None:
    check_number("q_min", q_min, Q_MIN)
    check_number("q_max", q_max, Q_MAX)


def _finish(q: torch.Tensor, mask: torch.Tensor, q_min: float, q_max: float) -> torch.Tensor:
    """Clamp valid tokens to [q_min, q_max], set padding to exactly 1, and detach."""
    q = torch.nan_to_num(q.detach(), nan=1.0).clamp(q_min, q_max)
    return torch.where(mask, q, torch.ones((), dtype=q.dtype, device=q.device))


def branch_guide(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 0.3,
    tau: float = 1.2,
    q_min: float = 0.6,
    q_max: float = 1.4,
) -> torch.Tensor:
    """Branch guide q = clamp(1 + γ·relu(H − τ), q_min, q_max): more anchor mass at branching tokens.

    Args:
        entropy: (B, T) token entropy H_t in nats, from the current policy (default in the trainer) or
            from the reference policy; values at padding are ignored (may be NaN).
        mask: (B, T) completion mask, 1/True at valid tokens.
        gamma: γ ≥ 0, strength (per nat above the threshold).
        tau: τ ≥ 0, entropy threshold in nats.
        q_min, q_max: clamp bounds, with 0 < q_min ≤ 1 ≤ q_max.

    Returns:
        (B, T) detached q; 1 at padding.

    Raises:
        ValueError: shape mismatch, γ or τ not a finite number >= 0, or bounds that do not bracket 1.

    Source: SAGE (arXiv 2605.18864), branch guide.
    """
    check_2d(entropy, "entropy")
    mask = as_bool_mask(mask, entropy)
    _check_bounds(q_min, q_max)
    check_number("gamma", gamma, NONNEGATIVE)
    check_number("tau", tau, NONNEGATIVE)
    h = masked_zero(entropy.detach(), mask)
    return _finish(1.0 + gamma * torch.relu(h - tau), mask, q_min, q_max)


def normalize_per_sequence(values: torch.Tensor, mask: torch.Tensor, method: str = "minmax") -> torch.Tensor:
    """Map each sequence's valid values to w ∈ [0, 1]; padding gets 0.

    Methods:
        ``"minmax"``: clip to the sequence's 5% and 95% quantiles, then (v − q05) / (q95 − q05);
            w = 0 where the two quantiles coincide.
        ``"rank"``: average rank among the sequence's valid tokens, scaled to [0, 1] (ties share a
            rank; a one-token sequence gets 0.5).
        ``"zscore"``: sigmoid((v − mean) / std) with the population std; 0.5 where std = 0.
        ``"prob"``: 1 − exp(−v), not relative to the sequence: for a surprisal v = −log p this is 1 − p,
            the probability mass of the other tokens at that state (sagerl's choice, for guides that
            must rank the tokens of one state the same way in every sequence).

    Args:
        values: (B, T) float tensor. mask: (B, T) 0/1.

    Raises:
        ValueError: unknown method or shape mismatch.
    """
    check_2d(values, "values")
    mask = as_bool_mask(mask, values)
    v = masked_zero(values.detach().float(), mask)
    count = mask.sum(dim=1, keepdim=True)
    if method == "minmax":
        # Quantiles per row over valid tokens only: NaN marks padding for nanquantile.
        nan = torch.full_like(v, float("nan"))
        rows = torch.where(mask, v, nan)
        has_any = count.squeeze(1) > 0
        lo = torch.zeros_like(count, dtype=v.dtype)
        hi = torch.zeros_like(count, dtype=v.dtype)
        if has_any.any():
            qs = torch.nanquantile(
                rows[has_any], torch.tensor([0.05, 0.95], dtype=v.dtype, device=v.device), dim=1
            )
            lo[has_any, 0] = qs[0]
            hi[has_any, 0] = qs[1]
        span = hi - lo
        w = (torch.minimum(torch.maximum(v, lo), hi) - lo) / torch.where(
            span > 0, span, torch.ones_like(span)
        )
        w = torch.where(span > 0, w, torch.zeros_like(w))
    elif method == "rank":
        # Average rank = #smaller + (#equal − 1) / 2 among the row's valid tokens, found by binary search
        # in the sorted row (padding sorts last as +inf, and valid values are made finite first).
        finite = torch.nan_to_num(
            v, nan=0.0, posinf=torch.finfo(v.dtype).max, neginf=torch.finfo(v.dtype).min
        )
        keyed = torch.where(mask, finite, torch.full_like(finite, float("inf")))
        ordered = torch.sort(keyed, dim=1).values
        smaller = torch.searchsorted(ordered, finite.contiguous(), right=False).to(v.dtype)
        at_most = torch.searchsorted(ordered, finite.contiguous(), right=True).to(v.dtype)
        rank = smaller + (at_most - smaller - 1) / 2
        denom = (count - 1).to(v.dtype)
        w = torch.where(denom > 0, rank / denom.clamp(min=1), torch.full_like(rank, 0.5))
    elif method == "zscore":
        n = count.clamp(min=1).to(v.dtype)
        mean = v.sum(dim=1, keepdim=True) / n
        var = masked_zero((v - mean) ** 2, mask).sum(dim=1, keepdim=True) / n
        std = var.sqrt()
        w = torch.where(
            std > 0, torch.sigmoid((v - mean) / torch.where(std > 0, std, torch.ones_like(std))), 0.5
        )
    elif method == "prob":
        w = -torch.expm1(-v.clamp(min=0.0))
    else:
        raise ValueError(f"unknown normalization {method!r}; expected one of {TOKEN_NORMALIZATIONS}")
    return masked_zero(w.to(values.dtype), mask)


def token_guide(
    logp: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 0.4,
    sigma: float = 0.0,
    normalization: str = "minmax",
    q_min: float = 0.6,
    q_max: float = 1.4,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Token (surprisal) guide q = clamp(1 + α·w + σ·w·ε): more anchor mass at surprising tokens.

    w ∈ [0, 1] is the surprisal −log p of the sampled token normalised per sequence
    (:func:`normalize_per_sequence`), and ε ~ N(0, 1) per token.

    Args:
        logp: (B, T) log-probability in nats of each sampled token (policy or reference).
        mask: (B, T) completion mask.
        alpha: α ≥ 0, deterministic strength. sigma: σ ≥ 0, noise scale (0: deterministic).
        normalization: ``"minmax"`` (5–95% quantile clip), ``"rank"``, ``"zscore"`` (sigmoid) or
            ``"prob"`` (1 − p, per state); see :func:`normalize_per_sequence`.
        q_min, q_max: clamp bounds. generator: torch RNG for ε.

    Returns:
        (B, T) detached q; 1 at padding.

    Raises:
        ValueError: shape mismatch, unknown normalization, α or σ not a finite number >= 0, or bad bounds.

    Source: SAGE (arXiv 2605.18864), token guide.
    """
    check_2d(logp, "logp")
    mask = as_bool_mask(mask, logp)
    _check_bounds(q_min, q_max)
    check_number("alpha", alpha, NONNEGATIVE)
    check_number("sigma", sigma, NONNEGATIVE)
    w = normalize_per_sequence(-logp.detach(), mask, normalization)
    q = 1.0 + alpha * w
    if sigma > 0:
        eps = torch.randn(w.shape, generator=generator, dtype=w.dtype, device=w.device)
        q = q + sigma * w * eps
    return _finish(q, mask, q_min, q_max)


def branch_token_guide(
    entropy: torch.Tensor,
    logp: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 0.3,
    tau: float = 1.2,
    normalization: str = "minmax",
    q_min: float = 0.6,
    q_max: float = 1.4,
) -> torch.Tensor:
    """Branch-token guide q = clamp(1 + γ·relu(H − τ)·w, q_min, q_max) (sagerl's, beyond the paper).

    w ∈ [0, 1] is the normalised surprisal −log p of the sampled token (:func:`normalize_per_sequence`, as
    in :func:`token_guide`). Below the entropy threshold q = 1 as for the branch guide; above it, q grows
    with how surprising the sampled token is, so at a branching state the anchor q·π_ref favours the less
    likely continuations instead of rescaling every token's anchor by the same factor.

    Args:
        entropy: (B, T) token entropy H_t in nats (policy or reference).
        logp: (B, T) log-probability in nats of each sampled token (from the same model as ``entropy``).
        mask: (B, T) completion mask.
        gamma, tau: as :func:`branch_guide`. normalization: as :func:`token_guide`.
        q_min, q_max: clamp bounds.

    Returns:
        (B, T) detached q; 1 at padding.

    Raises:
        ValueError: shape mismatch, γ or τ not a finite number >= 0, unknown normalization or bad bounds.
    """
    check_2d(entropy, "entropy")
    check_same_shape(entropy=entropy, logp=logp)
    mask = as_bool_mask(mask, entropy)
    _check_bounds(q_min, q_max)
    check_number("gamma", gamma, NONNEGATIVE)
    check_number("tau", tau, NONNEGATIVE)
    excess = torch.relu(masked_zero(entropy.detach(), mask) - tau)
    w = normalize_per_sequence(-logp.detach(), mask, normalization)
    return _finish(1.0 + gamma * excess * w, mask, q_min, q_max)


def teacher_guide(
    teacher_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    lam: float = 1.0,
    q_min: float = 0.6,
    q_max: float = 1.4,
) -> torch.Tensor:
    """Teacher guide q = clamp((π_teacher(y_t | s_t) / π_ref(y_t | s_t))^λ, q_min, q_max) (sagerl's).

    The anchor q·π_ref then leans toward the teacher: with λ = 1 and no clamp it *is* the teacher at every
    sampled token. The SAGE authors name guides "learned from stronger models" as future work; this is the
    simplest such guide. It costs one extra forward pass of the teacher on the sampled tokens (no_grad).

    Args:
        teacher_logp: (B, T) log π_teacher of the sampled tokens, nats (same tokenizer as the policy).
        ref_logp: (B, T) log π_ref of the same tokens, nats.
        mask: (B, T) completion mask.
        lam: λ ≥ 0, the strength (0: q ≡ 1).
        q_min, q_max: clamp bounds.

    Returns:
        (B, T) detached q; 1 at padding.

    Raises:
        ValueError: shape mismatch, λ not a finite number >= 0, or bad bounds.
    """
    check_2d(teacher_logp, "teacher_logp")
    check_same_shape(teacher_logp=teacher_logp, ref_logp=ref_logp)
    mask = as_bool_mask(mask, teacher_logp)
    _check_bounds(q_min, q_max)
    check_number("lam", lam, NONNEGATIVE)
    log_ratio = masked_zero(teacher_logp.detach() - ref_logp.detach(), mask)
    return _finish(torch.exp((lam * log_ratio).clamp(-30.0, 30.0)), mask, q_min, q_max)


def permutation_guide(
    q: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random baseline: permute each sequence's q values at random among its valid tokens.

    Each sequence keeps its multiset of q values (so the distribution of q is unchanged) while the link
    between q and branching points is broken. Padding stays 1.

    Args:
        q: (B, T) guide values (typically from :func:`branch_guide`). mask: (B, T). generator: torch RNG.

    Returns:
        (B, T) detached permuted q.

    Source: SAGE (arXiv 2605.18864), random-guide baseline.
    """
    check_2d(q, "q")
    mask = as_bool_mask(mask, q)
    q = torch.where(mask, q.detach(), torch.ones((), dtype=q.dtype, device=q.device))
    keys = torch.rand(q.shape, generator=generator, device=q.device)
    keys = torch.where(mask, keys, torch.full_like(keys, 2.0))  # padding sorts after every valid token
    source = torch.argsort(keys, dim=1)  # valid positions in random order, then padding
    target = torch.argsort(
        (~mask).to(torch.int8), dim=1, stable=True
    )  # valid positions in order, then padding
    out = torch.empty_like(q)
    out.scatter_(1, target, q.gather(1, source))
    return out


def gaussian_guide(
    mask: torch.Tensor,
    eps: float = 0.1,
    sigma: float = 0.2,
    q_min: float = 0.6,
    q_max: float = 1.4,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Random baseline of the authors' code: with probability ``eps`` q = 1 + σ·ε (ε ~ N(0, 1)), else 1.

    Args:
        mask: (B, T) completion mask. eps: probability in [0, 1]. sigma: σ ≥ 0.
        q_min, q_max: clamp bounds. generator: torch RNG.

    Returns:
        (B, T) detached q; 1 at padding.

    Raises:
        ValueError: eps outside [0, 1], σ not a finite number >= 0, or bad bounds.
    """
    check_2d(mask, "mask")
    mask = as_bool_mask(mask, mask)
    _check_bounds(q_min, q_max)
    check_number("eps", eps, UNIT)
    check_number("sigma", sigma, NONNEGATIVE)
    hit = torch.rand(mask.shape, generator=generator, device=mask.device) < eps
    noise = torch.randn(mask.shape, generator=generator, device=mask.device)
    q = torch.where(hit, 1.0 + sigma * noise, torch.ones_like(noise))
    return _finish(q, mask, q_min, q_max)


def random_guide(
    mask: torch.Tensor,
    kind: str = "permutation",
    *,
    entropy: torch.Tensor | None = None,
    gamma: float = 0.3,
    tau: float = 1.2,
    eps: float = 0.1,
    sigma: float = 0.2,
    q_min: float = 0.6,
    q_max: float = 1.4,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Random guide, ``kind="permutation"`` (the paper's baseline: a permuted branch guide, needs
    ``entropy``) or ``kind="gaussian"`` (the authors' code). Returns a (B, T) detached q.

    Raises:
        ValueError: unknown kind, ``entropy`` missing for the permutation kind, or a numeric argument out of
            its range (γ, τ, σ >= 0; eps in [0, 1]; 0 < q_min <= 1 <= q_max), whichever kind reads it.
    """
    for name, value, allowed in (
        ("gamma", gamma, NONNEGATIVE),
        ("tau", tau, NONNEGATIVE),
        ("eps", eps, UNIT),
        ("sigma", sigma, NONNEGATIVE),
    ):
        check_number(name, value, allowed)
    if kind == "permutation":
        if entropy is None:
            raise ValueError(
                "the permutation random guide needs the token entropies (it permutes the branch guide)"
            )
        q = branch_guide(entropy, mask, gamma=gamma, tau=tau, q_min=q_min, q_max=q_max)
        return permutation_guide(q, mask, generator=generator)
    if kind == "gaussian":
        return gaussian_guide(mask, eps=eps, sigma=sigma, q_min=q_min, q_max=q_max, generator=generator)
    raise ValueError(f"unknown random guide kind {kind!r}; expected one of {RANDOM_KINDS}")
