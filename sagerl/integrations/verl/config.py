"""SAGE's settings in verl's config tree: ``actor_rollout_ref.actor.policy_loss``, and the checks run at start-up.

:class:`SAGEPolicyLossConfig` is verl's ``PolicyLossConfig`` plus SAGE's fields, selected with hydra's
``_target_``. verl turns the actor's config into dataclasses in the driver (``validate_config``, before Ray
starts) and again in every actor worker, so :meth:`SAGEPolicyLossConfig.__post_init__` refuses a bad SAGE
setting before anything is loaded. The settings that live beside ``policy_loss`` in the actor's config
(``calculate_entropy``, ``use_kl_loss``, ``kl_loss_type``, ``entropy_coeff``) are checked by
:func:`check_actor_config` when the actor worker sets up its loss (``init_model``, before the first rollout).

Names follow :class:`sagerl.train.SAGEConfig` (the TRL adapter); β is verl's ``actor.kl_loss_coef``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sagerl.errors import ConfigError
from sagerl.integrations.verl.version import check_verl_version
from sagerl.objective import GUIDES, KL_PLACEMENTS, GuideParams, Range, check_number, guide_inputs
from sagerl.objective.guides import RANDOM_KINDS, TOKEN_NORMALIZATIONS
from sagerl.objective.policy_loss import POLICY_LOSS_SETTINGS
from sagerl.objective.registry import CONFIG_FIELDS, GUIDE_PARAM_RANGES, LOSS_SETTINGS

try:
    from verl.workers.config import PolicyLossConfig
except ImportError:  # a verl whose layout differs: say which version, not which name moved
    check_verl_version()
    raise

TARGET = "sagerl.integrations.verl.SAGEPolicyLossConfig"
"""The ``_target_`` that selects SAGE's settings."""

OVERRIDE = f"++actor_rollout_ref.actor.policy_loss={{_target_:{TARGET},loss_mode:sage}}"
"""The command-line override that turns SAGE on with the paper's defaults (branch guide)."""

GUIDE_ENTROPY_SOURCES = ("policy", "reference")
POLICY_TERMS = ("clip", "clip_cov", "kl_cov", "simko", "apo", "flowrl")
"""The policy terms the plugin offers (verl has its own loss modes for GSPO and the other TRL loss types)."""
VOCABULARY_TERMS = ("simko", "apo")
"""The policy terms that read the policy's distribution over the vocabulary at each position (SimKO: its top-K
log-probs; APO: its log-probs of the reference's top-K, :mod:`sagerl.integrations.verl.reference`), computed by
:func:`~sagerl.integrations.verl.loss.sage_ppo_loss` from the logits of the actor's own training forward through
verl's top-K hook (see :mod:`sagerl.integrations.verl.worker`)."""
SETTINGS_TERMS = ("simko", "apo", "flowrl")
"""The policy terms whose settings (:data:`sagerl.objective.policy_loss.POLICY_LOSS_SETTINGS`) are fields of
:class:`SAGEPolicyLossConfig` (Clip-Cov's and KL-Cov's are verl's own fields)."""
VERL_REFUSED_TERMS: dict[str, str] = {}
"""sagerl's policy terms the plugin refuses at start-up, with the reason (none since FlowRL's log Z head lives in
verl's actor: :mod:`sagerl.integrations.verl.log_partition`)."""

NUMERIC_RANGES: dict[str, Range] = {
    **{
        field: GUIDE_PARAM_RANGES[name]
        for name, field in CONFIG_FIELDS.items()
        if name in GUIDE_PARAM_RANGES and name != "teacher_lambda"  # verl computes no teacher log-probs
    },
    "kl_log_ratio_clip": Range(0.0, low_open=True),
    **{name: s.allowed for name, s in LOSS_SETTINGS.items()},  # the loss options' (the entropy advantage's)
    **{
        s.field: s.allowed for term in SETTINGS_TERMS for s in POLICY_LOSS_SETTINGS[term]
    },  # SimKO's, APO's, FlowRL's
}
"""The range of each numeric field :class:`SAGEPolicyLossConfig` adds to verl's ``PolicyLossConfig`` (the TRL
adapter's ranges for the same names); NaN and ±inf are refused."""

