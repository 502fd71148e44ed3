"""The policy term by name: the clipped surrogate and TRL's alternative loss types
(:mod:`sagerl.objective.surrogate`: GSPO, CISPO, SAPO, VESPO), the covariance variants
(:mod:`sagerl.objective.covariance`: Clip-Cov, KL-Cov), SimKO (:mod:`sagerl.objective.simko`), FlowRL
(:mod:`sagerl.objective.flowrl`) and APO (:mod:`sagerl.objective.apo`).

Every entry of :data:`POLICY_LOSSES` has the signature ``fn(logp, old_logp, advantages, mask, *, epsilon_low,
epsilon_high, delta, **params) -> SurrogateOutput`` with (B, T) tensors, and changes the policy-gradient term
only: :func:`sagerl.objective.sage_loss` adds the (shaped) KL anchor on top, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sagerl.objective._checks import Setting
from sagerl.objective.apo import INPUTS as APO_INPUTS
from sagerl.objective.apo import SETTINGS as APO_SETTINGS
from sagerl.objective.apo import apo_surrogate
from sagerl.objective.covariance import (
    CLIP_COV_SETTINGS,
    KL_COV_SETTINGS,
    clip_cov_surrogate,
    kl_cov_surrogate,
)
from sagerl.objective.flowrl import INPUTS as FLOWRL_INPUTS
from sagerl.objective.flowrl import SETTINGS as FLOWRL_SETTINGS
from sagerl.objective.flowrl import flowrl_surrogate
from sagerl.objective.simko import INPUTS as SIMKO_INPUTS
from sagerl.objective.simko import SETTINGS as SIMKO_SETTINGS
from sagerl.objective.simko import simko_surrogate
from sagerl.objective.surrogate import (
    IMPORTANCE_SAMPLING_LEVELS,
    SurrogateOutput,
    cispo_surrogate,
    clip_surrogate,
    clipped_surrogate,
    gspo_surrogate,
    sapo_surrogate,
    sequence_log_ratio,
    vespo_surrogate,
    vespo_weights,
)

__all__ = [
    "IMPORTANCE_SAMPLING_LEVELS",
    "POLICY_LOSSES",
    "POLICY_LOSS_INPUTS",
    "POLICY_LOSS_SETTINGS",
    "SurrogateOutput",
    "apo_surrogate",
    "cispo_surrogate",
    "clip_surrogate",
    "clipped_surrogate",
    "flowrl_surrogate",
    "gspo_surrogate",
    "policy_loss",
    "sapo_surrogate",
    "sequence_log_ratio",
    "simko_surrogate",
    "vespo_surrogate",
    "vespo_weights",
]

POLICY_LOSSES: dict[str, Callable[..., SurrogateOutput]] = {
    "clip": clip_surrogate,
    "gspo": gspo_surrogate,
    "cispo": cispo_surrogate,
    "sapo": sapo_surrogate,
    "vespo": vespo_surrogate,
    "clip_cov": clip_cov_surrogate,
    "kl_cov": kl_cov_surrogate,
    "simko": simko_surrogate,
    "flowrl": flowrl_surrogate,
    "apo": apo_surrogate,
}
"""name -> policy term (see the module docstring; ``sage_loss(policy_loss=...)``)."""
POLICY_LOSS_SETTINGS: dict[str, tuple[Setting, ...]] = {
    "clip_cov": CLIP_COV_SETTINGS,
    "kl_cov": KL_COV_SETTINGS,
    "simko": SIMKO_SETTINGS,
    "flowrl": FLOWRL_SETTINGS,
    "apo": APO_SETTINGS,
}
"""name -> the settings its module declares (keywords of that term; the engines' config fields of the same
names). The TRL loss types' own parameters (CISPO's ratio bound, SAPO's temperatures, VESPO's) are TRL's fields,
mapped by ``SAGEConfig.resolved_policy_loss_params``."""
POLICY_LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "simko": SIMKO_INPUTS,
    "flowrl": FLOWRL_INPUTS,
    "apo": APO_INPUTS,
}
"""name -> the per-token inputs beyond PPO's that an engine computes and passes with the term's settings."""


def policy_loss(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    **params,
) -> SurrogateOutput:
    """The per-token policy term of variant ``name`` (:data:`POLICY_LOSSES`); ``params`` are the variant's
    own keywords (CISPO's ``ratio_max``, Clip-Cov's ``clip_cov_ratio``, ...).

    Raises:
        ValueError: unknown name or parameters, and whatever the variant raises.
    """
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy_loss {name!r}; expected one of {tuple(POLICY_LOSSES)}")
    try:
        return POLICY_LOSSES[name](
            logp,
            old_logp,
            advantages,
            mask,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            delta=delta,
            **params,
        )
    except TypeError as exc:
        raise ValueError(f"policy_loss {name!r}: {exc}") from exc
