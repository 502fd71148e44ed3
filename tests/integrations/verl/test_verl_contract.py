"""The verl internals the SAGE plugin relies on. If a verl upgrade changes one, this fails loudly and names it."""

import importlib.util
import inspect
import re
from pathlib import Path

import verl
from verl.trainer.ppo.core_algos import agg_loss, register_adv_est, register_policy_loss
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils.config import validate_config
from verl.workers.config import ActorConfig, PolicyLossConfig
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
from verl.workers.utils import losses

from sagerl.integrations.verl.worker import SAGETrainingWorker

PINNED_VERL = "0.9.1"


def _module_source(name: str) -> str:
    """A verl module's source, read without importing it (the FSDP engine picks its device at import)."""
    return Path(importlib.util.find_spec(name).origin).read_text()


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_verl_version_is_the_pinned_one():
    assert verl.__version__ == PINNED_VERL, (
        f"sagerl's verl plugin was written and tested against verl {PINNED_VERL}, found {verl.__version__}: "
        "rerun this module's checks and tests/integrations/verl before widening TESTED_VERL"
    )


def test_the_one_replaced_name():
    # the plugin swaps this class attribute, and only when it still holds verl's own TrainingWorker
    assert ActorRolloutRefWorker.actor_worker_cls is SAGETrainingWorker
    assert SAGETrainingWorker.__bases__ == (TrainingWorker,)
    init_model = inspect.getsource(ActorRolloutRefWorker.init_model)
    assert "self.actor = self.actor_worker_cls(config=actor_training_config)" in init_model
    assert "partial(ppo_loss, config=actor_config)" in init_model
    assert "self.actor.set_loss_fn(self.loss_fn)" in init_model
    assert init_model.index("omega_conf_to_dataclass(self.config.actor)") < init_model.index(
        "self.actor_worker_cls("
    )
    assert _params(TrainingWorker.set_loss_fn) == ["self", "loss_fn"]
    assert "self.actor.set_loss_fn(loss_fn=loss_fn)" in inspect.getsource(ActorRolloutRefWorker.set_loss_fn)
    assert "self.loss_fn = loss_fn" in inspect.getsource(TrainingWorker.set_loss_fn)
    assert "loss_function=self.loss_fn" in inspect.getsource(TrainingWorker.train_batch)


