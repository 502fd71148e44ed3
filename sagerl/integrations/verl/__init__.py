"""SAGE as a verl plugin: ``loss_mode=sage`` in a ``python -m verl.trainer.main_ppo ...`` command.

verl imports this module on ``import verl``, in the driver and in every Ray worker, through the
``verl.plugins`` entry point that sagerl declares (pyproject.toml). A GRPO command gets SAGE (branch guide,
the paper's γ = 0.3, τ = 1.2 nats, q ∈ [0.6, 1.4]) with two overrides::

    ++actor_rollout_ref.actor.policy_loss={_target_:sagerl.integrations.verl.SAGEPolicyLossConfig,loss_mode:sage}
    actor_rollout_ref.actor.calculate_entropy=True

plus the KL settings of verl's GRPO (``use_kl_loss=True``, ``kl_loss_coef`` = β, ``kl_loss_type=low_var_kl``).
Other SAGE fields go in the same braces (``guide:token,gamma:0.5,kl_placement:reward``); see
:class:`SAGEPolicyLossConfig`. The loss is :func:`sagerl.objective.sage_loss`, the function the TRL adapter
calls, fed with the entropies and reference log-probs verl already computes (:mod:`.loss`).

How SAGE gets into verl, and why this way. verl 0.9.1 offers three extension points; none suffices alone:

- a registered policy loss (``register_policy_loss``) sees neither the entropies nor the reference log-probs,
  so it cannot shape the anchor (it is registered here only as a guard that raises if anything bypasses SAGE);
- a registered trainer calling ``actor_rollout_wg.set_loss_fn`` (the public alternative) would have to be
  chosen with ``trainer.v1.trainer_mode``, but verl's trainers test ``trainer_mode == "sync"`` by name
  (replay buffer, refill, weight sync), so a new mode breaks the synchronous trainer, and the asynchronous
  trainers and the legacy v0 trainer would each need their own subclass;
- ``_target_`` selects config classes, which is how SAGE's fields (and their start-up checks, run by verl's
  ``validate_config`` in the driver) get in: :class:`SAGEPolicyLossConfig`.

So one name is replaced: ``ActorRolloutRefWorker.actor_worker_cls``, the class attribute through which every
verl trainer (v0, v1 sync and async) builds the actor's training worker, becomes
:class:`~.worker.SAGETrainingWorker`, whose ``set_loss_fn`` swaps verl's ``ppo_loss`` for SAGE's when the
actor's config says ``loss_mode=sage`` (and is verl's own class otherwise). Compared with replacing
``engine_workers.ppo_loss`` (the feasibility probe's way), it checks the actor's settings in ``init_model``
rather than at the first step, and it also catches ``set_loss_fn`` calls and on-policy distillation, which
would bypass SAGE. A second class attribute, ``ref_worker_cls``, becomes :class:`~.reference.SAGEReferenceWorker`:
for APO (``policy_term=apo``) its reference pass also keeps the reference's top-K tokens for the actor's loss in
the same process; for every other actor it is verl's own ``TrainingWorker``. For FlowRL (``policy_term=flowrl``)
the SAGE worker also gives its own FSDP engine (that instance only) the log Z head: the model is built again with
the head, and the engine's ``forward_step`` and weight exports are wrapped (:mod:`.log_partition`). The
replacement happens only for verl versions in :data:`TESTED_VERL`, and tests/integrations/verl/test_verl_contract.py
checks every verl internal it relies on.

Start-up errors (:class:`sagerl.errors.ConfigError`, one line): in the driver, SAGE's fields, a guide that
reads inputs verl does not compute (a teacher's log-probs, the reference's entropies) and the verl version;
in the actor worker's ``init_model``, before the first rollout, ``calculate_entropy`` off for a guide that
reads entropies, β = 0 with a guide, an unsupported ``kl_loss_type``, an entropy bonus, a loss other than
``ppo_loss`` (distillation).
"""

from __future__ import annotations

import logging

from sagerl.errors import ConfigError, first_line
from sagerl.integrations.verl.config import OVERRIDE, TARGET, SAGEPolicyLossConfig, check_actor_config
from sagerl.integrations.verl.version import TESTED_VERL, check_verl_version

__all__ = [
    "OVERRIDE",
    "TARGET",
    "TESTED_VERL",
    "SAGEPolicyLossConfig",
    "check_actor_config",
    "check_verl_version",
    "install",
]

logger = logging.getLogger(__name__)


def install() -> bool:
    """Put SAGE's actor loss into verl, and sagerl's advantage estimators as ``algorithm.adv_estimator=NAME``
    (bnpo, passk, pkpo, maxpo, w_reinforce, psr, nsr, rs_grpo, passk_mix; the ones that need more than the rewards only
    to refuse them with the reason: :mod:`.advantages`), and the unbiased pass@k into verl's validation metrics
    (:mod:`.validation`); idempotent; verl's plugin loader runs it on ``import verl``.

    Returns:
        True when installed. False, with verl left untouched and a one-line warning logged, when verl's version
        is outside :data:`TESTED_VERL`; asking for SAGE then fails at start-up with that line, because
        :class:`SAGEPolicyLossConfig` checks the version too.
    """
    try:
        check_verl_version()
    except ConfigError as exc:
        logger.warning("sagerl: SAGE is not installed into verl: %s", first_line(exc))
        return False
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    from sagerl.integrations.verl.advantages import ESTIMATORS
    from sagerl.integrations.verl.validation import install as install_validation_passk
    from sagerl.integrations.verl.worker import use_sage_worker

    use_sage_worker()
    install_validation_passk()
    for name, estimator in ESTIMATORS.items():
        if name not in ADV_ESTIMATOR_REGISTRY:
            register_adv_est(name)(estimator)
        elif ADV_ESTIMATOR_REGISTRY[name] is not estimator:
            logger.warning(
                "sagerl: another plugin registered verl's %r advantage estimator; keeping it", name
            )
    return True


install()
