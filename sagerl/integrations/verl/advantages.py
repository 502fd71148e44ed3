"""sagerl's outcome advantage estimators as verl advantage estimators: ``algorithm.adv_estimator=NAME``.

Registered through verl's public ``register_adv_est`` when the plugin loads:

- ``bnpo``: BNPO's (R − p)/Beta_pdf(p; α, β) (Xiao et al. 2025, arXiv 2506.02864);
- ``passk`` (Chen et al. 2025), ``pkpo`` (Walder & Karkhanis 2025): pass@k-aware advantages, with k from
  ``+algorithm.passk_k=K`` (default 4) and PKPO's baseline from ``+algorithm.pkpo_baseline=...``;
- ``w_reinforce`` (λ from ``+algorithm.w_reinforce_lambda``, default 0.1), ``psr``, ``nsr`` (Zhu et al. 2025).

verl hands an estimator the token-level rewards (B, T), the response mask (B, T), the prompt ids (``index``,
one per row; the rows of a group need not be contiguous) and the ``algorithm`` config; the advantage is
:func:`sagerl.objective.compute_advantages` of each row's summed reward, broadcast over its response tokens
(returns = advantages, as verl's GRPO does). The unlikeliness reward (``unlikely``) is registered only to refuse
it with the reason: it ranks a group's completions by π_old's log-probs, which verl 0.9.1 does not pass to
advantage estimators (its ``compute_advantage`` hands them rewards, mask, uid and config only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sagerl.objective import compute_advantages

VERL_ESTIMATORS = ("bnpo", "passk", "pkpo", "w_reinforce", "psr", "nsr")
"""The names the plugin registers with verl."""
CONFIG_KEYS = {"k": ("passk_k", 4), "baseline": ("pkpo_baseline", None), "lam": ("w_reinforce_lambda", None)}
"""compute_advantages keyword -> (the ``algorithm`` config key that sets it, its default; None: sagerl's)."""


def _params(config: Any) -> dict:
    if config is None:
        return {key: default for key, (_, default) in CONFIG_KEYS.items() if default is not None}
    get = config.get if hasattr(config, "get") else lambda key, default=None: getattr(config, key, default)
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


def compute_unlikely_refusal(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """``algorithm.adv_estimator=unlikely``: refused with the reason (verl passes estimators no π_old).

    Raises:
        ConfigError: always. verl validates no ``algorithm`` section at start-up that a plugin could extend,
            so this is raised at the first advantage computation, after the first rollout.
    """
    from sagerl.errors import ConfigError

    raise ConfigError(
        "algorithm.adv_estimator=unlikely is not available in verl: the unlikeliness reward ranks a group's "
        "completions by π_old's log-probs, which verl 0.9.1 does not pass to advantage estimators; use the TRL "
        "adapter (sagerl train --preset unlikely)"
    )


ESTIMATORS: dict[str, Callable] = {name: _estimator(name) for name in VERL_ESTIMATORS}
ESTIMATORS["unlikely"] = compute_unlikely_refusal
"""The estimator functions the plugin registers, by name (``unlikely`` only to refuse it with the reason)."""
compute_bnpo_outcome_advantage = ESTIMATORS["bnpo"]
