"""``SAGEConfig``: TRL's ``GRPOConfig`` plus the SAGE fields. A TRL user swaps one class and changes nothing else.

Every TRL field keeps its meaning. The fields added here choose the variants of :mod:`sagerl.objective`:
the guide and its parameters, the anchor divergence, where the KL goes, the advantage estimator, the loss
aggregation and DAPO's dynamic sampling and overlong shaping. Defaults follow the SAGE authors' setup
(β = 0.05 in the presets, γ = 0.3, τ = 1.2, q ∈ [0.6, 1.4]).
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass, field, fields

from trl import GRPOConfig

from sagerl.errors import ConfigError
from sagerl.objective import (
    ADVANTAGES,
    DIVERGENCES,
    GUIDES,
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    LOSS_AGG_MODES,
    GuideParams,
    Range,
    check_number,
)
from sagerl.objective.guides import RANDOM_KINDS, TOKEN_NORMALIZATIONS
from sagerl.objective.partition_diversity import PARTITIONS
from sagerl.objective.policy_loss import POLICY_LOSS_SETTINGS, POLICY_LOSSES
from sagerl.objective.registry import (
    ADVANTAGE_INPUTS,
    ADVANTAGE_PARAMS,
    ADVANTAGE_SETTINGS,
    BINARY_ADVANTAGES,
    CONFIG_FIELDS,
    GUIDE_PARAM_RANGES,
    LOSS_SETTINGS,
    METHOD_SETTINGS,
)
from sagerl.objective.schedules import SCHEDULES

ROLLOUT_DECODERS = ("transformers", "static")
"""What samples the rollouts (``SAGEConfig.rollout_decoder``)."""

# TRL loss types the adapter reproduces, and the aggregation each one means.
LOSS_TYPE_TO_AGG_MODE = {
    "grpo": "seq-mean-token-mean",
    "dapo": "token-mean",
    "bnpo": "token-mean",  # TRL's "bnpo" is a token-mean over the micro-batch (not BNPO's advantages)
    "dr_grpo": "seq-mean-token-sum-norm",
    "cispo": "token-mean",
    "sapo": "seq-mean-token-mean",
    "luspo": "seq-mean-token-sum",  # LUSPO: each sequence's loss scaled by its length
    "vespo": "token-mean",
}
# TRL loss types that change the surrogate (sagerl.objective.policy_loss.POLICY_LOSSES); the others use the
# clipped surrogate ("clip", or "gspo" with importance_sampling_level="sequence").
LOSS_TYPE_TO_POLICY_LOSS = {"cispo": "cispo", "sapo": "sapo", "vespo": "vespo"}
GUIDE_ENTROPY_SOURCES = ("policy", "reference")
PASSK_ESTIMATORS = tuple(name for name, params in ADVANTAGE_PARAMS.items() if "k" in params)
"""The advantage estimators that read ``passk_k`` (and so follow ``passk_k_schedule``)."""
TEXT_INPUTS = ("clusters", "answers", "counts")
"""Estimator inputs the trainer reads off the completions' text (:data:`sagerl.objective.ADVANTAGE_INPUTS`)."""


_COUNT = Range(1, integer=True)
_COUNT0 = Range(0, integer=True)
_NONNEG = Range(0.0)
_POS = Range(0.0, low_open=True)
_UNIT = Range(0.0, 1.0)
_SHARE = Range(0.0, 1.0, low_open=True, high_open=True)
_STEPS = Range(0.0, low_open=True)  # TrainingArguments' *_steps: a count, or a share of the run when < 1
_SEED = Range(0, 2**32 - 1, integer=True)  # numpy's seed range (transformers' set_seed seeds numpy)
_PORT = Range(1, 65535, integer=True)

