"""APO: Anchored Policy Optimization (Wang, Li, Guo, Chen, Li, Wang, Chen, Chen 2026, "Anchored Policy Optimization:
Mitigating Exploration Collapse via Support-Constrained Rectification", arXiv 2602.05717, ICML; the authors' code is
reported at 1BIMU/APO_OFFICAL, on verl, ``loss_mode=apo_ratio``).

**Source status.** Neither the paper's method section nor the authors' code could be read from the stores this
project searches (the paper's abstract and introduction, and the repository's README, could). The equation numbers of
the paper are therefore not cited here, and this module is sagerl's reading of what the abstract and README state:

- the *Safe Manifold* S_t at a completion position is the reference model's high-confidence support, its top-K
  tokens: S_t = TopK(π_ref(·|s_t));
- a *push* λ "aggressively suppresses incorrect responses": the negative advantages are scaled by λ;
- a *pull* β "selectively pulls the policy back towards the Safe Manifold when errors occur": only on the tokens with
  a negative advantage, the policy's mass on S_t, M_θ(s_t) = Σ_{v ∈ S_t} π_θ(v|s_t), is raised (the abstract: APO's
  gradient maximises the Safe Manifold's mass during error correction);
- *Ratio Rectification*, "within the PPO trust region": the pull is written, as PPO's term is, through an
  importance ratio, here of the manifold's mass, r^M_t = M_θ(s_t)/M_old(s_t), clipped as PPO clips a ratio with a
  positive advantage.

Per valid token, with ρ_t = π_θ(y_t)/π_old(y_t) and A_t the token's advantage (the completion's for GRPO):

    A'_t = λ·A_t if A_t < 0 else A_t
    ℓ_t = −min(ρ_t·A'_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A'_t)                         (PPO, with the push)
          + 1[A_t < 0] · β·(1 − min(r^M_t, clip(r^M_t, 1 − ε_low, 1 + ε_high)))           (the pull)

The pull's value is 0 on-policy (r^M = 1) and its gradient there is −β·∇log M_θ(s_t) = −β·Σ_{v∈S_t} (π_θ(v)/M_θ)·
∇log π_θ(v): in logit space −β·(1[v ∈ S_t]·π_v/M − π_v), so a descent step raises every token of the Safe Manifold
(π_v/M − π_v > 0) and lowers every other one: where KL matches π_ref's shape, the pull only restores the mass of its
support. With λ = 1 and β = 0 the term is PPO's clipped surrogate exactly.

Defaults (λ = 1, β = 0.1, K = 5) are sagerl's: the authors' could not be read. APO needs no 0/1 rewards (it reads
the advantage's sign only). Inputs beyond PPO's: the log-probs, under the policy (with gradient) and under π_old, of
the reference's K most likely tokens at each position, (B, T, K) (:func:`safe_manifold_logp` gathers them).
"""

from __future__ import annotations

import torch

from sagerl.objective._checks import (
    COUNT,
    NONNEGATIVE,
    POSITIVE,
    Setting,
    as_bool_mask,
    check_number,
    check_same_shape,
)
from sagerl.objective.surrogate import SurrogateOutput, _advantages_2d, _check_epsilons, _clip_ratio

SETTINGS = (
    Setting(
        "apo_lambda",
        "apo_lambda",
        1.0,
        "APO: the push λ > 0, the factor of every negative advantage (1: GRPO's push; sagerl's default, the "
        "authors' could not be read).",
        POSITIVE,
    ),
    Setting(
        "apo_beta",
        "apo_beta",
        0.1,
        "APO: the pull β >= 0 towards the Safe Manifold (the reference's top-K tokens) on the tokens with a negative "
        "advantage: β·(1 − clipped ratio of the manifold's mass) (0: no pull; sagerl's default).",
        NONNEGATIVE,
    ),
    Setting(
        "apo_top_k",
        "apo_top_k",
        5,
        "APO: K, the size of the Safe Manifold: the reference model's K most likely tokens at each position "
        "(sagerl's default).",
        COUNT,
        "int",
    ),
)
"""APO's settings (keywords of :func:`apo_surrogate`; the engines' config fields of the same names)."""
INPUTS = ("manifold_logp", "old_manifold_logp")
"""The per-token inputs an engine computes for :func:`apo_surrogate`, beyond PPO's."""


