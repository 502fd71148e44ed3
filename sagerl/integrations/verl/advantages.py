"""sagerl's outcome advantage estimators as verl advantage estimators: ``algorithm.adv_estimator=NAME``.

Registered through verl's public ``register_adv_est`` when the plugin loads:

- ``bnpo``: BNPO's (R − p)/Beta_pdf(p; α, β) (Xiao et al. 2025, arXiv 2506.02864);
- ``passk`` (Chen et al. 2025), ``pkpo`` (Walder & Karkhanis 2025): pass@k-aware advantages, with k from
  ``+algorithm.passk_k=K`` (default 4) and PKPO's baseline from ``+algorithm.pkpo_baseline=...``;
- ``maxpo`` (Takashiro et al. 2026): max@K with the leave-two-out baseline, K from ``passk_k`` (<= n - 1);
- ``w_reinforce`` (λ from ``+algorithm.w_reinforce_lambda``, default 0.1), ``psr``, ``nsr`` (Zhu et al. 2025);
- ``rs_grpo`` (β_r from ``+algorithm.risk_beta``, default 2; Jiang et al. 2025) and ``passk_mix`` (sagerl's
  mixture; k from ``passk_k``, w from ``+algorithm.passk_mix_weight``, unset: per group).

verl hands an estimator the token-level rewards (B, T), the response mask (B, T), the prompt ids (``index``,
one per row; the rows of a group need not be contiguous) and the ``algorithm`` config; the advantage is
:func:`sagerl.objective.compute_advantages` of each row's summed reward, broadcast over its response tokens
(returns = advantages, as verl's GRPO does).

The estimators that need more than the rewards (:data:`sagerl.objective.ADVANTAGE_INPUTS`) are registered only to
refuse them with the reason, since verl 0.9.1's ``compute_advantage`` hands an estimator rewards, mask, uid and
config only: ``unlikely`` ranks completions by π_old's log-probs, ``darling`` partitions the completions' texts,
``ucb_mean``/``ucb_con``/``outcome_batch`` compare their final answers (and the UCB ones keep counts across
steps, which would have to live in verl's checkpoints). A k schedule (``+algorithm.passk_k_schedule``) is refused
too: verl passes advantage estimators no training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sagerl.errors import ConfigError
from sagerl.objective import ADVANTAGE_INPUTS, ADVANTAGES, compute_advantages
from sagerl.objective.registry import ADVANTAGE_SETTINGS
from sagerl.objective.registry import ESTIMATORS as ESTIMATORS_BY_NAME

VERL_NATIVE = ("grpo", "dr_grpo")
"""sagerl's estimators that verl has itself (``adv_estimator=grpo``, with ``norm_adv_by_std_in_grpo``)."""
VERL_ESTIMATORS = tuple(n for n in ADVANTAGES if n not in VERL_NATIVE and not ADVANTAGE_INPUTS[n])
"""The names the plugin registers with verl: every estimator of the rewards alone."""
REFUSED = tuple(n for n in ADVANTAGES if ADVANTAGE_INPUTS[n])
"""The names the plugin registers only to refuse them with the reason (:func:`refusal`)."""
CONFIG_KEYS = {
    s.name: (field, s.default)
    for field, s in ADVANTAGE_SETTINGS.items()
    if any(s in ESTIMATORS_BY_NAME[name].settings for name in VERL_ESTIMATORS)
}
"""compute_advantages keyword -> (the ``algorithm`` config key that sets it, its default): every setting of the
registered estimators, as their modules declare it (:data:`sagerl.objective.registry.ADVANTAGE_SETTINGS`)."""
MISSING_INPUTS = {
    "sequence_logp": "π_old's log-probs",
    "clusters": "the completions (to partition them)",
    "answers": "the completions' final answers",
    "counts": "state across steps",
}
"""What each estimator input is, for the refusal's reason."""


def _params(config: Any) -> dict:
    if config is None:
        return {key: default for key, (_, default) in CONFIG_KEYS.items() if default is not None}
    get = config.get if hasattr(config, "get") else lambda key, default=None: getattr(config, key, default)
    schedule = get("passk_k_schedule", None)
    if schedule not in (None, "constant"):
        raise ConfigError(
            f"algorithm.passk_k_schedule={schedule!r} is not available in verl: verl 0.9.1 passes advantage "
            "estimators no training step, so k cannot follow the optimizer steps; use the TRL adapter (sagerl train "
            "--preset pkpo-anneal or passk-two-stage)"
        )
    return {key: get(name, default) for key, (name, default) in CONFIG_KEYS.items()}


def outcome_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (B, T): estimator ``name`` of each row's summed reward, times the mask.

    Args:
        name: one of :data:`VERL_ESTIMATORS`.
        token_level_rewards: (B, T) rewards; a row's outcome reward is its sum.
        response_mask: (B, T) 0/1.
        index: (B,) group id (verl's ``uid``) of each row.
        config: verl's ``algorithm`` config (``passk_k``, ``pkpo_baseline``, ``w_reinforce_lambda``).

    Raises:
        ValueError: groups of different sizes, and whatever the estimator raises (rewards outside [0, 1] for
            BNPO, other than 0/1 for passk and W-REINFORCE; k outside 1..n).
    """
    scores = token_level_rewards.sum(dim=-1)
    ids, group_of_row = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    sizes = np.bincount(group_of_row)
    if len(set(sizes.tolist())) != 1:
        raise ValueError(
            f"{name} needs groups of equal size (rollout.n each), got sizes {sorted(set(sizes.tolist()))}"
        )
    order = torch.as_tensor(np.argsort(group_of_row, kind="stable"))
    advantages = torch.empty_like(scores)
    advantages[order] = compute_advantages(name, scores[order], int(sizes[0]), **_params(config))
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def _estimator(name: str) -> Callable:
    def estimator(token_level_rewards, response_mask, index, config=None, **kwargs):
        return outcome_advantage(name, token_level_rewards, response_mask, index, config)

    estimator.__name__ = f"compute_{name}_outcome_advantage"
    estimator.__doc__ = f"verl's ``algorithm.adv_estimator={name}``: :func:`outcome_advantage` with {name!r}."
    return estimator


def refusal(name: str) -> Callable:
    """verl's ``algorithm.adv_estimator=NAME`` for an estimator verl cannot feed: raises with the reason.

    The function raises :class:`ConfigError` (always). verl validates no ``algorithm`` section at start-up that a
    plugin could extend, so it is raised at the first advantage computation, after the first rollout.
    """
    missing = ", ".join(MISSING_INPUTS[i] for i in ADVANTAGE_INPUTS[name])
    preset = name.replace("_", "-")  # the TRL adapter's preset of the estimator

    def estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        raise ConfigError(
            f"algorithm.adv_estimator={name} is not available in verl: it reads {missing}, which verl 0.9.1 does "
            f"not pass to advantage estimators (they get rewards, mask, uid and config); use the TRL adapter "
            f"(sagerl train --preset {preset})"
        )

    estimator.__name__ = f"compute_{name}_refusal"
    estimator.__doc__ = f"``algorithm.adv_estimator={name}``: refused with the reason (:func:`refusal`)."
    return estimator


ESTIMATORS: dict[str, Callable] = {name: _estimator(name) for name in VERL_ESTIMATORS}
ESTIMATORS.update({name: refusal(name) for name in REFUSED})
"""The estimator functions the plugin registers, by name (the :data:`REFUSED` ones only to refuse them)."""
compute_bnpo_outcome_advantage = ESTIMATORS["bnpo"]
compute_unlikely_refusal = ESTIMATORS["unlikely"]