NUMERIC_RANGES: dict[str, Range] = {
    # --- transformers.TrainingArguments ------------------------------------------------------------------
    "per_device_train_batch_size": _COUNT,
    "per_device_eval_batch_size": _COUNT,
    "num_train_epochs": _NONNEG,
    "max_steps": Range(-1, integer=True),  # -1: num_train_epochs; 0 is refused below
    "learning_rate": _NONNEG,
    "warmup_steps": _NONNEG,
    "weight_decay": _NONNEG,
    "adam_beta1": Range(0.0, 1.0, high_open=True),
    "adam_beta2": Range(0.0, 1.0, high_open=True),
    "adam_epsilon": _POS,
    "gradient_accumulation_steps": _COUNT,
    "max_grad_norm": _NONNEG,  # 0: no clipping
    "label_smoothing_factor": _UNIT,
    "neftune_noise_alpha": _NONNEG,
    "torch_empty_cache_steps": _COUNT,
    "logging_steps": _STEPS,
    "eval_steps": _STEPS,
    "eval_delay": _NONNEG,
    "eval_accumulation_steps": _COUNT,
    "save_steps": _STEPS,
    "save_total_limit": _COUNT0,
    "seed": _SEED,
    "data_seed": _SEED,
    "dataloader_num_workers": _COUNT0,
    "dataloader_prefetch_factor": _COUNT,
    "ddp_bucket_cap_mb": _COUNT,
    "ddp_timeout": _COUNT,
    "local_rank": Range(-1, integer=True),
    # --- trl.GRPOConfig ----------------------------------------------------------------------------------
    "router_aux_loss_coef": _NONNEG,
    "num_generations": Range(2, integer=True),  # a group needs two completions to have a spread
    "num_generations_eval": _COUNT,  # evaluation may sample one completion per prompt
    "max_completion_length": _COUNT,
    "pad_to_multiple_of": _COUNT,
    "generation_batch_size": _COUNT,
    "steps_per_generation": _COUNT,
    "temperature": _POS,
    "top_p": Range(0.0, 1.0, low_open=True),
    "top_k": Range(-1, integer=True),  # 0 or -1: off
    "min_p": _UNIT,
    "repetition_penalty": _POS,
    "vllm_server_port": _PORT,
    "vllm_server_timeout": _POS,
    "vllm_group_port": _PORT,
    "vllm_gpu_memory_utilization": Range(0.0, 1.0, low_open=True),
    "vllm_max_model_length": _COUNT,
    "vllm_tensor_parallel_size": _COUNT,
    "beta": _NONNEG,
    "num_iterations": _COUNT,
    "epsilon": _UNIT,  # ε_low: the lower clip 1 − ε_low; 1 leaves every ratio unclipped below
    "delta": Range(1.0, low_open=True),
    "epsilon_high": _NONNEG,  # CISPO reads it as its ratio bound
    "sapo_temperature_neg": _POS,
    "sapo_temperature_pos": _POS,
    "vespo_k_pos": _NONNEG,
    "vespo_lambda_pos": _POS,
    "vespo_k_neg": _NONNEG,
    "vespo_lambda_neg": _POS,
    "ref_model_mixup_alpha": _UNIT,
    "ref_model_sync_steps": _COUNT,
    "top_entropy_quantile": _UNIT,
    "entropy_coef": Range(),
    "entropy_coef_min": Range(),
    "entropy_coef_max": Range(),
    "entropy_coef_delta": _NONNEG,
    "entropy_target": _NONNEG,  # nats
    "max_tool_calling_iterations": _COUNT0,
    "vllm_importance_sampling_clip_max": _POS,
    "vllm_importance_sampling_clip_min": _NONNEG,
    "off_policy_mask_threshold": _NONNEG,
    "num_completions_to_print": _COUNT0,
    "vllm_importance_sampling_cap": _POS,
    # --- SAGEConfig ----------------------------------------------------------------------------------------
    **{
        field: GUIDE_PARAM_RANGES[name] for name, field in CONFIG_FIELDS.items() if name in GUIDE_PARAM_RANGES
    },
    "guide_schedule_restarts": _COUNT0,
    "guide_schedule_min": _UNIT,  # the strength's multiplier at the bottom of a cosine cycle (1 at the top)
    "kl_log_ratio_clip": _POS,
    "max_num_gen_batches": _COUNT0,  # 0: no limit
    "passk_k_end": _COUNT,  # and <= num_generations, with passk_k, at every step of a schedule
    "passk_k_switch": Range(0.0, 1.0, low_open=True),  # a share of max_steps
    "partition_ngram": _COUNT,
    "partition_threshold": Range(0.0, 1.0, high_open=True),  # a Jaccard similarity that can be exceeded
    "overlong_buffer_len": _NONNEG,  # tokens if >= 1, a share of max_completion_length if < 1; 0: off
    "overlong_penalty_factor": _NONNEG,
    # the methods' settings, as their modules declare them (sagerl.objective.registry.METHOD_SETTINGS)
    **{name: s.allowed for name, s in METHOD_SETTINGS.items() if isinstance(s.allowed, Range)},
    "eval_passk_every": _COUNT0,  # 0: off
    "eval_passk_n": _COUNT,
    "eval_passk_limit": _COUNT,  # None: every problem
    "eval_passk_max_new_tokens": _COUNT,  # None: max_completion_length
}
"""The allowed range of every numeric field of :class:`SAGEConfig` (TRL's and transformers' included), checked
by ``SAGEConfig.__post_init__`` before anything else: a value outside it (NaN and ±inf included) fails in one
line naming the field, the value and the range. A numeric field missing here (a new TRL field) is checked for
finiteness only; tests/train/test_config.py fails until it has its range."""