def safe_manifold_logp(logprobs: torch.Tensor, ref_topk_ids: torch.Tensor) -> torch.Tensor:
    """(B, T, K) log π of the Safe Manifold's tokens: ``logprobs`` (B, T, V), a policy's log-probs over the
    vocabulary (nats; its gradient flows through), gathered at ``ref_topk_ids`` (B, T, K), the reference model's K
    most likely token ids at each position.

    Raises:
        ValueError: ``ref_topk_ids`` not (B, T, K) for ``logprobs``' (B, T), or ids outside the vocabulary.
    """
    if ref_topk_ids.dim() != 3 or ref_topk_ids.shape[:2] != logprobs.shape[:2]:
        raise ValueError(
            f"ref_topk_ids must be (B, T, K) with (B, T) = {tuple(logprobs.shape[:2])}, got {tuple(ref_topk_ids.shape)}"
        )
    ids = ref_topk_ids.long()
    if ids.numel() and (ids.min() < 0 or ids.max() >= logprobs.shape[-1]):
        raise ValueError(f"ref_topk_ids must be token ids in [0, {logprobs.shape[-1]})")
    return logprobs.gather(-1, ids)


def apo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    manifold_logp: torch.Tensor,
    old_manifold_logp: torch.Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    apo_lambda: float = 1.0,
    apo_beta: float = 0.1,
    apo_top_k: int = 5,
    log_ratio_clip: float = 20.0,
) -> SurrogateOutput:
    """APO's per-token loss (module docstring): PPO's clip with ε_low, ε_high and the optional ``delta`` on the
    pushed advantages, plus the pull towards the Safe Manifold on the tokens with a negative advantage.

    Args:
        logp: (B, T) log π_θ of the sampled tokens, nats, with gradient. old_logp: (B, T) log π_old (detached).
        advantages: (B,), (B, 1) or (B, T); a token is pushed and pulled where its advantage is negative.
        mask: (B, T) valid tokens.
        manifold_logp: (B, T, K) log π_θ of the reference model's K most likely tokens at each position (the Safe
            Manifold), nats, with gradient. old_manifold_logp: (B, T, K) their log π_old (detached).
        apo_lambda: the push λ > 0. apo_beta: the pull β >= 0. apo_top_k: K, an integer >= 1 (must be
            ``manifold_logp.shape[-1]``). log_ratio_clip: clamp of every log-ratio (the mass ratio's included).

    Returns:
        :class:`~sagerl.objective.surrogate.SurrogateOutput`: ``loss`` (B, T) with gradient (0 at masked tokens),
        the ratio ρ, PPO's clip masks, and ``covariance_masked``: the valid tokens APO pushed and pulled (a negative
        advantage).

    Raises:
        ValueError: shapes that differ (or a last dimension other than K), λ, β, K or the PPO bounds out of range
            or not finite.
    """
    check_same_shape(logp=logp, old_logp=old_logp)
    _check_epsilons(epsilon_low, epsilon_high, delta, log_ratio_clip)
    check_number("apo_lambda", apo_lambda, POSITIVE)
    check_number("apo_beta", apo_beta, NONNEGATIVE)
    check_number("apo_top_k", apo_top_k, COUNT)
    if manifold_logp.shape != (*logp.shape, apo_top_k) or old_manifold_logp.shape != manifold_logp.shape:
        raise ValueError(
            f"manifold_logp and old_manifold_logp must be (B, T, K) = {(*logp.shape, apo_top_k)}, got "
            f"{tuple(manifold_logp.shape)} and {tuple(old_manifold_logp.shape)}"
        )
    valid = as_bool_mask(mask, logp)
    adv = _advantages_2d(advantages, logp).expand_as(logp)
    negative = (adv < 0) & valid

    ratio = torch.exp((logp - old_logp.detach()).clamp(-log_ratio_clip, log_ratio_clip))
    pushed = torch.where(negative, adv * apo_lambda, adv)
    out = _clip_ratio(ratio, pushed, epsilon_low, epsilon_high, delta)

    # the Safe Manifold's mass under π_θ and π_old, as a ratio r^M = M_θ / M_old
    log_mass = torch.logsumexp(manifold_logp, dim=-1)
    old_log_mass = torch.logsumexp(old_manifold_logp.detach(), dim=-1)
    mass_ratio = torch.exp((log_mass - old_log_mass).clamp(-log_ratio_clip, log_ratio_clip))
    hi = epsilon_low if epsilon_high is None else epsilon_high
    held = torch.min(mass_ratio, mass_ratio.clamp(1 - epsilon_low, 1 + hi))
    pull = apo_beta * (1 - held)
    zero = torch.zeros((), dtype=out.loss.dtype, device=out.loss.device)
    out.loss = torch.where(valid, out.loss + torch.where(negative, pull, zero), zero)
    out.covariance_masked = negative
    return out