KL_LOSS_TYPES = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}
"""verl's ``actor.kl_loss_type`` names and the :func:`sagerl.objective.shaped_kl` estimator each one is."""


def verl_guide_inputs(source: str) -> dict[str, str]:
    """What verl hands the actor's loss, by :func:`sagerl.objective.guide_inputs` name, for a guide reading the
    ``"policy"`` or the ``"reference"``. Anything else (a teacher's log-probs, the reference's entropies) verl
    does not compute."""
    if source == "policy":
        return {
            "entropy": "the policy's entropy",
            "logp": "the policy's log-probs",
            "ref_logp": "ref_log_prob",
        }
    return {"logp": "ref_log_prob", "ref_logp": "ref_log_prob"}


_SIMKO = {s.field: s for s in POLICY_LOSS_SETTINGS["simko"]}
_APO = {s.field: s for s in POLICY_LOSS_SETTINGS["apo"]}
_FLOWRL = {s.field: s for s in POLICY_LOSS_SETTINGS["flowrl"]}


@dataclass
class SAGEPolicyLossConfig(PolicyLossConfig):
    """verl's ``actor.policy_loss`` with SAGE's fields (every field of ``PolicyLossConfig`` keeps its meaning).

    Select it with ``_target_`` (:data:`OVERRIDE`), with ``loss_mode=sage``. The loss is
    :func:`sagerl.integrations.verl.loss.sage_ppo_loss`: verl's clipped surrogate (``clip_ratio_low/high``, dual clip
    ``clip_ratio_c``) plus β·k(π, q·π_ref) with β = ``actor.kl_loss_coef``, computed by
    :func:`sagerl.objective.sage_loss`.

    Raises:
        ConfigError: (from ``__post_init__``, so in the driver at start-up) a verl version outside the tested
            range, ``loss_mode`` other than ``sage``, an unknown choice, bad bounds, or a guide that reads an
            input verl does not compute (a teacher model's log-probs, the reference policy's entropies).
    """

    loss_mode: str = "sage"
    """verl's loss mode; must be "sage" with this config (SAGE never falls back to another loss)."""
    guide: str = "branch"
    """Guide function q, one of :data:`sagerl.objective.GUIDES` ("none": q ≡ 1, plain GRPO)."""
    guide_entropy_source: str = "policy"
    """Entropies and log-probs for the guide from the "policy" (verl computes both) or the "reference"
    (verl computes its log-probs only, so the branch guide cannot read it)."""
    gamma: float = 0.3
    """branch guide strength γ, per nat above τ."""
    tau: float = 1.2
    """branch guide entropy threshold τ, nats."""
    q_min: float = 0.6
    """Lower clamp of q (0 < q_min <= 1)."""
    q_max: float = 1.4
    """Upper clamp of q (q_max >= 1)."""
    token_alpha: float = 0.4
    """token guide strength α."""
    token_sigma: float = 0.0
    """token guide noise σ (drawn from torch's global RNG, which verl seeds)."""
    token_normalization: str = "minmax"
    """token guide per-sequence normalisation, one of :data:`sagerl.objective.guides.TOKEN_NORMALIZATIONS`."""
    random_kind: str = "permutation"
    """random guide: "permutation" (the paper's baseline) or "gaussian" (the authors' code)."""
    random_eps: float = 0.1
    """gaussian random guide: probability of perturbing a token."""
    random_sigma: float = 0.2
    """gaussian random guide: σ."""
    kl_placement: str = "loss"
    """Where β·KL goes: "loss" (per token, as GRPO and the SAGE authors) or "reward" (k1 reward-to-go in the
    advantages; the exact SAGE optimum, see :mod:`sagerl.objective.loss`)."""
    kl_log_ratio_clip: Optional[float] = 20.0  # noqa: UP045 (omegaconf reads the annotation)
    """Clamp of the log-ratio inside the divergence (None: off). verl's own k3 also clamps the value at 10."""
    policy_term: str = "clip"
    """The policy term under the anchor: "clip" (verl's clipped surrogate with its dual clip), "clip_cov" or
    "kl_cov" (Cui et al. 2025, with verl's semantics and verl's own fields ``clip_cov_ratio``, ``clip_cov_lb``,
    ``clip_cov_ub``, ``kl_cov_ratio``, ``ppo_kl_coef``; verl's defaults 2e-4, 1, 5, 2e-4, 0.1 — the authors
    use 2e-3 and 1 for KL-Cov). KL-Cov's penalty is 0 when every mini-batch is on-policy."""
    entropy_adv_alpha: float = LOSS_SETTINGS["entropy_adv_alpha"].default
    """The entropy advantage A + min(α·H_t, |A|/κ) (Cheng et al. 2025): α (0: off; the paper's 0.4). Reads the
    policy's entropies (``calculate_entropy=True``)."""
    entropy_adv_kappa: float = LOSS_SETTINGS["entropy_adv_kappa"].default
    """The entropy advantage's κ > 1 (the paper's 2)."""

    simko_top_k: int = _SIMKO["simko_top_k"].default
    """SimKO (``policy_term=simko``): how many of the most likely tokens a correct completion raises (K; 3)."""
    simko_mix: float = _SIMKO["simko_mix"].default
    """SimKO: the share α in [0, 1] of a correct completion's update on a high-entropy token that goes to its
    top-K candidates (the authors' mix_topk_coef, 0.01)."""
    simko_tau: float = _SIMKO["simko_tau"].default
    """SimKO: the entropy quantile τ in [0, 1] of each completion above which it acts (0.8)."""
    simko_neg_scale: float = _SIMKO["simko_neg_scale"].default
    """SimKO: the factor λ > 0 of a negative advantage on high-entropy tokens that took the top-1 candidate (1.1)."""

    apo_lambda: float = _APO["apo_lambda"].default
    """APO (``policy_term=apo``): the push λ > 0, the factor of every negative advantage (1)."""
    apo_beta: float = _APO["apo_beta"].default
    """APO: the pull β >= 0 towards the Safe Manifold (the reference's top-K tokens) on tokens with a negative
    advantage (0.1)."""
    apo_top_k: int = _APO["apo_top_k"].default
    """APO: K, the Safe Manifold's size: the reference model's K most likely tokens at each position (5)."""

    flowrl_beta: float = _FLOWRL["flowrl_beta"].default
    """FlowRL (``policy_term=flowrl``): the reward scale β > 0 of its target π_ref·exp(β·A) (the authors' 15). Its
    log Z(x) head is trained with the actor (:mod:`sagerl.integrations.verl.log_partition`)."""

    def __post_init__(self) -> None:
        check_verl_version()
        for name, allowed in NUMERIC_RANGES.items():
            value = getattr(self, name)
            if value is not None:
                check_number(f"actor.policy_loss.{name}", value, allowed, ConfigError)
        if self.loss_mode != "sage":
            raise ConfigError(
                f"actor.policy_loss is SAGE's config ({TARGET}) but loss_mode={self.loss_mode!r}: set "
                "actor_rollout_ref.actor.policy_loss.loss_mode=sage (SAGE never falls back to another loss)"
            )
        if self.policy_term in VERL_REFUSED_TERMS:
            raise ConfigError(
                f"actor.policy_loss.policy_term={self.policy_term!r} is not available in verl: "
                f"{VERL_REFUSED_TERMS[self.policy_term]}; use the TRL adapter (sagerl train --preset {self.policy_term})"
            )
        choices = {
            "guide": GUIDES,
            "guide_entropy_source": GUIDE_ENTROPY_SOURCES,
            "token_normalization": TOKEN_NORMALIZATIONS,
            "random_kind": RANDOM_KINDS,
            "kl_placement": KL_PLACEMENTS,
            "policy_term": POLICY_TERMS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"actor.policy_loss.{name}={getattr(self, name)!r} is not one of {', '.join(allowed)}"
                )
        if not 0 < self.q_min <= 1 <= self.q_max:
            raise ConfigError(
                f"actor.policy_loss: need 0 < q_min <= 1 <= q_max, got q_min={self.q_min}, q_max={self.q_max}"
            )
        if self.gamma < 0 or self.token_sigma < 0 or self.random_sigma < 0:
            raise ConfigError("actor.policy_loss: gamma, token_sigma and random_sigma must be >= 0")
        if self.kl_log_ratio_clip is not None and self.kl_log_ratio_clip <= 0:
            raise ConfigError(
                f"actor.policy_loss.kl_log_ratio_clip must be > 0 or null, got {self.kl_log_ratio_clip}"
            )
        if self.policy_term == "clip_cov" and not (
            0 < self.clip_cov_ratio < 1 and self.clip_cov_lb < self.clip_cov_ub
        ):
            raise ConfigError(
                "actor.policy_loss: clip_cov needs 0 < clip_cov_ratio < 1 and clip_cov_lb < clip_cov_ub, got "
                f"{self.clip_cov_ratio}, {self.clip_cov_lb}, {self.clip_cov_ub}"
            )
        if self.policy_term == "kl_cov" and not (0 < self.kl_cov_ratio < 1 and self.ppo_kl_coef >= 0):
            raise ConfigError(
                "actor.policy_loss: kl_cov needs 0 < kl_cov_ratio < 1 and ppo_kl_coef >= 0, got "
                f"{self.kl_cov_ratio}, {self.ppo_kl_coef}"
            )
        if self.entropy_adv_alpha < 0 or not self.entropy_adv_kappa > 1:
            raise ConfigError(
                "actor.policy_loss: the entropy advantage needs entropy_adv_alpha >= 0 and entropy_adv_kappa > 1, "
                f"got {self.entropy_adv_alpha}, {self.entropy_adv_kappa}"
            )
        given = verl_guide_inputs(self.guide_entropy_source)
        missing = [name for name in guide_inputs(self.guide, self.guide_params) if name not in given]
        if missing:
            what = ", ".join(
                "the reference policy's entropies" if name == "entropy" else name for name in missing
            )
            raise ConfigError(
                f"actor.policy_loss.guide={self.guide!r} (guide_entropy_source={self.guide_entropy_source!r}) "
                f"reads {what}, which verl does not compute; verl gives the loss {', '.join(sorted(set(given.values())))}"
            )

    @property
    def guide_params(self) -> GuideParams:
        """The :class:`sagerl.objective.GuideParams` these fields say."""
        return GuideParams.from_config(self)

    @property
    def policy_loss_params(self) -> dict:
        """The keyword parameters of the policy term (:func:`sagerl.objective.policy_loss`), from verl's fields."""
        if self.policy_term == "clip_cov":
            return {
                "clip_cov_ratio": self.clip_cov_ratio,
                "clip_cov_lb": self.clip_cov_lb,
                "clip_cov_ub": self.clip_cov_ub,
            }
        if self.policy_term == "kl_cov":
            return {"kl_cov_ratio": self.kl_cov_ratio, "kl_cov_coef": self.ppo_kl_coef}
        if self.policy_term in SETTINGS_TERMS:
            return {s.name: getattr(self, s.field) for s in POLICY_LOSS_SETTINGS[self.policy_term]}
        return {}