@functools.cache
def numeric_fields(config_class: type) -> dict[str, bool]:
    """The init fields of a config dataclass annotated int or float (alone or in a union), each with whether
    its annotation also allows a string (TRL's ``pad_to_multiple_of: int | str``)."""
    hints = typing.get_type_hints(config_class)
    out = {}
    for f in fields(config_class):
        hint = hints.get(f.name)
        args = (
            typing.get_args(hint)
            if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
            else (hint,)
        )
        if f.init and any(a in (int, float) for a in args):
            out[f.name] = str in args
    return out


def with_method_settings(cls: type) -> type:
    """Add to ``cls`` (before ``@dataclass`` reads it) a field for every method setting of
    :data:`sagerl.objective.registry.METHOD_SETTINGS`: its name, type, default, help and unit, as the method's
    module declares them, after the fields the class declares itself. A method's settings are declared once, in its
    module; this config, its range checks (:data:`NUMERIC_RANGES`), ``advantage_params`` and the policy terms'
    keywords are read off them.

    Raises:
        TypeError: the class declares a field of that name itself (a second declaration).
    """
    annotations = cls.__dict__.get("__annotations__", {})
    for name, setting in METHOD_SETTINGS.items():
        if name in annotations:
            raise TypeError(
                f"{cls.__name__}.{name} is declared by its method module: remove it from the class"
            )
        annotations[name] = setting.type
        metadata = {"help": setting.help, **({"metavar": setting.unit} if setting.unit else {})}
        setattr(cls, name, field(default=setting.default, metadata=metadata))
    cls.__annotations__ = annotations
    return cls


