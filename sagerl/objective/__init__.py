"""The SAGE objective in pure torch: no trainer, no TRL, no verl import, so every engine shares it.

Per-token functions take (B, T) tensors and a (B, T) completion mask; log-probabilities and entropies are
in nats. Source: SAGE, "Shaping Anchors for Guided Exploration in RLVR of LLMs" (Lee, Kang, Hwang,
arXiv 2605.18864), and the papers cited in each module.
"""

from sagerl.objective._checks import Range, check_number
from sagerl.objective.advantages import beta_parameters, bnpo_advantages, dr_grpo_advantages, grpo_advantages
from sagerl.objective.aggregation import LOSS_AGG_MODES, aggregate_loss
from sagerl.objective.apo import apo_surrogate, safe_manifold_logp
from sagerl.objective.covariance import clip_cov_surrogate, kl_cov_surrogate, token_covariance
from sagerl.objective.dapo import dynamic_sampling_mask, overlong_penalty, zero_advantage_mask
from sagerl.objective.divergences import KL_ESTIMATORS, forward_kl, shaped_kl
from sagerl.objective.entropy_advantage import entropy_advantage
from sagerl.objective.flowrl import flowrl_surrogate
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
from sagerl.objective.maxpo import maxpo_advantages
from sagerl.objective.mixture import passk_mix_advantages
from sagerl.objective.outcome_exploration import (
    OUTCOME_KINDS,
    OutcomeCounts,
    batch_penalty,
    outcome_advantages,
    ucb_bonus,
)
from sagerl.objective.partition_diversity import (
    PARTITIONS,
    darling_advantages,
    lexical_partition,
    partition_diversity,
    partition_from_keys,
)
from sagerl.objective.passk_advantages import PKPO_BASELINES, pass_at_k, passk_advantages, pkpo_advantages
from sagerl.objective.policy_loss import POLICY_LOSSES, SurrogateOutput, clipped_surrogate, policy_loss
from sagerl.objective.prompt_weights import prompt_weight
from sagerl.objective.registry import (
    ADVANTAGE_INPUTS,
    ADVANTAGE_PARAMS,
    ADVANTAGES,
    BINARY_ADVANTAGES,
    ESTIMATORS,
    GUIDES,
    SIGNAL_ON_EQUAL_REWARDS,
    Estimator,
    GuideParams,
    compute_advantages,
    compute_guide,
    get,
    guide_inputs,
)
from sagerl.objective.risk_seeking import entropic_risk_weight, rs_grpo_advantages
from sagerl.objective.schedules import (
    SCHEDULES,
    ConstantSchedule,
    CosineRestartSchedule,
    LinearSchedule,
    StepSchedule,
    integer_at,
    make_schedule,
)
from sagerl.objective.signed_advantages import SIGNED_ESTIMATORS, w_reinforce_advantages
from sagerl.objective.simko import simko_surrogate
from sagerl.objective.unlikeliness import likelihood_ranks, unlikeliness_advantages, unlikeliness_rewards

__all__ = [
    "ADVANTAGES",
    "ADVANTAGE_INPUTS",
    "ADVANTAGE_PARAMS",
    "BINARY_ADVANTAGES",
    "DIVERGENCES",
    "ESTIMATORS",
    "GUIDES",
    "KL_ESTIMATORS",
    "KL_PLACEMENTS",
    "LOSS_AGG_MODES",
    "OUTCOME_KINDS",
    "PARTITIONS",
    "PKPO_BASELINES",
    "POLICY_LOSSES",
    "SCHEDULES",
    "SIGNAL_ON_EQUAL_REWARDS",
    "SIGNED_ESTIMATORS",
    "ConstantSchedule",
    "CosineRestartSchedule",
    "Estimator",
    "GuideParams",
    "LinearSchedule",
    "LossOutput",
    "OutcomeCounts",
    "Range",
    "StepSchedule",
    "SurrogateOutput",
    "aggregate_loss",
    "apo_surrogate",
    "batch_penalty",
    "beta_parameters",
    "bnpo_advantages",
    "branch_guide",
    "branch_token_guide",
    "check_number",
    "clip_cov_surrogate",
    "clipped_surrogate",
    "compute_advantages",
    "compute_guide",
    "darling_advantages",
    "dr_grpo_advantages",
    "dynamic_sampling_mask",
    "entropic_risk_weight",
    "entropy_advantage",
    "flowrl_surrogate",
    "forward_kl",
    "gaussian_guide",
    "get",
    "grpo_advantages",
    "guide_inputs",
    "integer_at",
    "kl_cov_surrogate",
    "kl_to_go",
    "lexical_partition",
    "likelihood_ranks",
    "make_schedule",
    "maxpo_advantages",
    "normalize_per_sequence",
    "outcome_advantages",
    "overlong_penalty",
    "partition_diversity",
    "partition_from_keys",
    "pass_at_k",
    "passk_advantages",
    "passk_mix_advantages",
    "permutation_guide",
    "pkpo_advantages",
    "policy_loss",
    "prompt_weight",
    "random_guide",
    "rs_grpo_advantages",
    "safe_manifold_logp",
    "sage_loss",
    "shaped_kl",
    "simko_surrogate",
    "teacher_guide",
    "token_covariance",
    "token_guide",
    "ucb_bonus",
    "unlikeliness_advantages",
    "unlikeliness_rewards",
    "w_reinforce_advantages",
    "zero_advantage_mask",
]
