"""SAGE's actor loss for verl: the same :func:`sagerl.objective.sage_loss` the TRL adapter calls.

:func:`sage_ppo_loss` has the signature of verl's ``verl.workers.utils.losses.ppo_loss`` and replaces it for
an actor whose ``policy_loss.loss_mode`` is ``sage``. Its inputs are what verl already computed: the policy's
log-probs and entropies from the actor's training forward pass (``model_output``), and ``old_log_probs``,
``ref_log_prob``, ``advantages`` and ``response_mask`` from the batch. No extra forward pass.

Per micro-batch, with tensors (B, T) over response tokens:

1. q = :func:`sagerl.objective.compute_guide` (branch: clamp(1 + γ(H_t − τ)₊, q_min, q_max) from the
   policy's entropy H_t, nats), or None for the ``none`` guide;
2. the per-token loss of :func:`sagerl.objective.sage_loss`: verl's clipped surrogate (ε_low/ε_high =
   ``clip_ratio_low/high``, the dual clip ``clip_ratio_c`` as ``delta``, ``rollout_is_weights`` as importance
   weights) plus β·k(π, q·π_ref) (``kl_placement="loss"``), or the k1 reward-to-go in the advantages
   (``kl_placement="reward"``); β = ``kl_loss_coef`` when ``use_kl_loss``, else 0;
3. aggregated by verl's ``agg_loss`` with verl's global batch sizes (``dp_size``, ``batch_num_tokens``,
   ``global_batch_size``), so that micro-batches and data-parallel ranks add up to the mini-batch's loss
   exactly as verl's own ``ppo_loss`` does. With one micro-batch on one rank this is ``sage_loss(...).loss``.

Metrics, token-weighted over the mini-batch (verl prefixes them with ``actor/``): ``kl`` (the divergence
in the loss, shaped by q), ``kl/reference`` (plain k3 KL(π‖π_ref)), ``q/mean``, ``q/frac_above_1``,
``q/frac_below_1`` (as the TRL adapter logs them), and verl's ``pg_loss``, ``pg_clipfrac``, ``ppo_kl``,
``kl_loss`` (β's term as aggregated into the loss), ``kl_coef``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.padding import no_padding_2_padding

from sagerl.errors import ConfigError
from sagerl.integrations.verl.config import KL_LOSS_TYPES
from sagerl.objective import compute_guide, sage_loss, shaped_kl

logger = logging.getLogger(__name__)


def sage_ppo_loss(
    config: Any, model_output: dict, data: Any, dp_group: Any = None
) -> tuple[torch.Tensor, dict]:
    """SAGE's loss on one micro-batch, in the form of verl's ``ppo_loss``.

    Args:
        config: verl's ``ActorConfig`` with a :class:`~sagerl.integrations.verl.SAGEPolicyLossConfig`
            ``policy_loss`` (checked at start-up by :func:`~sagerl.integrations.verl.config.check_actor_config`).
        model_output: the engine's output: ``log_probs`` (and ``entropy`` when ``calculate_entropy``), nested
            (no padding) tensors over prompt + response.
        data: the micro-batch TensorDict: ``response_mask``, ``old_log_probs``, ``advantages``, optionally
            ``ref_log_prob`` and ``rollout_is_weights``, and verl's global sizes.
        dp_group: unused (verl's signature).

    Returns:
        (0-dim loss with gradient, metrics for verl's logger).

    Raises:
        ConfigError: the batch lacks the entropies or reference log-probs the configuration promised
            (a trainer that bypassed ``calculate_entropy`` or the reference policy).
    """
    settings = config.policy_loss
    logp = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)

    info = config.global_batch_info
    info["dp_size"] = data["dp_size"]
    info["batch_num_tokens"] = data["batch_num_tokens"]
    info["global_batch_size"] = data["global_batch_size"]
    info["loss_scale_factor"] = config.loss_scale_factor
    global_sizes = (
        info["dp_size"] > 1
        or info["batch_num_tokens"] is not None
        or info["global_batch_size"] is not None
        or info["loss_scale_factor"] is not None
    )
    # verl's rule (ppo_loss): values normalised by global sizes add up over micro-batches
    aggregation = AggregationType.SUM if global_sizes else AggregationType.MEAN

    fields = ["response_mask", "old_log_probs", "advantages"]
    fields += [key for key in ("ref_log_prob", "rollout_is_weights") if key in data]
    batch = data.select(*fields).to_padded_tensor()
    mask = batch["response_mask"].bool()
    ref_logp = batch.get("ref_log_prob", None)
    beta = config.kl_loss_coef if config.use_kl_loss else 0.0
    if beta and ref_logp is None:
        raise ConfigError(
            "SAGE: use_kl_loss=True but the batch has no ref_log_prob (no reference policy ran)"
        )

    from_reference = settings.guide_entropy_source == "reference"
    try:
        q = compute_guide(
            settings.guide,
            mask,
            settings.guide_params,
            entropy=None if from_reference else entropy,
            logp=ref_logp if from_reference else logp.detach(),
            ref_logp=ref_logp,
        )
    except ValueError as exc:
        raise ConfigError(
            f"SAGE's {settings.guide} guide: {exc} (set actor_rollout_ref.actor.calculate_entropy=True)"
        ) from exc

    out = sage_loss(
        logp,
        batch["old_log_probs"],
        ref_logp,
        batch["advantages"],
        mask,
        log_q=None if q is None else torch.log(q),
        beta=beta,
        kl_estimator=KL_LOSS_TYPES[config.kl_loss_type],
        kl_log_ratio_clip=settings.kl_log_ratio_clip,
        kl_placement=settings.kl_placement,
        epsilon_low=config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio,
        epsilon_high=config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio,
        delta=config.clip_ratio_c
        if settings.policy_term == "clip"
        else None,  # verl's Clip-/KL-Cov: no dual clip
        importance_weights=batch.get("rollout_is_weights", None),
        policy_loss=settings.policy_term,
        policy_loss_params=settings.policy_loss_params,
        entropy=entropy,
        entropy_adv_alpha=settings.entropy_adv_alpha,
        entropy_adv_kappa=settings.entropy_adv_kappa,
    )
    if settings.policy_term == "kl_cov":
        _warn_if_on_policy(logp.detach(), batch["old_log_probs"], mask)

    def aggregate(per_token: torch.Tensor, mode: str = config.loss_agg_mode) -> torch.Tensor:
        return agg_loss(loss_mat=per_token, loss_mask=mask, loss_agg_mode=mode, **info)

    def token_mean(per_token: torch.Tensor) -> Metric:
        return Metric(value=aggregate(per_token.detach().float(), "token-mean"), aggregation=aggregation)

    loss = aggregate(out.per_token_loss)
    surrogate = out.surrogate
    weights = batch.get("rollout_is_weights", None)
    pg_per_token = surrogate.loss if weights is None else surrogate.loss * weights
    metrics: dict[str, Any] = {
        "actor/pg_loss": Metric(value=aggregate(pg_per_token.detach()), aggregation=aggregation),
        "actor/pg_clipfrac": token_mean(surrogate.clipped_low | surrogate.clipped_high),
        "actor/ppo_kl": token_mean(batch["old_log_probs"] - logp.detach()),
    }
    if out.kl is not None:
        metrics["kl"] = token_mean(out.kl)
        if settings.kl_placement == "loss":
            metrics["kl_loss"] = Metric(value=aggregate(out.kl), aggregation=aggregation)
        metrics["kl_coef"] = beta
    if ref_logp is not None:
        metrics["kl/reference"] = token_mean(shaped_kl(logp.detach(), ref_logp, None, "k3"))
    if surrogate.covariance_masked is not None:
        metrics["covariance/token_share"] = token_mean(surrogate.covariance_masked)
    if q is not None:
        metrics["q/mean"] = token_mean(q)
        metrics["q/frac_above_1"] = token_mean(q > 1.0)
        metrics["q/frac_below_1"] = token_mean(q < 1.0)
    return loss, metrics


_warned_on_policy = False


def _warn_if_on_policy(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> None:
    """Warn once when KL-Cov trains strictly on-policy (log π = log π_old at every token): its penalty and
    its gradient are then 0, and the loss is the plain policy gradient. verl's actor cannot see the rollout
    batch size at start-up, so the check is on the first batches' values."""
    global _warned_on_policy
    if _warned_on_policy or not mask.any():
        return
    if torch.equal(logp[mask], old_logp[mask]):
        _warned_on_policy = True
        logger.warning(
            "sagerl: policy_term=kl_cov on an on-policy mini-batch (log π = log π_old): KL-Cov's penalty is 0 "
            "there; use several mini-batches per rollout batch (ppo_mini_batch_size < train_batch_size) or "
            "ppo_epochs > 1"
        )
