"""The SAGE objective in pure torch: no trainer, no TRL, no verl import, so every engine shares it.

Per-token functions take (B, T) tensors and a (B, T) completion mask; log-probabilities and entropies are
in nats. Source: SAGE, "Shaping Anchors for Guided Exploration in RLVR of LLMs" (Lee, Kang, Hwang,
arXiv 2605.18864), and the papers cited in each module.
"""

from sagerl.objective.advantages import beta_parameters, bnpo_advantages, dr_grpo_advantages, grpo_advantages
from sagerl.objective.aggregation import LOSS_AGG_MODES, aggregate_loss
from sagerl.objective.dapo import dynamic_sampling_mask, overlong_penalty
from sagerl.objective.divergences import KL_ESTIMATORS, forward_kl, shaped_kl
from sagerl.objective.guides import (
    branch_guide,
    branch_token_guide,
    gaussian_guide,
    normalize_per_sequence,
    permutation_guide,
    random_guide,
    teacher_guide,
    token_guide,
)
from sagerl.objective.loss import DIVERGENCES, KL_PLACEMENTS, LossOutput, kl_to_go, sage_loss
from sagerl.objective.policy_loss import SurrogateOutput, clipped_surrogate
from sagerl.objective.registry import (
    ADVANTAGES,
    GUIDES,
    GuideParams,
    compute_advantages,
    compute_guide,
    get,
    guide_inputs,
)
from sagerl.objective.schedules import SCHEDULES, ConstantSchedule, CosineRestartSchedule, make_schedule

__all__ = [
    "ADVANTAGES",
    "DIVERGENCES",
    "GUIDES",
    "KL_ESTIMATORS",
    "KL_PLACEMENTS",
    "LOSS_AGG_MODES",
    "SCHEDULES",
    "ConstantSchedule",
    "CosineRestartSchedule",
    "GuideParams",
    "LossOutput",
    "SurrogateOutput",
    "aggregate_loss",
    "beta_parameters",
    "bnpo_advantages",
    "branch_guide",
    "branch_token_guide",
    "clipped_surrogate",
    "compute_advantages",
    "compute_guide",
    "dr_grpo_advantages",
    "dynamic_sampling_mask",
    "forward_kl",
    "gaussian_guide",
    "get",
    "grpo_advantages",
    "guide_inputs",
    "kl_to_go",
    "make_schedule",
    "normalize_per_sequence",
    "overlong_penalty",
    "permutation_guide",
    "random_guide",
    "sage_loss",
    "shaped_kl",
    "teacher_guide",
    "token_guide",
]