def test_the_top_k_hook_simko_and_apo_use():
    """SimKO and APO read the vocabulary through the FSDP engine's top-K hook: with ``distillation_use_topk`` on a
    micro-batch, the engine calls the loss function with the logits (student_logits) and keeps what it returns in
    model_output; APO's reference pass runs in the reference worker built from ``ref_worker_cls``."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    from sagerl.integrations.verl.reference import SAGEReferenceWorker

    assert ActorRolloutRefWorker.ref_worker_cls is SAGEReferenceWorker
    assert SAGEReferenceWorker.__bases__ == (TrainingWorker,)
    assert "self.ref = self.ref_worker_cls(config=ref_training_config)" in inspect.getsource(
        ActorRolloutRefWorker.init_model
    )
    outputs = inspect.getsource(FSDPEngineWithLMHead.prepare_model_outputs)
    assert 'key="distillation_use_topk"' in outputs
    assert "logits_processor_func(student_logits=logits_rmpad.unsqueeze(0), data=micro_batch)" in outputs
    assert "model_output[k] = torch.nested.nested_tensor_from_jagged(v, cu_seqlens)" in outputs
    step = inspect.getsource(FSDPEngineWithLMHead.forward_step)
    assert "logits_processor_func=loss_function" in step
    infer = inspect.getsource(TrainingWorker.infer_batch)
    assert "loss_function = self.loss_fn if compute_loss else None" in infer
    # the trainer runs the reference pass before the actor's update, in the same worker when colocated
    assert "compute_ref_log_prob(batch_td)" in inspect.getsource(RayPPOTrainer._compute_ref_log_prob)


def test_the_loss_function_contract():
    assert _params(losses.ppo_loss) == ["config", "model_output", "data", "dp_group"]
    source = inspect.getsource(losses.ppo_loss)
    for piece in (
        'no_padding_2_padding(model_output["log_probs"], data)',
        'model_output.get("entropy", None)',
        'config.global_batch_info["dp_size"] = data["dp_size"]',
        'config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]',
        'config.global_batch_info["global_batch_size"] = data["global_batch_size"]',
        '"response_mask", "old_log_probs", "advantages"',
        '"rollout_is_weights"',
        '"ref_log_prob"',
        "AggregationType.SUM",
        "config.kl_loss_coef",
    ):
        assert piece in source, piece
    # the engine calls the loss with keywords and sums micro-batch losses normalised by the global sizes
    engine = _module_source("verl.workers.engine.fsdp.transformer_impl")
    assert re.search(r"loss_function\(\s*model_output=model_output,\s*data=", engine)
    assert 'batch_num_tokens = data["loss_mask"].sum()' in engine
    assert _params(agg_loss)[:7] == [
        "loss_mat",
        "loss_mask",
        "loss_agg_mode",
        "dp_size",
        "batch_num_tokens",
        "global_batch_size",
        "loss_scale_factor",
    ]


def test_config_contract():
    # SAGE's fields ride on PolicyLossConfig, selected by _target_, and are built in the driver at start-up
    assert "policy_loss" in {f for f in ActorConfig.__dataclass_fields__}
    assert "loss_mode" in PolicyLossConfig.__dataclass_fields__
    assert "omega_conf_to_dataclass(config.actor_rollout_ref.actor)" in inspect.getsource(validate_config)
    for field in (
        "calculate_entropy",
        "use_kl_loss",
        "kl_loss_coef",
        "kl_loss_type",
        "entropy_coeff",
        "clip_ratio_c",
    ):
        assert field in ActorConfig.__dataclass_fields__, field
    # the trainer computes entropies in the update's forward pass only when calculate_entropy is set
    update = inspect.getsource(PPOTrainer._update_actor)
    assert '"calculate_entropy": calculate_entropy' in update
    assert "actor.calculate_entropy" in update


def test_registries_the_plugin_uses():
    assert _params(register_policy_loss) == ["name"]
    assert _params(register_adv_est) == ["name_or_enum"]
    advantage = _module_source("verl.trainer.ppo.ray_trainer")
    assert '"token_level_rewards": data.batch["token_level_rewards"]' in advantage
    assert 'adv_kwargs["index"] = data.non_tensor_batch["uid"]' in advantage
    plugins = inspect.getsource(verl)
    assert 'entry_points(group="verl.plugins")' in plugins


def test_what_flowrls_log_z_head_relies_on():
    """FlowRL's head (sagerl.integrations.verl.log_partition): the actor is built (reset) before it gets its loss;
    the FSDP engine builds the model (``_build_module``) before FSDP wraps it and the optimizer is made from its
    parameters; each micro-batch's forward runs through ``self.forward_step`` with the micro-batch, the model's
    forward and the loss inside; the rollout gets its weights from ``get_per_tensor_param``; the LM head is called
    with the last hidden states."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine, FSDPEngineWithLMHead

    init_model = inspect.getsource(ActorRolloutRefWorker.init_model)
    assert init_model.index("self.actor.reset()") < init_model.index("self.actor.set_loss_fn(self.loss_fn)")
    assert "self._build_model_optimizer()" in inspect.getsource(FSDPEngine.initialize)
    build = inspect.getsource(FSDPEngine._build_model_optimizer)
    order = ["self._build_module()", "self._build_fsdp_module(module)", "self._build_optimizer(module)"]
    assert [build.index(piece) for piece in order] == sorted(build.index(piece) for piece in order)
    assert "build_optimizer(module.parameters()" in inspect.getsource(FSDPEngine._build_optimizer)
    assert "self.forward_step(micro_batch" in _module_source("verl.workers.engine.fsdp.transformer_impl")
    step = inspect.getsource(FSDPEngineWithLMHead.forward_step)
    assert step.index("self.module(") < step.index("loss_function(")
    assert "self.actor.engine.get_per_tensor_param(" in inspect.getsource(
        ActorRolloutRefWorker.update_weights
    )
    # the delta sync's snapshot and steady state read the engine's (wrapped) shard export
    from verl.workers.engine.base import BaseEngine

    assert "self.get_per_tensor_param_shard()" in inspect.getsource(BaseEngine.prime_delta_snapshots)
    assert "self.get_per_tensor_param_shard()" in inspect.getsource(
        FSDPEngine.get_per_tensor_param_delta_shard
    )
    delta = _module_source("verl.checkpoint_engine.delta_checkpoint_engine")
    assert "engine.get_per_tensor_param()" in delta and "engine.get_per_tensor_param_delta_shard()" in delta
    from transformers.models.qwen2 import modeling_qwen2

    assert "self.lm_head(hidden_states[:, slice_indices, :])" in inspect.getsource(
        modeling_qwen2.Qwen2ForCausalLM.forward
    )