def is_sage(actor_config: Any) -> bool:
    """True when verl's actor config asks for SAGE (``policy_loss.loss_mode == "sage"``)."""
    policy_loss = getattr(actor_config, "policy_loss", None)
    return policy_loss is not None and policy_loss.get("loss_mode", None) == "sage"


def check_actor_config(actor_config: Any) -> str:
    """Check the actor settings SAGE's loss reads, and return the KL estimator (k1, k2 or k3) they mean.

    Args:
        actor_config: verl's ``ActorConfig`` (a dataclass) whose ``policy_loss.loss_mode`` is ``sage``.

    Raises:
        ConfigError: ``policy_loss`` is not :class:`SAGEPolicyLossConfig`; the guide (or SimKO) reads entropies
            but ``calculate_entropy`` is off; SimKO or APO with verl's fused kernels (no top-K hook); APO without
            ``use_kl_loss`` (verl runs no reference pass); FlowRL's settings (:func:`_check_flowrl`); a guide
            without β > 0 (``use_kl_loss`` and ``kl_loss_coef``); a ``kl_loss_type`` sagerl has no estimator for;
            or an entropy bonus.
    """
    settings = actor_config.policy_loss
    if not isinstance(settings, SAGEPolicyLossConfig):
        raise ConfigError(f"loss_mode=sage needs SAGE's settings in actor.policy_loss: add {OVERRIDE}")
    if settings.policy_term == "flowrl":
        _check_flowrl(actor_config)
    needs_entropy = "entropy" in guide_inputs(settings.guide, settings.guide_params)
    simko = settings.policy_term == "simko"
    if (needs_entropy or simko or settings.entropy_adv_alpha > 0) and not actor_config.calculate_entropy:
        reader = (
            f"SAGE's {settings.guide} guide"
            if needs_entropy
            else "SimKO (its high-entropy tokens)"
            if simko
            else "the entropy advantage"
        )
        raise ConfigError(
            f"{reader} reads the policy's token entropies: set "
            "actor_rollout_ref.actor.calculate_entropy=True (they come from the same forward pass)"
        )
    if settings.policy_term in VOCABULARY_TERMS and getattr(actor_config, "use_fused_kernels", False):
        raise ConfigError(
            f"policy_term={settings.policy_term} reads the top-K of the next-token distribution through verl's "
            "top-K hook, which verl's fused kernels skip: set actor_rollout_ref.actor.use_fused_kernels=False"
        )
    if settings.policy_term == "apo" and not actor_config.use_kl_loss:
        raise ConfigError(
            "APO reads the reference model's top-K tokens from verl's reference pass, which verl runs only with a "
            "KL: set actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef=0 keeps the loss free of it)"
        )
    beta = actor_config.kl_loss_coef if actor_config.use_kl_loss else 0.0
    if settings.guide != "none" and beta <= 0:
        raise ConfigError(
            f"SAGE's {settings.guide} guide shapes the KL anchor, so it needs β > 0: set "
            f"actor_rollout_ref.actor.use_kl_loss=True and kl_loss_coef > 0 (got use_kl_loss="
            f"{actor_config.use_kl_loss}, kl_loss_coef={actor_config.kl_loss_coef})"
        )
    if actor_config.kl_loss_type not in KL_LOSS_TYPES:
        raise ConfigError(
            f"actor.kl_loss_type={actor_config.kl_loss_type!r} is not supported with SAGE; use one of "
            f"{', '.join(KL_LOSS_TYPES)}"
        )
    if actor_config.entropy_coeff != 0:
        raise ConfigError(
            f"SAGE's loss has no entropy bonus: set actor.entropy_coeff=0 (got {actor_config.entropy_coeff})"
        )
    return KL_LOSS_TYPES[actor_config.kl_loss_type]


