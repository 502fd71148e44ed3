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
``kl_loss`` (β's term as aggregated into the loss), ``kl_coef``; with a term that acts on a subset of the tokens
(Clip-Cov, KL-Cov, SimKO, APO) ``covariance/token_share``, that subset's share (as the TRL adapter names it), with ``apo``,
``apo/manifold_mass`` and ``apo/ref_topk_mass`` (the policy's and the reference's mass on the reference's top-K), and
with ``flowrl``, ``flowrl/log_z`` (the mean log Z(x) over completions).
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


SIMKO_TOPK = "sage_simko_topk_logp_{}"
"""The ``model_output`` key of the policy's log-prob of its k-th most likely token (SimKO), per position."""
SIMKO_TOP1 = "sage_simko_is_top1"
"""The ``model_output`` key of 1.0 where the next token is the policy's most likely one (SimKO), per position."""
APO_MANIFOLD = "sage_apo_manifold_logp_{}"
"""The ``model_output`` key of the policy's log-prob of the reference's k-th most likely token (APO), per position."""
APO_REF_MASS = "sage_apo_ref_topk_mass"
"""The ``model_output`` key of the reference's probability mass on its top-K (APO's metric), per position."""


def sage_ppo_loss(
    config: Any,
    model_output: dict | None = None,
    data: Any = None,
    dp_group: Any = None,
    student_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict] | dict[str, torch.Tensor]:
    """SAGE's loss on one micro-batch, in the form of verl's ``ppo_loss``.

    Called twice per micro-batch when the policy term reads the vocabulary (SimKO, APO): first by verl's FSDP engine
    with the training forward's ``student_logits`` (its top-K hook, which :class:`~sagerl.integrations.verl.
    worker.SAGETrainingWorker` turns on), returning per-position tensors (:func:`vocabulary_outputs`) that the
    engine stores in ``model_output``; then with ``model_output``, returning the loss.

    Args:
        config: verl's ``ActorConfig`` with a :class:`~sagerl.integrations.verl.SAGEPolicyLossConfig`
            ``policy_loss`` (checked at start-up by :func:`~sagerl.integrations.verl.config.check_actor_config`).
        model_output: the engine's output: ``log_probs`` (and ``entropy`` when ``calculate_entropy``; SimKO's
            :data:`SIMKO_TOPK` and :data:`SIMKO_TOP1`), nested (no padding) tensors over prompt + response.
        data: the micro-batch TensorDict: ``response_mask``, ``old_log_probs``, ``advantages``, optionally
            ``ref_log_prob`` and ``rollout_is_weights`` (SimKO: ``token_level_scores``), and verl's global sizes.
        dp_group: unused (verl's signature).
        student_logits: (1, nnz, V) the temperature-scaled logits of the micro-batch's packed tokens, with
            gradient (verl's top-K hook); when given, the per-position tensors are returned instead of a loss.

    Returns:
        (0-dim loss with gradient, metrics for verl's logger); with ``student_logits``, a dict of (1, nnz)
        tensors.

    Raises:
        ConfigError: the batch lacks the entropies, reference log-probs or rewards the configuration promised
            (a trainer that bypassed ``calculate_entropy`` or the reference policy), SimKO's or APO's top-K hook did
            not run, (APO) the reference's top-K of the batch is not in this process, or (FlowRL) no log Z was
            computed in this forward or the advantages are per token.
    """
    settings = config.policy_loss
    if student_logits is not None:
        return vocabulary_outputs(settings, student_logits, data)
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

    policy_params = settings.policy_loss_params
    if settings.policy_term == "simko":
        policy_params = {**policy_params, **_simko_inputs(model_output, data, logp, entropy)}
    if settings.policy_term == "apo":
        policy_params = {**policy_params, **_apo_inputs(model_output, data, settings.apo_top_k)}
    advantages = batch["advantages"]
    if settings.policy_term == "flowrl":
        advantages, flowrl_inputs = _flowrl_inputs(advantages, mask, ref_logp)
        policy_params = {**policy_params, **flowrl_inputs}

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
        advantages,
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
        policy_loss_params=policy_params,
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
    if settings.policy_term == "apo":
        mass = torch.logsumexp(policy_params["manifold_logp"].detach(), dim=-1).exp()
        metrics["apo/manifold_mass"] = token_mean(mass)
        metrics["apo/ref_topk_mass"] = token_mean(no_padding_2_padding(model_output[APO_REF_MASS], data))
    if settings.policy_term == "flowrl":
        per_sequence = policy_params["log_z"].detach()[:, None].expand_as(logp)
        metrics["flowrl/log_z"] = Metric(
            value=aggregate(per_sequence, "seq-mean-token-mean"), aggregation=aggregation
        )
    if q is not None:
        metrics["q/mean"] = token_mean(q)
        metrics["q/frac_above_1"] = token_mean(q > 1.0)
        metrics["q/frac_below_1"] = token_mean(q < 1.0)
    return loss, metrics


def vocabulary_outputs(settings: Any, student_logits: torch.Tensor, data: Any) -> dict[str, torch.Tensor]:
    """What the policy term reads from the distribution over the vocabulary, from the training forward's logits.

    SimKO: at each packed position, the log-probs of the policy's K = ``simko_top_k`` most likely tokens (with
    gradient, one (1, nnz) tensor each: :data:`SIMKO_TOPK`), and whether the next token of the packed stream (the
    label verl's own log-prob reads) is the most likely one (:data:`SIMKO_TOP1`). Which tokens are the top-K is
    decided on this forward's values (detached); training is on-policy (``SAGETrainingWorker`` checks), so these
    are π_old's top-K.

    APO: at each packed position, the policy's log-probs of the reference's K = ``apo_top_k`` most likely tokens
    (the Safe Manifold, with gradient: :data:`APO_MANIFOLD`), the reference's ids read from this process's
    reference pass (:data:`sagerl.integrations.verl.reference.REFERENCE_TOPK`), and the reference's mass on them
    (:data:`APO_REF_MASS`).

    Args:
        settings: the actor's :class:`~sagerl.integrations.verl.SAGEPolicyLossConfig`.
        student_logits: (1, nnz, V), temperature-scaled, with gradient.
        data: the micro-batch TensorDict (its nested ``input_ids``: nnz tokens).

    Raises:
        ConfigError: the logits do not cover the micro-batch's packed tokens one for one (a Ulysses sequence-
            parallel group splits them: these terms need ``ulysses_sequence_parallel_size=1``), the reference's
            top-K of these sequences is not in this process (APO), or the policy term reads no vocabulary.
    """
    term = settings.policy_term
    if term not in ("simko", "apo"):
        raise ConfigError(f"verl's top-K hook ran for policy_term={term!r}, which reads no vocabulary")
    input_ids = data["input_ids"]
    labels = torch.roll(input_ids.values() if input_ids.is_nested else input_ids.reshape(-1), shifts=-1)
    if student_logits.dim() != 3 or student_logits.shape[:2] != (1, labels.numel()):
        raise ConfigError(
            f"policy_term={term!r}: the actor's logits {tuple(student_logits.shape)} do not cover the micro-batch's "
            f"{labels.numel()} packed tokens one for one (Ulysses sequence parallelism splits them): set "
            "ulysses_sequence_parallel_size=1"
        )
    logprobs = torch.log_softmax(student_logits[0].float(), dim=-1)
    if term == "apo":
        from sagerl.integrations.verl.reference import REFERENCE_TOPK

        ref_ids, ref_probs = REFERENCE_TOPK.take(input_ids)
        if ref_ids.shape != (labels.numel(), settings.apo_top_k):
            raise ConfigError(
                f"APO: the reference pass kept {tuple(ref_ids.shape)} top-K ids for {labels.numel()} tokens with "
                f"apo_top_k={settings.apo_top_k}"
            )
        manifold = logprobs.gather(-1, ref_ids.to(logprobs.device))
        outputs = {APO_MANIFOLD.format(k): manifold[None, :, k] for k in range(settings.apo_top_k)}
        outputs[APO_REF_MASS] = ref_probs.sum(dim=-1).to(logprobs.device)[None]
        return outputs
    top = logprobs.detach().topk(settings.simko_top_k, dim=-1).indices
    topk_logp = logprobs.gather(-1, top)
    outputs = {SIMKO_TOPK.format(k): topk_logp[None, :, k] for k in range(settings.simko_top_k)}
    outputs[SIMKO_TOP1] = (top[:, 0] == labels.to(top.device)).float()[None]
    return outputs


def _simko_inputs(model_output: dict, data: Any, logp: torch.Tensor, entropy: torch.Tensor | None) -> dict:
    """SimKO's per-token inputs (:data:`sagerl.objective.simko.INPUTS`) from the engine's output, (B, T[, K]).

    ``correct`` (B,): the completion's task score (verl's ``token_level_scores``, summed over its tokens) is 1,
    as the authors' code reads it. On-policy, π_old's top-K log-probs are this forward's, detached.
    """
    names = sorted(k for k in model_output if k.startswith(SIMKO_TOPK.format("")))
    if not names or SIMKO_TOP1 not in model_output:
        raise ConfigError(
            "SimKO: the actor's forward returned no top-K log-probs (verl's top-K hook did not run: "
            "is SAGETrainingWorker the actor's worker?)"
        )
    if entropy is None:
        raise ConfigError(
            "SimKO reads the policy's entropies: set actor_rollout_ref.actor.calculate_entropy=True"
        )
    if "token_level_scores" not in data:
        raise ConfigError("SimKO reads each completion's task score: the batch has no token_level_scores")
    topk = torch.stack(
        [no_padding_2_padding(model_output[SIMKO_TOPK.format(k)], data) for k in range(len(names))], dim=-1
    )
    scores = data.select("token_level_scores").to_padded_tensor()["token_level_scores"]
    return {
        "topk_logp": topk,
        "old_topk_logp": topk.detach(),
        "entropy": entropy,
        "is_top1": no_padding_2_padding(model_output[SIMKO_TOP1], data) > 0.5,
        "correct": scores.sum(dim=-1).to(logp.device) == 1.0,
    }


def _flowrl_inputs(
    advantages: torch.Tensor, mask: torch.Tensor, ref_logp: torch.Tensor | None
) -> tuple[torch.Tensor, dict]:
    """FlowRL's advantage per completion (B,) from verl's per-token ones (B, T), and its inputs
    (:data:`sagerl.objective.flowrl.INPUTS`): log Z(x) of each completion's prompt from this forward
    (:data:`sagerl.integrations.verl.log_partition.LOG_Z`, with gradient) and the reference's log-probs.

    Raises:
        ConfigError: advantages that differ between the tokens of a completion (FlowRL's r̂ is one per completion),
            or no reference log-probs (no reference pass ran).
    """
    from sagerl.integrations.verl.log_partition import LOG_Z

    if ref_logp is None:
        raise ConfigError("FlowRL reads the reference's log-probs: the batch has no ref_log_prob")
    valid = mask.to(advantages.dtype)
    first = mask.to(torch.int8).argmax(dim=1, keepdim=True)  # each completion's first valid token (0 if none)
    per_completion = advantages.gather(1, first)[:, 0] * valid.amax(dim=1)
    spread = ((advantages - per_completion[:, None]).abs() * valid).amax() if mask.any() else 0.0
    if spread > 1e-6 * max(1.0, float(per_completion.abs().max())):
        raise ConfigError(
            "FlowRL takes one advantage per completion, but the advantages differ between the tokens of a "
            f"completion (by up to {float(spread):.3g}): use an outcome estimator (grpo, rloo, ...) without a "
            "per-token reward"
        )
    log_z = LOG_Z.take(advantages.shape[0]).to(advantages.device)
    return per_completion, {"log_z": log_z, "ref_logp": ref_logp}


def _apo_inputs(model_output: dict, data: Any, k: int) -> dict:
    """APO's per-token inputs (:data:`sagerl.objective.apo.INPUTS`), (B, T, K), from the engine's output; on-policy,
    π_old's log-probs of the Safe Manifold are this forward's, detached."""
    if APO_MANIFOLD.format(0) not in model_output:
        raise ConfigError(
            "APO: the actor's forward returned no Safe Manifold log-probs (verl's top-K hook did not run: "
            "is SAGETrainingWorker the actor's worker?)"
        )
    manifold = torch.stack(
        [no_padding_2_padding(model_output[APO_MANIFOLD.format(j)], data) for j in range(k)], dim=-1
    )
    return {"manifold_logp": manifold, "old_manifold_logp": manifold.detach()}


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
