"""Where SAGE's loss enters verl's actor: the one name the plugin replaces, guarded by a version check.

verl 0.9's actor worker (``verl.workers.engine_workers.ActorRolloutRefWorker.init_model``) builds its inner
training worker from the class attribute ``actor_worker_cls`` and hands it ``partial(ppo_loss,
config=actor_config)`` through ``set_loss_fn``; a trainer may later call ``set_loss_fn`` again (the public
``actor_rollout_wg.set_loss_fn``). :class:`SAGETrainingWorker` is verl's ``TrainingWorker`` whose
``set_loss_fn`` turns ``ppo_loss`` into :func:`~sagerl.integrations.verl.loss.sage_ppo_loss` when the actor's
config asks for SAGE, after :func:`~sagerl.integrations.verl.config.check_actor_config` (so a bad setting
fails in ``init_model``, before the first rollout), and refuses any other loss for a SAGE actor (on-policy
distillation, a custom loss): SAGE is never silently replaced by another objective. For every other actor
it is verl's ``TrainingWorker`` unchanged.

:func:`use_sage_worker` sets ``ActorRolloutRefWorker.actor_worker_cls`` to it (and ``ref_worker_cls`` to
:class:`~sagerl.integrations.verl.reference.SAGEReferenceWorker`, verl's own class except for APO) (called by the plugin's
:func:`~sagerl.integrations.verl.install` after the version check); tests/integrations/verl/
test_verl_contract.py checks the internals this relies on.
"""

from __future__ import annotations

from functools import partial

from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker, ppo_loss

from sagerl.errors import ConfigError
from sagerl.integrations.verl.config import VOCABULARY_TERMS, check_actor_config, is_sage
from sagerl.integrations.verl.log_partition import install as install_log_partition
from sagerl.integrations.verl.loss import sage_ppo_loss
from sagerl.integrations.verl.reference import REFERENCE_TOPK, SAGEReferenceWorker


def sage_loss_fn(loss_fn):
    """``loss_fn`` itself for a non-SAGE actor; SAGE's loss for a SAGE actor whose loss is verl's ``ppo_loss``.

    Raises:
        ConfigError: a SAGE actor with any other loss, or a setting :func:`check_actor_config` refuses.
    """
    config = loss_fn.keywords.get("config") if isinstance(loss_fn, partial) else None
    if config is None or not is_sage(config):
        return loss_fn
    if loss_fn.func is sage_ppo_loss:
        return loss_fn
    if loss_fn.func is not ppo_loss or set(loss_fn.keywords) != {"config"}:
        name = getattr(loss_fn.func, "__qualname__", repr(loss_fn.func))
        raise ConfigError(
            f"loss_mode=sage, but the actor's loss is {name}: SAGE replaces verl's ppo_loss only "
            "(on-policy distillation or a custom loss would bypass it)"
        )
    check_actor_config(config)
    return partial(sage_ppo_loss, config=config)


def _is_sage(loss_fn) -> bool:
    return isinstance(loss_fn, partial) and loss_fn.func is sage_ppo_loss


class SAGETrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker``, whose loss is SAGE's when the actor's config says ``loss_mode=sage`` (with
    ``policy_term=flowrl``, its model gets FlowRL's log Z head when it gets the loss:
    :mod:`sagerl.integrations.verl.log_partition`)."""

    _sage_actor = False

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_loss_fn(self, loss_fn):
        loss_fn = sage_loss_fn(loss_fn)
        if self._sage_actor and not _is_sage(loss_fn):
            raise ConfigError(
                "this actor trains with SAGE (loss_mode=sage); a loss without SAGE was set on it"
            )
        self._sage_actor = _is_sage(loss_fn)
        settings = loss_fn.keywords["config"].policy_loss if self._sage_actor else None
        # APO: this process's reference pass keeps the reference's top-K for the loss (sagerl.integrations.verl.reference)
        REFERENCE_TOPK.request(settings.apo_top_k if settings and settings.policy_term == "apo" else None)
        if (
            settings and settings.policy_term == "flowrl"
        ):  # its log Z head, in the actor's model and optimizer
            install_log_partition(self)
        super().set_loss_fn(loss_fn)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def train_mini_batch(self, data):
        """verl's update; for a policy term that reads the vocabulary (SimKO, APO), first turn on the FSDP engine's top-K
        hook (``distillation_use_topk``: the engine hands the training forward's logits to the loss function,
        :func:`~sagerl.integrations.verl.loss.sage_ppo_loss`, and keeps what it returns in ``model_output``).

        Raises:
            ConfigError: SimKO or APO on a batch trained off-policy (more than one mini-batch per rollout batch, or
                ``ppo_epochs`` > 1): they read π_old's log-probs of top-K tokens (SimKO: π_old's own top-K; APO: the
                reference's), which verl's π_old pass does not compute.
        """
        term = self.loss_fn.keywords["config"].policy_loss.policy_term if self._sage_actor else None
        if term in VOCABULARY_TERMS:
            epochs = tu.get_non_tensor_data(data=data, key="epochs", default=1)
            mini_batch = tu.get_non_tensor_data(data=data, key="mini_batch_size", default=None)
            mini_batches = tu.get_non_tensor_data(data=data, key="num_mini_batch", default=None)
            per_rank = None if mini_batch is None else mini_batch // self.engine.get_data_parallel_size()
            if epochs != 1 or (mini_batches or 1) > 1 or (per_rank is not None and per_rank < data.shape[0]):
                raise ConfigError(
                    f"policy_term={term!r} reads π_old's log-probs of top-K tokens, which verl's π_old pass does not "
                    f"compute: train on-policy (ppo_epochs=1 and ppo_mini_batch_size = train_batch_size; got "
                    f"{epochs} epochs, mini-batches of {mini_batch} in a batch of {data.shape[0]} per rank)"
                )
            tu.assign_non_tensor(data, distillation_use_topk=True)
        return super().train_mini_batch(data)


def _bypassed(*args, **kwargs):
    """verl's ``ppo_loss`` looked ``loss_mode=sage`` up in its policy-loss registry: SAGE's loss was bypassed."""
    raise ConfigError(
        "loss_mode=sage reached verl's own ppo_loss: SAGE's actor loss is not installed in this worker "
        "(is sagerl[verl] installed where the workers run, and VERL_USE_EXTERNAL_PLUGINS not 'none'?)"
    )


def use_sage_worker() -> None:
    """Set ``ActorRolloutRefWorker.actor_worker_cls`` to :class:`SAGETrainingWorker` and ``ref_worker_cls`` to
    :class:`~sagerl.integrations.verl.reference.SAGEReferenceWorker` (idempotent; both are verl's ``TrainingWorker``
    for any actor that does not train with SAGE's APO), and register ``loss_mode=sage`` in verl's policy-loss
    registry as a guard that raises if anything bypasses it.

    Raises:
        ConfigError: another plugin already replaced ``actor_worker_cls`` or ``ref_worker_cls``.
    """
    for attribute, ours in (
        ("actor_worker_cls", SAGETrainingWorker),
        ("ref_worker_cls", SAGEReferenceWorker),
    ):
        current = getattr(ActorRolloutRefWorker, attribute)
        if current is ours:
            continue
        if current is not TrainingWorker:
            raise ConfigError(
                f"verl's ActorRolloutRefWorker.{attribute} is {current.__qualname__}, not TrainingWorker: "
                "another plugin replaced it"
            )
        setattr(ActorRolloutRefWorker, attribute, ours)
    if "sage" not in POLICY_LOSS_REGISTRY:
        register_policy_loss("sage")(_bypassed)