@dataclass
@with_method_settings
class SAGEConfig(GRPOConfig):
    """Configuration of :class:`sagerl.train.SAGETrainer`: every ``trl.GRPOConfig`` field, plus the ones below, and
    a field for each method setting (``passk_k``, ``risk_beta``, ...: :func:`with_method_settings`)."""

    guide: str = field(default="none", metadata={"help": f"Guide function q: one of {GUIDES}."})
    guide_entropy_source: str = field(
        default="policy",
        metadata={
            "help": "Entropies (branch guide) and log-probs (token guide) from the 'policy' or the 'reference'."
        },
    )
    gamma: float = field(
        default=0.3,
        metadata={
            "help": "Branch guide strength γ: q grows by γ per nat of entropy above τ.",
            "metavar": "1/nat",
        },
    )
    tau: float = field(default=1.2, metadata={"help": "Branch guide entropy threshold τ.", "metavar": "nats"})
    q_min: float = field(default=0.6, metadata={"help": "Lower clamp of q."})
    q_max: float = field(default=1.4, metadata={"help": "Upper clamp of q."})
    token_alpha: float = field(default=0.4, metadata={"help": "Token guide strength α."})
    token_sigma: float = field(default=0.0, metadata={"help": "Token guide noise σ."})
    token_normalization: str = field(
        default="minmax", metadata={"help": f"Token guide normalisation: one of {TOKEN_NORMALIZATIONS}."}
    )
    random_kind: str = field(
        default="permutation", metadata={"help": f"Random guide kind: one of {RANDOM_KINDS}."}
    )
    random_eps: float = field(
        default=0.1, metadata={"help": "Gaussian random guide: share of perturbed tokens."}
    )
    random_sigma: float = field(default=0.2, metadata={"help": "Gaussian random guide: σ."})
    teacher_model: str | None = field(
        default=None,
        metadata={
            "help": "Teacher guide: path or id of the teacher model (same tokenizer as the policy); "
            "one extra no-grad forward pass per rollout batch."
        },
    )
    teacher_lambda: float = field(
        default=1.0, metadata={"help": "Teacher guide exponent λ: q = (π_teacher/π_ref)^λ, clamped."}
    )
    guide_schedule: str = field(
        default="constant",
        metadata={
            "help": f"Schedule of the guide strength (γ, α or σ) over optimizer steps: one of {SCHEDULES}, its "
            "multiplier from 1 at the first step to guide_schedule_min at the last (step: at half of the run)."
        },
    )
    guide_schedule_restarts: int = field(default=0, metadata={"help": "Cosine schedule: number of restarts."})
    guide_schedule_min: float = field(
        default=0.0,
        metadata={"help": "The guide strength's multiplier at the end (cosine: the bottom of each cycle)."},
    )
    divergence: str = field(
        default="reverse",
        metadata={"help": f"Anchor divergence: one of {DIVERGENCES} ('forward' takes no guide)."},
    )
    kl_estimator: str = field(
        default="k3", metadata={"help": f"Reverse-KL estimator: one of {KL_ESTIMATORS}."}
    )
    kl_log_ratio_clip: float | None = field(
        default=20.0,
        metadata={"help": "Clamp of the log-ratio inside the divergence (None: off).", "metavar": "nats"},
    )
    kl_placement: str = field(
        default="loss",
        metadata={
            "help": f"Where β·KL goes: one of {KL_PLACEMENTS} ('reward' gives the exact SAGE optimum)."
        },
    )
    advantage_estimator: str | None = field(
        default=None,
        metadata={
            "help": f"Advantages: one of {ADVANTAGES}. None: TRL's choice from `scale_rewards` "
            "('group'/'batch' -> grpo, 'none' -> dr_grpo). passk/pkpo read passk_k, w_reinforce "
            "w_reinforce_lambda, unlikely unlikeliness_beta."
        },
    )
    loss_agg_mode: str | None = field(
        default=None,
        metadata={
            "help": f"Loss aggregation: one of {LOSS_AGG_MODES}. None: the one TRL's `loss_type` means."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop groups whose accuracy is the same for every completion; with "
            "darling, ucb_mean, ucb_con and outcome_batch (their bonus lives on such groups), drop the groups "
            "whose advantages are all zero."
        },
    )
    max_num_gen_batches: int = field(
        default=1,
        metadata={
            "help": "DAPO dynamic sampling: generation rounds per step. 1 only drops equal-reward groups; N > 1 "
            "samples more prompts, up to N rounds, until the step has its number of groups whose rewards differ "
            "(verl's algorithm.filter_groups.max_num_gen_batches); 0: no limit."
        },
    )
    passk_k_schedule: str = field(
        default="constant",
        metadata={
            "help": f"How k moves over the optimizer steps, from passk_k to passk_k_end: one of {SCHEDULES} "
            "(step: at passk_k_switch of the run). k is read and rounded to an integer at each rollout."
        },
    )
    passk_k_end: int | None = field(
        default=None,
        metadata={
            "help": "k at the last rollout of a passk_k_schedule other than constant "
            "(1 <= k <= num_generations)."
        },
    )
    passk_k_switch: float = field(
        default=0.5,
        metadata={
            "help": "passk_k_schedule='step': the share of the run (first to last rollout), in (0, 1], from which k "
            "is passk_k_end."
        },
    )
    signed_samples_only: bool = field(
        default=False,
        metadata={
            "help": "PSR/NSR: train on the correct (psr) or the wrong (nsr) completions only, as the authors' "
            "trainer does: the loss's means, and its KL term, run over them. False: every completion stays in "
            "the loss, the others with advantage 0 (an unbiased per-sample mean, whose step scales with the "
            "share of kept completions)."
        },
    )
    share_prompt_prefix: bool = field(
        default=True,
        metadata={
            "help": "Run each prompt's forward pass once for all the rollouts of its group in the log-prob "
            "passes (policy, reference, π_old, teacher): the same log-probs up to float rounding, with the LM "
            "head over completion tokens only. Single process, no gradient checkpointing, text only; "
            "TRL's per-row forward elsewhere, or when False."
        },
    )
    share_generation_prefix: bool = field(
        default=False,
        metadata={
            "help": "Prefill each distinct prompt once for all its rollouts when transformers generates them (the "
            "cache repeated per rollout, generate continuing from it): the same rollouts up to float rounding "
            "of the logits, G - 1 fewer prompt prefills per group. Off by default, so runs recorded before it "
            "reproduce; transformers' generate only (not vLLM), text only, the default dynamic cache."
        },
    )
    rollout_decoder: str = field(
        default="transformers",
        metadata={
            "help": "What samples the rollouts when transformers would: 'transformers' (its generate) or 'static' "
            "(sagerl.eval.static_decoder: a static KV cache, fused and pre-packed weights, inverse-CDF sampling; "
            "Llama-family models on the CPU, TRL's sampling settings; each prompt prefilled once). The same "
            "distribution (logits equal to the model's up to float rounding), other draws for the same seed: off "
            "by default so runs recorded before it reproduce. Where it does not apply (another model type, vLLM, "
            "a GPU, a generation keyword it lacks) the run says why once and uses transformers'."
        },
    )
    partition: str = field(
        default="answer",
        metadata={
            "help": f"darling: the equivalence that partitions a group, one of {PARTITIONS}: equal final answers, "
            "token n-gram Jaccard above partition_threshold, or the planted task's strategy label (an oracle)."
        },
    )
    partition_ngram: int = field(
        default=2, metadata={"help": "darling, partition='lexical': the n of the token n-grams (>= 1)."}
    )
    partition_threshold: float = field(
        default=0.5,
        metadata={
            "help": "darling, partition='lexical': completions whose n-gram Jaccard similarity exceeds this, in "
            "[0, 1), are equivalent."
        },
    )
    overlong_buffer_len: float = field(
        default=0.0,
        metadata={
            "help": "DAPO overlong shaping ramp: tokens if >= 1, a fraction of max_completion_length if in (0, 1), "
            "0 for off."
        },
    )
    overlong_penalty_factor: float = field(
        default=1.0, metadata={"help": "DAPO overlong penalty at the budget."}
    )
    policy_loss: str | None = field(
        default=None,
        metadata={
            "help": f"The policy term: one of {tuple(POLICY_LOSSES)} (TRL's loss types, and Clip-Cov/KL-Cov, Cui "
            "et al. 2025). None: the one TRL's `loss_type` and `importance_sampling_level` mean (cispo/sapo/vespo, "
            "else clip, or gspo at the sequence level)."
        },
    )
    eval_passk_every: int = field(
        default=0,
        metadata={
            "help": "Log the policy's unbiased pass@k (eval/pass@k) every this many optimizer steps, on "
            "eval_passk_dataset (sagerl.train.passk_callback); 0: off.",
            "metavar": "steps",
        },
    )
    eval_passk_dataset: str | None = field(
        default=None, metadata={"help": "The pass@k evaluation set: a sagerl set name or a JSONL path."}
    )
    eval_passk_n: int = field(default=8, metadata={"help": "Samples per problem of the pass@k evaluation."})
    eval_passk_limit: int | None = field(
        default=None, metadata={"help": "The pass@k evaluation's first problems only (None: all)."}
    )
    eval_passk_max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Completion length of the pass@k evaluation (None: max_completion_length).",
            "metavar": "tokens",
        },
    )

    def __post_init__(self) -> None:
        self._check_numbers()
        super().__post_init__()
        choices = {
            "guide": GUIDES,
            "guide_entropy_source": GUIDE_ENTROPY_SOURCES,
            "token_normalization": TOKEN_NORMALIZATIONS,
            "random_kind": RANDOM_KINDS,
            "guide_schedule": SCHEDULES,
            "divergence": DIVERGENCES,
            "kl_estimator": KL_ESTIMATORS,
            "kl_placement": KL_PLACEMENTS,
            "passk_k_schedule": SCHEDULES,
            "partition": PARTITIONS,
            "rollout_decoder": ROLLOUT_DECODERS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")
        for name, setting in METHOD_SETTINGS.items():
            if not isinstance(setting.allowed, Range):
                setting.check(getattr(self, name), ConfigError)
        if self.advantage_estimator is not None and self.advantage_estimator not in ADVANTAGES:
            raise ConfigError(
                f"advantage_estimator={self.advantage_estimator!r} is not one of {', '.join(ADVANTAGES)}"
            )
        if self.loss_agg_mode is not None and self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ConfigError(
                f"loss_agg_mode={self.loss_agg_mode!r} is not one of {', '.join(LOSS_AGG_MODES)}"
            )
        if self.loss_agg_mode is None and self.loss_type not in LOSS_TYPE_TO_AGG_MODE:
            raise ConfigError(
                f"loss_type={self.loss_type!r} is not supported by SAGETrainer; use one of "
                f"{', '.join(LOSS_TYPE_TO_AGG_MODE)} or set loss_agg_mode"
            )
        if self.max_steps == 0 or self.max_steps < -1:
            raise ConfigError(
                f"max_steps={self.max_steps}: give a positive number of optimizer steps "
                "(or -1 to train num_train_epochs epochs)"
            )
        if self.divergence == "forward" and self.guide != "none":
            raise ConfigError("divergence='forward' takes no guide: set guide='none'")
        if self.kl_placement == "reward" and self.divergence != "reverse":
            raise ConfigError("kl_placement='reward' needs divergence='reverse'")
        if (self.guide == "teacher") != (self.teacher_model is not None):
            raise ConfigError(
                "guide='teacher' needs teacher_model (a model path or id), and teacher_model is read by the "
                f"teacher guide only (got guide={self.guide!r}, teacher_model={self.teacher_model!r})"
            )
        if self.guide != "none" and self.beta == 0.0:
            raise ConfigError(f"guide={self.guide!r} shapes the KL anchor, so it needs beta > 0 (got beta=0)")
        if self.overlong_buffer_len < 0 or self.resolved_overlong_buffer_len > (
            self.max_completion_length or 0
        ):
            raise ConfigError(
                f"overlong_buffer_len={self.overlong_buffer_len} must be a fraction in (0, 1) or a token count "
                f"in [1, max_completion_length={self.max_completion_length}]"
            )
        self._check_trl_loss_options()
        self._check_exploration_methods()
        if self.eval_passk_every and not self.eval_passk_dataset:
            raise ConfigError("eval_passk_every needs eval_passk_dataset (a sagerl set name or a JSONL path)")

    def _check_numbers(self) -> None:
        """Every numeric field against :data:`NUMERIC_RANGES` (finite only, for a field missing there); a field
        whose annotation allows None or a string is skipped when it holds one.

        Raises:
            ConfigError: one line, ``name=value must be <range>``.
        """
        for name, allows_str in numeric_fields(type(self)).items():
            value = getattr(self, name)
            if value is None or (allows_str and isinstance(value, str)):
                continue
            check_number(name, value, NUMERIC_RANGES.get(name, Range()), ConfigError)

    def _check_trl_loss_options(self) -> None:
        """TRL's surrogate options compose with the SAGE anchor (they act on the policy term); refuse the
        combinations that would not (one-line ConfigError with the reason)."""
        if self.policy_loss is not None and self.policy_loss not in POLICY_LOSSES:
            raise ConfigError(f"policy_loss={self.policy_loss!r} is not one of {', '.join(POLICY_LOSSES)}")
        reward_kl = self.kl_placement == "reward" and self.beta != 0.0
        if reward_kl and (self.top_entropy_quantile < 1.0 or self.off_policy_mask_threshold is not None):
            name = "top_entropy_quantile" if self.top_entropy_quantile < 1.0 else "off_policy_mask_threshold"
            raise ConfigError(
                f"{name}={getattr(self, name)!r} is not supported with kl_placement='reward': the mask would "
                "drop the KL that the advantages carry on the masked tokens (use kl_placement='loss')"
            )
        if self.multi_objective_aggregation == "normalize_then_sum" and self.advantage_estimator is not None:
            raise ConfigError(
                "multi_objective_aggregation='normalize_then_sum' defines the advantages itself (GDPO); "
                f"leave advantage_estimator unset (got {self.advantage_estimator!r})"
            )

    def _check_exploration_methods(self) -> None:
        """The exploration methods' settings that depend on other fields (one line each; the ranges of single
        fields are :data:`NUMERIC_RANGES`)."""
        estimator = self.resolved_advantage_estimator
        group = self.num_generations
        if estimator in PASSK_ESTIMATORS:
            self._check_passk_k_schedule(group)
        elif self.passk_k_schedule != "constant":
            raise ConfigError(
                f"passk_k_schedule={self.passk_k_schedule!r} schedules the k of {', '.join(PASSK_ESTIMATORS)}; "
                f"advantage_estimator={estimator!r} reads no k"
            )
        if (
            set(ADVANTAGE_INPUTS[estimator]) & set(TEXT_INPUTS)
            and self.dynamic_sampling
            and self.max_num_gen_batches != 1
        ):
            raise ConfigError(
                f"advantage_estimator={estimator!r} reads the completions' text, which DAPO's refill does not keep "
                "across rounds: set max_num_gen_batches=1 (dynamic sampling without refill)"
            )
        if self.signed_samples_only and estimator not in ("psr", "nsr"):
            raise ConfigError(
                f"signed_samples_only keeps the correct (psr) or wrong (nsr) completions: it needs "
                f"advantage_estimator='psr' or 'nsr' (got {estimator!r})"
            )
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ConfigError(f"clip_cov_lb={self.clip_cov_lb} must be below clip_cov_ub={self.clip_cov_ub}")
        if self.resolved_policy_loss in ("clip_cov", "kl_cov") and self.delta is not None:
            raise ConfigError(f"policy_loss={self.policy_loss!r} has no two-sided clip: leave delta unset")
        if self.resolved_policy_loss == "kl_cov" and self.is_on_policy:
            raise ConfigError(
                "policy_loss='kl_cov' does nothing when training is strictly on-policy (one optimizer step per "
                "rollout batch): its penalty |log π − log π_old| and its gradient are 0, leaving the plain policy "
                "gradient. Reuse each rollout batch, e.g. steps_per_generation=2 (or num_iterations=2)"
            )
        if self.resolved_policy_loss == "flowrl":
            self._check_flowrl()
        if self.resolved_policy_loss == "simko" and not self.is_on_policy:
            raise ConfigError(
                "policy_loss='simko' reads the top-K log-probs of π_old, which TRL's π_old pass does not compute: "
                "train on-policy (gradient_accumulation_steps a multiple of steps_per_generation x num_iterations)"
            )
        if self.resolved_policy_loss == "apo":
            self._check_apo()
        if estimator in BINARY_ADVANTAGES and self.resolved_overlong_buffer_len > 0:
            raise ConfigError(
                f"advantage_estimator={estimator!r} needs binary rewards; overlong shaping makes them negative"
            )
        if self.max_num_gen_batches != 1 and not self.dynamic_sampling:
            raise ConfigError(
                "max_num_gen_batches refills DAPO's dynamic sampling: set dynamic_sampling=True"
            )
        local_rollouts = self.per_device_train_batch_size * (
            self.steps_per_generation or self.gradient_accumulation_steps
        )
        if self.dynamic_sampling and self.max_num_gen_batches != 1 and local_rollouts % self.num_generations:
            raise ConfigError(
                f"max_num_gen_batches={self.max_num_gen_batches} refills whole groups on each process: its rollout "
                f"batch (per_device_train_batch_size x steps_per_generation = {local_rollouts}) must be a multiple "
                f"of num_generations={self.num_generations}; or set max_num_gen_batches=1 (drop equal-reward "
                "groups without refill)"
            )

    def _check_flowrl(self) -> None:
        """FlowRL's loss reads π_ref's log-probs, one advantage per completion and a learned log Z head (one line
        each, naming the setting to change)."""
        if self.beta == 0.0:
            raise ConfigError(
                "policy_loss='flowrl' reads the reference's log-probs, which TRL computes only with beta > 0 (the "
                "authors keep a KL loss of 0.001): set beta > 0"
            )
        if self.kl_placement == "reward":
            raise ConfigError(
                "policy_loss='flowrl' takes one advantage per completion; kl_placement='reward' makes them per token: "
                "use kl_placement='loss'"
            )
        if self.entropy_adv_alpha > 0:
            raise ConfigError(
                "policy_loss='flowrl' takes one advantage per completion; the entropy advantage makes them per token: "
                "set entropy_adv_alpha=0"
            )
        if self.resolved_loss_agg_mode != "seq-mean-token-mean":
            raise ConfigError(
                f"policy_loss='flowrl' is a mean over completions (each token carries its completion's loss): set "
                f"loss_agg_mode='seq-mean-token-mean' (got {self.resolved_loss_agg_mode!r})"
            )
        if self.use_vllm:
            raise ConfigError(
                "policy_loss='flowrl' trains a log Z head that vLLM's weight sync does not know: unset use_vllm"
            )

    def _check_apo(self) -> None:
        """APO reads the reference model's top-K tokens from the reference forward pass and π_old's log-probs of them
        (one line each, naming the setting to change)."""
        if self.beta == 0.0:
            raise ConfigError(
                "policy_loss='apo' reads the reference model's top-K tokens from the reference forward pass, which TRL "
                "runs only with beta > 0 (the KL anchor's coefficient; APO's pull is apo_beta): set beta > 0"
            )
        if not self.is_on_policy:
            raise ConfigError(
                "policy_loss='apo' reads π_old's log-probs of the reference's top-K tokens, which TRL's π_old pass does "
                "not compute: train on-policy (gradient_accumulation_steps a multiple of steps_per_generation x "
                "num_iterations)"
            )
        if self.dynamic_sampling and self.max_num_gen_batches != 1:
            raise ConfigError(
                "policy_loss='apo' reads the reference's top-K tokens of each rollout, which DAPO's refill does not keep "
                "across rounds: set max_num_gen_batches=1 (dynamic sampling without refill)"
            )

    def _check_passk_k_schedule(self, group: int) -> None:
        """k stays an integer in 1..num_generations (and <= num_generations - 1 for PKPO's loo baseline) at every
        optimizer step: a schedule moves between its two end points, so both are checked (their single-field
        ranges, and ``passk_k_switch``'s, are :data:`NUMERIC_RANGES`)."""
        allowed = Range(1, group, integer=True)
        if self.passk_k_schedule == "constant":
            check_number("passk_k", self.passk_k, allowed, ConfigError)
            if self.passk_k_end is not None and self.passk_k_end != self.passk_k:
                raise ConfigError(
                    f"passk_k_end={self.passk_k_end!r} is read by a passk_k_schedule other than 'constant': set "
                    "passk_k_schedule (linear, cosine or step) or leave passk_k_end unset"
                )
            ends = [self.passk_k]
        else:
            if self.passk_k_end is None:
                raise ConfigError(
                    f"passk_k_schedule={self.passk_k_schedule!r} needs passk_k_end (k at the last rollout)"
                )
            for name in ("passk_k", "passk_k_end"):
                if getattr(self, name) not in allowed:
                    raise ConfigError(
                        f"{name}={getattr(self, name)!r} must be {allowed} (num_generations={group}): k stays in "
                        f"it at every step of passk_k_schedule={self.passk_k_schedule!r}"
                    )
            ends = [self.passk_k, self.passk_k_end]
        scheduled = " at every step of the schedule" if len(ends) > 1 else ""
        if (
            self.resolved_advantage_estimator == "pkpo"
            and self.pkpo_baseline == "loo"
            and max(ends) > group - 1
        ):
            raise ConfigError(
                f"pkpo_baseline='loo' needs passk_k <= num_generations - 1 = {group - 1}{scheduled} (got {max(ends)})"
            )
        if self.resolved_advantage_estimator == "maxpo" and max(ends) > group - 1:
            raise ConfigError(
                f"advantage_estimator='maxpo' needs passk_k <= num_generations - 1 = {group - 1}{scheduled} (its "
                f"leave-two-out baseline draws k - 1 comparators from the n - 2 other completions; got {max(ends)})"
            )

    @property
    def advantage_params(self) -> dict:
        """The keyword parameters of :func:`sagerl.objective.compute_advantages` these fields set, one per
        estimator setting (:data:`sagerl.objective.registry.ADVANTAGE_SETTINGS`; ``k`` is ``passk_k``, the first
        step's k of a schedule: the trainer passes the scheduled one)."""
        return {s.name: getattr(self, name) for name, s in ADVANTAGE_SETTINGS.items()}

    @property
    def loss_params(self) -> dict:
        """The keyword parameters of :func:`sagerl.objective.sage_loss`'s own options these fields set (the entropy
        advantage's α and κ)."""
        return {s.name: getattr(self, name) for name, s in LOSS_SETTINGS.items()}

    @property
    def is_on_policy(self) -> bool:
        """Whether every optimizer step trains on rollouts of the policy it starts from (TRL then computes no
        π_old): ``gradient_accumulation_steps`` is a multiple of ``steps_per_generation × num_iterations``."""
        generate_every = (self.steps_per_generation or self.gradient_accumulation_steps) * self.num_iterations
        return self.gradient_accumulation_steps % generate_every == 0

    @property
    def guide_params(self) -> GuideParams:
        """The guide fields as :class:`sagerl.objective.GuideParams`."""
        return GuideParams.from_config(self)

    @property
    def resolved_overlong_buffer_len(self) -> int:
        """The overlong ramp in tokens (0: off)."""
        value = self.overlong_buffer_len
        if 0 < value < 1:
            return max(1, round(value * (self.max_completion_length or 0)))
        return int(value)

    @property
    def resolved_loss_agg_mode(self) -> str:
        """``loss_agg_mode``, or the aggregation TRL's ``loss_type`` stands for."""
        return self.loss_agg_mode or LOSS_TYPE_TO_AGG_MODE[self.loss_type]

    @property
    def resolved_policy_loss(self) -> str:
        """``policy_loss``, or the surrogate TRL's ``loss_type`` and ``importance_sampling_level`` stand for."""
        if self.policy_loss is not None:
            return self.policy_loss
        if self.loss_type in LOSS_TYPE_TO_POLICY_LOSS:
            return LOSS_TYPE_TO_POLICY_LOSS[self.loss_type]
        return "gspo" if self.importance_sampling_level == "sequence" else "clip"

    @property
    def resolved_policy_loss_params(self) -> dict:
        """Keyword arguments of the surrogate from TRL's fields (CISPO's ratio bound, SAPO's temperatures,
        VESPO's Gamma parameters, the importance-sampling level of CISPO and SAPO, Clip-Cov's and KL-Cov's
        ratios, bounds and coefficient)."""
        name = self.resolved_policy_loss
        level = {"importance_sampling_level": self.importance_sampling_level}
        if name == "cispo":
            epsilon_high = self.epsilon_high if self.epsilon_high is not None else self.epsilon
            return {"ratio_max": epsilon_high, **level}
        if name == "sapo":
            return {
                "temperature_pos": self.sapo_temperature_pos,
                "temperature_neg": self.sapo_temperature_neg,
                **level,
            }
        if name in POLICY_LOSS_SETTINGS:
            return {s.name: getattr(self, s.field) for s in POLICY_LOSS_SETTINGS[name]}
        if name == "vespo":
            return {
                "k_pos": self.vespo_k_pos,
                "lambda_pos": self.vespo_lambda_pos,
                "k_neg": self.vespo_k_neg,
                "lambda_neg": self.vespo_lambda_neg,
            }
        return {}

    @property
    def resolved_advantage_estimator(self) -> str:
        """``advantage_estimator``, or TRL's choice from ``scale_rewards``."""
        if self.advantage_estimator is not None:
            return self.advantage_estimator
        return "dr_grpo" if self.scale_rewards == "none" else "grpo"
