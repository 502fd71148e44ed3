"""The TRL internals that SAGETrainer relies on. If a TRL upgrade changes one, this fails loudly and names it."""

import inspect

import trl
from trl import GRPOConfig, GRPOTrainer

PINNED_TRL = "1.16.0"


def test_trl_version_is_the_pinned_one():
    assert trl.__version__ == PINNED_TRL, (
        f"sagerl's adapter was written and tested against TRL {PINNED_TRL}, found {trl.__version__}: "
        "rerun this module's checks and the adapter tests before changing the pin"
    )


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_overridden_hooks_keep_their_signatures():
    assert _params(GRPOTrainer._calculate_rewards) == [
        "self",
        "inputs",
        "prompts",
        "completions",
        "completion_ids_list",
    ]
    assert _params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    assert _params(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    assert _params(GRPOTrainer._get_per_token_logps_and_entropies)[:7] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
    ]
    assert "compute_aux_loss" in _params(GRPOTrainer._get_per_token_logps_and_entropies)
    assert _params(GRPOTrainer._save_checkpoint) == ["self", "model", "trial"]
    assert _params(GRPOTrainer._load_optimizer_and_scheduler) == ["self", "checkpoint"]
    # the outcome counts' checkpoint folder, as TRL's own entropy-controller state finds it
    assert "trial" in _params(GRPOTrainer._get_output_dir)
    assert "self._get_output_dir(trial=trial)" in inspect.getsource(GRPOTrainer._save_checkpoint)


def test_rollout_calls_the_hooks_the_adapter_intercepts():
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    # rewards are computed (and gathered across processes) by _calculate_rewards, once per rollout, on the
    # rollout's rows and its completions' texts (which the adapter keeps for the estimators that read them)
    assert source.count("self._calculate_rewards(") == 1
    assert "self._calculate_rewards(inputs, prompts, completions, completion_ids_list)" in source
    # the reference log-probs come from a call on self.ref_model (where the adapter keeps the entropies)
    assert "self._get_per_token_logps_and_entropies(\n                        self.ref_model," in source
    # the keys the adapter reads or replaces in the rollout output
    for key in (
        '"completion_mask"',
        '"advantages"',
        '"num_items_in_batch"',
        '"ref_per_token_logps"',
        '"old_per_token_logps"',
        '"completion_ids"',
        '"tool_mask"',
        '"importance_sampling_ratio"',
    ):
        assert key in source, key
    # reward weights and names, and the process slicing the adapter mirrors
    init = inspect.getsource(GRPOTrainer.__init__)
    for attribute in (
        "self.reward_weights",
        "self.reward_func_names",
        "self.num_generations_eval",
        "self.scale_rewards",
        "self.epsilon_low",
        "self.epsilon_high",
        "self.beta",
        "self.ref_model",
        "self.temperature",
        "self.max_completion_length",
        "self.use_vllm",
        "self.aux_loss_enabled",
        "self.loss_type",
    ):
        assert attribute in init, attribute
    assert "self.accelerator.process_index * len(prompts)" in source


def test_fused_head_and_loss_normalisation_are_as_assumed():
    source = inspect.getsource(GRPOTrainer._get_per_token_logps_and_entropies)
    assert "fused_lm_head=True" in source and "outputs.entropy" in source
    loss_source = inspect.getsource(GRPOTrainer._compute_loss)
    # TRL's DAPO normaliser, which SAGETrainer reproduces for token-mean
    assert 'inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes' in loss_source
    assert "self.current_gradient_accumulation_steps / self.args.steps_per_generation" in loss_source
    from trl.trainer.utils import add_fused_lm_head

    assert "outputs" in _params(add_fused_lm_head)


def test_grpo_config_fields_used_by_sage_config_exist():
    fields = GRPOConfig.__dataclass_fields__
    for name in (
        "beta",
        "epsilon",
        "epsilon_high",
        "delta",
        "num_generations",
        "loss_type",
        "scale_rewards",
        "use_bias_correction_kl",
        "importance_sampling_level",
        "top_entropy_quantile",
        "off_policy_mask_threshold",
        "entropy_coef",
        "use_adaptive_entropy",
        "multi_objective_aggregation",
        "entropy_coef_delta",
        "entropy_coef_min",
        "entropy_coef_max",
        "entropy_target",
        "sapo_temperature_pos",
        "sapo_temperature_neg",
        "vespo_k_pos",
        "vespo_lambda_pos",
        "vespo_k_neg",
        "vespo_lambda_neg",
        "reward_weights",
        "max_completion_length",
        "cast_lm_head_to_fp32",
        "steps_per_generation",
    ):
        assert name in fields, name


def test_trl_helpers_used_for_the_entropy_and_off_policy_options_exist():
    """SAGETrainer reuses TRL's top-entropy and off-policy masks and its entropy-controller state."""
    import inspect

    from trl import GRPOTrainer

    assert list(inspect.signature(GRPOTrainer.get_high_entropy_mask).parameters) == [
        "self",
        "entropies",
        "mask",
        "threshold",
    ]
    assert list(inspect.signature(GRPOTrainer.get_off_policy_mask).parameters) == [
        "advantages",
        "per_token_logps",
        "sampling_per_token_logps",
        "mask",
        "off_policy_threshold",
    ]
    init = inspect.getsource(GRPOTrainer.__init__)
    for name in ("_entropy_bonus_enabled", "_last_world_entropy", "_entropy_window_stats", "entropy_coef"):
        assert f"self.{name} =" in init, name


def test_what_the_shared_generation_prefix_reads_of_trls_rollout():
    """``share_generation_prefix`` replaces the transformers branch of ``_generate_single_turn`` and reads the
    trainer state that branch reads: its signature, return value and the attributes below."""
    import inspect

    from trl import GRPOTrainer

    assert _params(GRPOTrainer._generate_single_turn)[:5] == [
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
    ]
    source = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "return completion_ids, logprobs" in source
    for use in (
        "self.use_transformers_continuous_batching",
        "pad_to_multiple_of=self.pad_to_multiple_of",
        "generation_kwargs=self.generation_kwargs",
        "self._dist.summon_full_params(self.model_wrapped, recurse=False)",
        "generation_config=self.generation_config",
        "self.eos_token_ids",
    ):
        assert use in source, use