def _check_flowrl(actor_config: Any) -> None:
    """FlowRL's requirements in verl's actor (:mod:`sagerl.integrations.verl.log_partition`).

    Raises:
        ConfigError: no reference pass (``use_kl_loss`` off: its residual reads log π_ref), an aggregation other
            than ``seq-mean-token-mean`` (its loss is a mean over completions), ``kl_placement=reward`` or the
            entropy advantage (per-token advantages), verl's fused kernels (they skip the LM head, whose input
            are the prompt's hidden states) or Ulysses sequence parallelism (it splits a prompt's hidden states
            over ranks), each named in one line.
    """
    settings = actor_config.policy_loss
    problems = []
    if not actor_config.use_kl_loss:
        problems.append(
            "its residual reads the reference's log-probs, which verl computes only with a KL: set "
            "actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef=0 keeps the loss free of it)"
        )
    if actor_config.loss_agg_mode != "seq-mean-token-mean":
        problems.append(
            "its loss is a mean over completions (each token carries its completion's loss): set "
            f"actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean (got {actor_config.loss_agg_mode!r})"
        )
    if settings.kl_placement == "reward":
        problems.append("it takes one advantage per completion; kl_placement=reward makes them per token")
    if getattr(actor_config, "use_fused_kernels", False):
        problems.append(
            "log Z reads the prompt's last hidden states at the LM head, which verl's fused kernels skip: set "
            "actor_rollout_ref.actor.use_fused_kernels=False"
        )
    if settings.entropy_adv_alpha > 0:
        problems.append("it takes one advantage per completion; the entropy advantage makes them per token")
    fsdp = getattr(actor_config, "fsdp_config", None)
    if (
        getattr(actor_config, "ulysses_sequence_parallel_size", 1) != 1
        or (getattr(fsdp, "ulysses_sequence_parallel_size", 1) or 1) != 1
    ):
        problems.append(
            "Ulysses sequence parallelism splits a prompt's hidden states over ranks: set "
            "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=1 (and the deprecated "
            "actor.ulysses_sequence_parallel_size)"
        )
    if problems:
        raise ConfigError("policy_term=flowrl: " + "; ".join(problems))
