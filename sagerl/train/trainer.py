"""``SAGETrainer``: TRL's ``GRPOTrainer`` with its loss and advantages taken from :mod:`sagerl.objective`.

Everything TRL does stays TRL's: generation (transformers or vLLM), reward functions, the reference model
(or the PEFT adapter switched off), accelerate / DeepSpeed / FSDP, logging and checkpoints. The adapter
replaces four hooks and nothing else:

- ``_calculate_rewards``: keeps the gathered rewards, so the advantages can be recomputed.
- ``_generate_and_score_completions``: after TRL's rollout, sets the advantages from
  :func:`sagerl.objective.compute_advantages` (GRPO, Dr.GRPO or BNPO) on the rewards of every process,
  DAPO's dynamic-sampling keep-mask, the global token and sequence counts that normalise the loss, and,
  when the guide reads the reference policy, the reference entropies.
- ``_get_per_token_logps_and_entropies``: only to keep the reference entropies of the reference forward
  pass that TRL already runs (no extra forward pass), and for APO the reference's top-K tokens of that same pass.
- ``_compute_loss``: the policy forward pass (TRL's fused LM head gives log-probs *and* entropies at once),
  the guide q, then :func:`sagerl.objective.sage_loss`.

Under N processes (DDP, DeepSpeed) the loss and gradient of an optimizer step equal those of one process
on the same global batch, guide noise included (tests/train/multiprocess).

The estimators that read the completions (DARLING's partitions, outcome-based exploration's final answers;
:data:`sagerl.objective.ADVANTAGE_INPUTS`) get them from the texts TRL scores, gathered over the processes; the
outcome counts N(x, a) are trainer state, saved in each checkpoint (``sage_outcome_counts.json``) and restored
on resume. ``passk_k`` follows ``passk_k_schedule`` over the optimizer steps, reaching ``passk_k_end`` at the last
rollout (:func:`last_rollout_step`); the guide's strength follows ``guide_schedule``, reaching its end at the last
optimizer step. DAPO's dynamic sampling drops the groups of equal accuracy, or, for the estimators whose advantages
live on such groups too (:data:`sagerl.objective.SIGNAL_ON_EQUAL_REWARDS`: DARLING, the outcome bonuses), the
groups whose advantages are all zero.

TRL internals this relies on are checked by tests/train/test_trl_contract.py, which fails loudly if a TRL
upgrade changes them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from sagerl.atomic_files import atomic_write_text
from sagerl.errors import ConfigError
from sagerl.eval.samplers import sample_seed
from sagerl.objective import (
    ADVANTAGE_INPUTS,
    SIGNAL_ON_EQUAL_REWARDS,
    GuideParams,
    OutcomeCounts,
    compute_advantages,
    compute_guide,
    dynamic_sampling_mask,
    integer_at,
    lexical_partition,
    make_schedule,
    overlong_penalty,
    partition_from_keys,
    sage_loss,
    shaped_kl,
    ucb_bonus,
    zero_advantage_mask,
)
from sagerl.objective.apo import safe_manifold_logp
from sagerl.objective.flowrl import LogPartitionHead
from sagerl.objective.multi_reward import normalize_then_sum_advantages
from sagerl.tasks.planted import NO_STRATEGY, read_strategy
from sagerl.tasks.verify import final_answer
from sagerl.train.config import PASSK_ESTIMATORS, TEXT_INPUTS, SAGEConfig
from sagerl.train.refill import choose_groups, groups_with_spread, merge_rollouts
from sagerl.train.rewards import completion_text
from sagerl.train.vllm_rollouts import check_vllm_training, cpu_engine_settings, install_cpu_weight_sync

OUTCOME_COUNTS_FILE = "sage_outcome_counts.json"
"""The outcome counts N(x, a) of a checkpoint (outcome-based exploration's UCB estimators)."""


def last_rollout_step(
    max_steps: int, steps_per_generation: int, gradient_accumulation_steps: int, num_iterations: int = 1
) -> int:
    """The optimizer step (``global_step``, from 0) at which TRL makes the last rollout of a ``max_steps`` run: the
    step at which a schedule read at rollout time (the k of pass@k) must reach its end value.

    TRL counts micro-batches: it rolls out at micro-batch m (from 0) when m is a multiple of
    ``steps_per_generation × num_iterations``, and micro-batch m belongs to optimizer step
    m // ``gradient_accumulation_steps``; the run has ``max_steps × gradient_accumulation_steps`` micro-batches.
    With one micro-batch per step, the rollouts are at steps 0, s, 2s, ... (s = ``steps_per_generation``) and the
    last one at s·⌊(max_steps − 1)/s⌋.
    """
    micro_batches = max_steps * gradient_accumulation_steps
    every = steps_per_generation * num_iterations
    return (max(micro_batches - 1, 0) // every) * every // gradient_accumulation_steps


def _draws_noise(guide: str, params: GuideParams) -> bool:
    """Whether ``guide`` draws random numbers (the random guide; the token guide with σ > 0)."""
    return guide == "random" or (guide == "token" and params.sigma > 0)


def prompt_key(row: dict) -> str:
    """The prompt x of a training row, as outcome counts key it: its ``problem`` text when it has one, else its
    ``prompt`` (a conversational prompt as canonical JSON)."""
    if row.get("problem") is not None:
        return str(row["problem"])
    prompt = row.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def as_sage_config(args: GRPOConfig | None, model_name: str = "model") -> SAGEConfig:
    """Return ``args`` as a :class:`SAGEConfig` (a plain ``GRPOConfig`` keeps its values, SAGE fields default)."""
    if args is None:
        return SAGEConfig(output_dir=f"{model_name}-SAGE")
    if isinstance(args, SAGEConfig):
        return args
    values = {f.name: getattr(args, f.name) for f in fields(GRPOConfig) if f.init}
    values["generation_batch_size"] = None  # derived by GRPOConfig.__post_init__ from steps_per_generation
    return SAGEConfig(**values)


def _default_final_answer(text: str, row: dict) -> str | None:
    return final_answer(text, row)


def repeat_cache_rows(cache, rows: torch.Tensor) -> None:
    """Give ``cache`` (a transformers ``DynamicCache`` filled for P prompts) one row per rollout: row r becomes
    prompt ``rows[r]``'s keys and values ((P, KV, L, D) -> (R, KV, L, D) per layer), in place.

    With ``Tensor.index_select``, whose backward (``index_add_``) sums the R rows' gradients into their prompt in
    row order. The cache's own ``batch_select_indices`` indexes with a tensor, whose backward (``index_put_`` with
    ``accumulate=True``) adds them in parallel on a CPU, in an order that depends on the threads: the same step
    then gave other weights from run to run (2 threads, the AVX2-only EPYC, 2026-12-08: 0.1-0.2% of the
    elements after one AdamW step of ``make demo``, and another table after 24 steps). Layers of a kind that
    keeps more than keys and values select their rows by their own method.
    """
    from transformers.cache_utils import DynamicLayer

    for layer in cache.layers:
        if type(layer).batch_select_indices is not DynamicLayer.batch_select_indices:
            layer.batch_select_indices(rows)
        elif layer.get_seq_length() > 0:
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)


def _distinct_per_group(ids: torch.Tensor, group_size: int) -> float:
    """Mean number of distinct clusters per group (each -1 counts as one of its own)."""
    groups = ids.view(-1, group_size).tolist()
    counts = [len({v for v in g if v >= 0}) + sum(v < 0 for v in g) for g in groups]
    return sum(counts) / max(len(counts), 1)


class OverlongReward:
    """DAPO's overlong reward shaping as a TRL reward function (reads the completion token counts)."""

    __name__ = "overlong"

    def __init__(self, max_length: int, buffer_length: int, penalty_factor: float) -> None:
        self.max_length, self.buffer_length, self.penalty_factor = max_length, buffer_length, penalty_factor

    def __call__(self, completions, completion_ids, **kwargs) -> list[float]:
        lengths = torch.tensor([len(ids) for ids in completion_ids])
        return overlong_penalty(lengths, self.max_length, self.buffer_length, self.penalty_factor).tolist()


class SAGETrainer(GRPOTrainer):
    """GRPO-family trainer whose objective is SAGE's (see :mod:`sagerl.objective`).

    Takes exactly the arguments of ``trl.GRPOTrainer``. ``args`` may be a :class:`SAGEConfig` or a plain
    ``GRPOConfig`` (then: plain GRPO as TRL computes it, no guide). One keyword of its own:

    - ``final_answer``: ``(completion text, training row) -> str | None``, the final answer of a completion in
      its normal form, for the estimators that compare answers (``darling`` with ``partition='answer'``,
      ``ucb_mean``, ``ucb_con``, ``outcome_batch``); default :func:`sagerl.tasks.verify.final_answer`, the reading
      of sagerl's graders.

    Raises:
        ConfigError: a TRL option the adapter does not support, or an inconsistent SAGE option;
            ``partition='strategy'`` (the planted task's oracle) on a training set that is not the planted task.
    """

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOConfig | None = None,
        *pos,
        final_answer: Callable[[str, dict], str | None] | None = None,
        **kwargs,
    ):
        model_name = (
            model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "")
        )
        args = as_sage_config(args, str(model_name).rstrip("/").split("/")[-1] or "model")
        if args.resolved_overlong_buffer_len > 0:
            if args.resolved_advantage_estimator == "bnpo":
                raise ConfigError(
                    "advantage_estimator='bnpo' needs rewards in [0, 1]; overlong shaping is negative"
                )
            funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
            funcs.append(
                OverlongReward(
                    args.max_completion_length,
                    args.resolved_overlong_buffer_len,
                    args.overlong_penalty_factor,
                )
            )
            reward_funcs = funcs
            if args.reward_weights is not None:
                args.reward_weights = [*args.reward_weights, 1.0]
        check_vllm_training(args)
        with cpu_engine_settings(args):
            super().__init__(model, reward_funcs, args, *pos, **kwargs)
        install_cpu_weight_sync(self)  # vLLM's CPU engine only (sagerl.train.vllm_rollouts)
        if (
            args.resolved_policy_loss == "flowrl"
        ):  # FlowRL's log Z(x), trained with the policy (its submodule)
            policy = self.accelerator.unwrap_model(self.model)
            head = LogPartitionHead(policy.config.get_text_config().hidden_size)
            policy.flowrl_log_z = head.to(device=policy.device, dtype=policy.dtype)

        self._wants_ref_topk = args.resolved_policy_loss == "apo"
        if self._wants_ref_topk:
            self._check_apo_reference(args)
        self._wants_ref_entropy = args.guide != "none" and args.guide_entropy_source == "reference"
        if self._wants_ref_entropy:
            from transformers import PreTrainedModel

            if not isinstance(self.ref_model, PreTrainedModel):
                raise ConfigError(
                    "guide_entropy_source='reference' needs a separate, unwrapped reference model "
                    "(not PEFT, DeepSpeed or FSDP); use guide_entropy_source='policy'"
                )
            add_fused_lm_head(
                self.ref_model,
                temperature=self.temperature,
                cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
                outputs=("log_probs", "entropy"),
            )
        self.teacher_model = self._load_teacher(args) if args.guide == "teacher" else None
        self._guide_params = args.guide_params
        self._guide_schedule = None
        self._gathered_rewards_per_func: torch.Tensor | None = None
        self._ref_entropies: torch.Tensor | None = None
        self._ref_topk: tuple[torch.Tensor, torch.Tensor] | None = None
        self._scored_completions: list[str] | None = None
        self._k_schedule = None
        self._final_answer = final_answer or _default_final_answer
        inputs = ADVANTAGE_INPUTS[args.resolved_advantage_estimator]
        self._outcome_counts = OutcomeCounts() if "counts" in inputs else None
        if "clusters" in inputs and args.partition == "strategy":
            self._check_planted_dataset(self.train_dataset)
        if args.eval_passk_every:  # the policy's pass@k during training (eval_passk_*)
            from sagerl.train.passk_callback import PassAtKCallback

            PassAtKCallback.from_config(args).attach(self)

    @staticmethod
    def _check_planted_dataset(dataset) -> None:
        """``partition='strategy'`` reads the planted task's strategy labels: refuse any other training set.

        Raises:
            ConfigError: a dataset without a ``kind`` column, or with rows of another kind than ``planted``.
        """
        kinds = set(dataset["kind"]) if dataset is not None and "kind" in dataset.column_names else set()
        if kinds != {"planted"}:
            raise ConfigError(
                "partition='strategy' partitions completions by the planted task's strategy label (an oracle): it "
                f"needs a planted training set (rows of kind 'planted'; got kinds {sorted(kinds) or 'none'}); use "
                "partition='answer' or 'lexical'"
            )

    def _check_apo_reference(self, args: SAGEConfig) -> None:
        """APO's Safe Manifold comes from a separate reference model's forward pass (TRL's, with ``beta > 0``), whose
        vocabulary holds at least ``apo_top_k`` tokens.

        Raises:
            ConfigError: no separate reference model (a PEFT adapter's disabled base), or K above its vocabulary.
        """
        from transformers import PreTrainedModel

        if not isinstance(self.ref_model, PreTrainedModel):
            raise ConfigError(
                "policy_loss='apo' reads the reference's top-K tokens from a separate, unwrapped reference model (not "
                "PEFT, DeepSpeed or FSDP)"
            )
        vocab = self.ref_model.config.get_text_config().vocab_size
        if args.apo_top_k > vocab:
            raise ConfigError(f"apo_top_k={args.apo_top_k} must be at most the vocabulary size {vocab}")

    def _load_teacher(self, args: SAGEConfig):
        """The teacher guide's model: loaded once, frozen, on the policy's device and dtype.

        Raises:
            ConfigError: it does not load, or its vocabulary differs from the policy's.
        """
        from transformers import AutoModelForCausalLM

        from sagerl.models import resolve_model

        policy = self.accelerator.unwrap_model(self.model)
        try:
            teacher = AutoModelForCausalLM.from_pretrained(
                resolve_model(args.teacher_model), dtype=policy.dtype
            )
        except Exception as exc:
            raise ConfigError(f"teacher_model {args.teacher_model!r} does not load: {exc}") from exc
        if teacher.config.vocab_size != policy.config.vocab_size:
            raise ConfigError(
                f"teacher_model {args.teacher_model!r} has a vocabulary of {teacher.config.vocab_size} tokens, "
                f"the policy {policy.config.vocab_size}: the teacher guide compares log-probs of the same tokens"
            )
        teacher.requires_grad_(False)
        add_fused_lm_head(
            teacher, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32
        )
        return teacher.to(self.accelerator.device).eval()

    def _teacher_logps(self, output: dict, mode: str) -> torch.Tensor:
        """(B, T) log π_teacher of the sampled completion tokens: the teacher guide's extra forward pass."""
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        batch_size = (
            self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        )
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.teacher_model,
                input_ids,
                attention_mask,
                output["completion_ids"].size(1),
                batch_size=batch_size,
            )
        return logps

    # ------------------------------------------------------------------ rollout
    def _generate_single_turn(self, *args, **kwargs):
        """TRL's rollout; with ``bf16`` on a CPU and transformers' ``generate``, under bfloat16 autocast (TRL
        samples with the float32 master weights there; on a GPU it leaves the weights in the training
        dtype, and vLLM has its own). The sampling probabilities are float32 (autocast runs softmax in
        float32)."""
        if self.args.bf16 and not self.use_vllm and self.accelerator.device.type == "cpu":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self._generate_rollouts(*args, **kwargs)
        return self._generate_rollouts(*args, **kwargs)

    def _generate_rollouts(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        """TRL's rollout; with ``rollout_decoder='static'`` :meth:`_generate_static`; with
        ``share_generation_prefix``, :meth:`_generate_with_shared_prefix`."""
        if self._static_decoder_applies(images, multimodal_fields):
            return self._generate_static(prompt_ids)
        if self._shares_generation_prefix(prompt_ids, images, multimodal_fields):
            return self._generate_with_shared_prefix(prompt_ids)
        return super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
        )

    def _static_decoder_applies(self, images, multimodal_fields) -> bool:
        """Whether ``rollout_decoder='static'`` can sample this rollout; says once why not when it cannot."""
        if self.args.rollout_decoder != "static":
            return False
        from sagerl.eval.static_decoder import unsupported_reason

        reason = None
        if self.use_vllm:
            reason = "the rollouts come from vLLM"
        elif getattr(self, "use_transformers_continuous_batching", False):
            reason = "continuous batching is on"
        elif images or multimodal_fields:
            reason = "the prompts are not text only"
        else:
            reason = unsupported_reason(self.accelerator.unwrap_model(self.model), self.generation_kwargs)
        if reason is not None and not getattr(self, "_static_decoder_warned", False):
            self._static_decoder_warned = True
            warnings.warn(
                f"rollout_decoder='static' does not apply ({reason}): transformers' generate samples the rollouts",
                stacklevel=2,
            )
        return reason is None

    def _generate_static(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], None]:
        """Rollouts by :class:`sagerl.eval.static_decoder.StaticDecoder` from the current policy's weights (a
        snapshot per rollout), in bfloat16 where the rollout runs under bfloat16 autocast (``bf16`` on a CPU),
        else in the model's dtype. Returns TRL's ``(completion_ids, None)``, as :meth:`_generate_with_shared_prefix`."""
        from trl.models import unwrap_model_for_generation

        from sagerl.eval.static_decoder import StaticDecoder

        kw = self.generation_kwargs
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=kw,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            dtype = next(model.parameters()).dtype
            if torch.is_autocast_enabled("cpu"):
                dtype = torch.get_autocast_dtype("cpu")
            decoder = StaticDecoder(model, dtype=dtype, rows=len(prompt_ids))
            eos = kw["eos_token_id"]
            completions = decoder.generate(
                prompt_ids,
                max_new_tokens=kw["max_new_tokens"],
                eos_token_ids=[eos] if isinstance(eos, int) else list(eos),
                pad_token_id=kw["pad_token_id"],
                temperature=kw.get("temperature") or 1.0,
                top_k=kw.get("top_k"),
                top_p=kw.get("top_p"),
            )
        return completions, None

    def _shares_generation_prefix(self, prompt_ids, images, multimodal_fields) -> bool:
        """Whether this rollout can prefill each distinct prompt once: ``share_generation_prefix``, transformers'
        ``generate`` (not vLLM, not continuous batching) with its default dynamic cache, text only, and at least
        two rows with the same prompt."""
        return bool(
            self.args.share_generation_prefix
            and not self.use_vllm
            and not getattr(self, "use_transformers_continuous_batching", False)
            and self.args.cache_implementation is None
            and not images
            and not multimodal_fields
            and len({tuple(ids) for ids in prompt_ids}) < len(prompt_ids)
        )

    def _generate_with_shared_prefix(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], None]:
        """Rollouts with transformers' ``generate``, each distinct prompt prefilled once for all its rows.

        The rows are left-padded as TRL pads them; the distinct rows' tokens but the last run through the model
        once, their key/value cache is repeated for every row of the same prompt (by index), and ``generate``
        continues from that cache over the whole batch: it feeds the last prompt token of each row and samples
        as it would have from scratch (the same logits processors, the same random draws in the same order),
        so the completions are TRL's up to float rounding of the logits (tests/train/test_shared_prefix.py).
        A group of G rollouts of a P-token prompt prefills P - 1 + G token positions instead of G·P.

        Returns TRL's ``(completion_ids, logprobs)``: per row the completion's token ids up to and including the
        first end-of-sequence token, and None (transformers reports no sampling log-probs).
        """
        from trl.models import unwrap_model_for_generation
        from trl.trainer.utils import pad

        from sagerl.eval.samplers import cache_argument, output_cache

        device = self.accelerator.device
        rows = [torch.tensor(ids) for ids in prompt_ids]
        ids = pad(
            rows,
            padding_value=self._tokenizer.pad_token_id,
            padding_side="left",
            pad_to_multiple_of=self.pad_to_multiple_of,
        ).to(device)
        mask = pad(
            [torch.ones_like(r) for r in rows],
            padding_value=0,
            padding_side="left",
            pad_to_multiple_of=self.pad_to_multiple_of,
        ).to(device)
        slot: dict[tuple[int, ...], int] = {}
        row_slot = torch.tensor([slot.setdefault(tuple(r), len(slot)) for r in prompt_ids], device=device)
        first = torch.tensor([row_slot.tolist().index(i) for i in range(len(slot))], device=device)
        prefix, prefix_mask = ids[first, :-1], mask[first, :-1]
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            key = cache_argument(model)
            # no position ids: the model counts positions from 0 over the padded row, as transformers' generate
            # does in every step after this prefill (the cache and the steps must agree on them)
            inputs = dict(input_ids=prefix, attention_mask=prefix_mask, use_cache=True)
            try:  # the cache is what is needed: logits at the last position only
                out = model(**inputs, logits_to_keep=1)
            except TypeError:  # a forward without logits_to_keep
                out = model(**inputs)
            cache = output_cache(out)
            cache.batch_select_indices(row_slot)
            sequences = model.generate(
                input_ids=ids, attention_mask=mask, generation_config=self.generation_config, **{key: cache}
            )
        completions = sequences[:, ids.size(1) :].cpu()
        eos = torch.tensor(self.eos_token_ids)
        out_ids = []
        for row in completions:
            hits = torch.isin(row, eos).nonzero()
            end = int(hits[0]) + 1 if len(hits) else row.size(0)
            out_ids.append(row[:end].tolist())
        return out_ids, None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards_per_func = rewards_per_func
        self._scored_completions = [completion_text(c) for c in completions]
        return rewards_per_func

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        **kwargs,
    ):
        wants_ref_entropy = self._wants_ref_entropy and model is self.ref_model
        compute = compute_entropy or wants_ref_entropy
        if self._wants_ref_topk and model is self.ref_model:  # APO: the Safe Manifold, from this same pass
            shared = self._reference_topk_forward(
                model, input_ids, attention_mask, logits_to_keep, batch_size, kwargs
            )
        else:
            shared = self._shared_prefix_logps(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute, kwargs
            )
        if shared is not None:
            logps, entropies, aux = shared
        else:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy=compute,
                **kwargs,
            )
        if wants_ref_entropy:
            self._ref_entropies = entropies
        return logps, (entropies if compute_entropy else None), aux

    def _shared_prefix_logps(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, kwargs
    ):
        """TRL's log-probs (and entropies) of the completion tokens, with each prompt's forward pass run once for
        all the rollouts of its group instead of once per rollout (``share_prompt_prefix``); None where that
        does not apply (then TRL's own forward runs).

        The rows of a group (consecutive rows with the same prompt tokens and mask, as TRL lays out a prompt's
        ``num_generations`` rollouts) share their prompt: the prompt without its last token runs once per group,
        its key/value cache is repeated for the group's rows (an index, so the backward pass sums the rows'
        gradients into it), then the last prompt token and the completion run per row, at the positions the full
        sequence gives them. The log-probs are those of the full forward pass up to float rounding (a test
        checks them and the gradient against TRL's), the LM head runs over the completion positions only, and a
        group of G rollouts of a P-token prompt and T-token completions costs (P − 1) + G·(T + 1) token positions
        instead of G·(P + T).

        Applies to a single process's forward pass of a causal LM with neither gradient checkpointing nor
        multimodal inputs, when some rows share a prompt (:meth:`_shared_prefix_groups`); skipped otherwise.
        """
        new_group = self._shared_prefix_groups(model, input_ids, attention_mask, logits_to_keep, kwargs)
        if new_group is None:
            return None
        logps, entropies = [], []
        for out, _ in self._shared_prefix_chunks(
            model, input_ids, attention_mask, logits_to_keep, batch_size, new_group
        ):
            logps.append(out.log_probs[:, -logits_to_keep:])
            if compute_entropy:
                entropies.append(out.entropy[:, -logits_to_keep:])
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def _shared_prefix_groups(self, model, input_ids, attention_mask, logits_to_keep, kwargs):
        """Where the shared-prefix pass applies (``share_prompt_prefix``, one process, text only, no gradient
        checkpointing, a prompt of at least 2 tokens), whether each row starts a new group ((B,) bool: its prompt
        tokens or mask differ from the row above's); None where it does not apply or no two rows share a prompt."""
        if not self.args.share_prompt_prefix or self.accelerator.num_processes != 1:
            return None
        if any(value is not None for value in kwargs.values() if value is not False):
            return None  # images, token types, MoE aux loss: TRL's own path
        unwrapped = self.accelerator.unwrap_model(model)
        if getattr(unwrapped, "is_gradient_checkpointing", False) or input_ids.size(1) - logits_to_keep < 2:
            return None
        prompt_len = input_ids.size(1) - logits_to_keep
        prompts, prompt_mask = input_ids[:, :prompt_len], attention_mask[:, :prompt_len]
        new_group = torch.ones(input_ids.size(0), dtype=torch.bool, device=input_ids.device)
        new_group[1:] = (prompts[1:] != prompts[:-1]).any(1) | (prompt_mask[1:] != prompt_mask[:-1]).any(1)
        return None if bool(new_group.all()) else new_group

    def _shared_prefix_chunks(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size,
        new_group,
        vocabulary=False,
        prompt_hidden=False,
    ):
        """The shared-prefix forward pass (:meth:`_shared_prefix_logps`), in chunks of ``batch_size`` rows (all rows
        when None): yields, per chunk, the model's output over each row's last prompt token and its T =
        ``logits_to_keep`` completion tokens, and the prompt's last hidden states ((rows, P, H), when
        ``prompt_hidden``, which needs ``vocabulary``; else None).

        The output is TRL's fused LM head's (``log_probs``, ``entropy`` of the completion tokens) or, with
        ``vocabulary``, the plain forward's: ``logits`` (rows, T + 1, V), the first T of which predict the
        completion tokens, for the losses that read the whole next-token distribution (SimKO, APO, FlowRL)."""
        from transformers import DynamicCache

        from sagerl.eval.samplers import cache_argument

        unwrapped = self.accelerator.unwrap_model(model)
        cache_key = cache_argument(unwrapped)
        prompt_len = input_ids.size(1) - logits_to_keep
        prompts, prompt_mask = input_ids[:, :prompt_len], attention_mask[:, :prompt_len]
        rows = input_ids.size(0)
        batch_size = batch_size or rows
        for start in range(0, rows, batch_size):
            end = min(start + batch_size, rows)
            starts = new_group[start:end].clone()
            starts[0] = True
            group = starts.long().cumsum(0) - 1  # each row's group within the chunk
            first = starts.nonzero().squeeze(1) + start
            cache = DynamicCache(config=unwrapped.config)
            prefix = prompts[first, :-1]
            prefix_mask = prompt_mask[first, :-1]
            suffix = input_ids[start:end, prompt_len - 1 :]
            with self.accelerator.autocast():
                if vocabulary:  # the plain forward, its LM head over one position only
                    head = model(
                        input_ids=prefix,
                        attention_mask=prefix_mask,
                        logits_to_keep=1,
                        output_hidden_states=prompt_hidden,
                        **{cache_key: cache},
                    )
                else:
                    model(
                        input_ids=prefix,
                        attention_mask=prefix_mask,
                        labels=torch.full_like(prefix, -100),
                        fused_lm_head=True,
                        **{cache_key: cache},
                    )  # fills the cache (the LM head's outputs are not used)
                repeat_cache_rows(cache, group)
                if vocabulary:
                    out = model(
                        input_ids=suffix,
                        attention_mask=attention_mask[start:end],
                        output_hidden_states=prompt_hidden,
                        **{cache_key: cache},
                    )
                else:
                    labels = suffix.masked_fill(attention_mask[start:end, prompt_len - 1 :] == 0, -100)
                    out = model(
                        input_ids=suffix,
                        attention_mask=attention_mask[start:end],
                        labels=labels,
                        fused_lm_head=True,
                        **{cache_key: cache},
                    )
            hidden = None
            if prompt_hidden:  # the prefix's, one per row of its group, then the last prompt token's
                hidden = torch.cat(
                    [head.hidden_states[-1].index_select(0, group), out.hidden_states[-1][:, :1]], dim=1
                )
            yield out, hidden

    def _completion_logits(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, prompt_hidden=False
    ):
        """The plain forward pass's logits at the T = ``logits_to_keep`` positions that predict the completion tokens,
        for the losses that read the whole next-token distribution (SimKO, APO, FlowRL), in chunks of ``batch_size``
        rows (all rows when None). Yields per chunk (its first row, logits (rows, T, V) in the autocast dtype,
        before the temperature, and the prompt's last hidden states (rows, P, H) when ``prompt_hidden``, else None).

        Each prompt runs once for its group where the shared-prefix pass applies (:meth:`_shared_prefix_groups`: the
        same logits up to float rounding, (P − 1) + G·(T + 1) token positions for a group instead of G·(P + T)); each row
        whole otherwise."""
        new_group = self._shared_prefix_groups(model, input_ids, attention_mask, logits_to_keep, {})
        prompt_len = input_ids.size(1) - logits_to_keep
        if new_group is not None:
            start = 0
            for out, hidden in self._shared_prefix_chunks(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                new_group,
                vocabulary=True,
                prompt_hidden=prompt_hidden,
            ):
                yield start, out.logits[:, :-1], hidden
                start += out.logits.size(0)
            return
        rows = input_ids.size(0)
        batch_size = batch_size or rows
        for start in range(0, rows, batch_size):
            end = min(start + batch_size, rows)
            with self.accelerator.autocast():
                out = model(
                    input_ids=input_ids[start:end],
                    attention_mask=attention_mask[start:end],
                    logits_to_keep=logits_to_keep + 1,
                    output_hidden_states=prompt_hidden,
                )
            hidden = out.hidden_states[-1][:, :prompt_len] if prompt_hidden else None
            yield start, out.logits[:, :-1][:, -logits_to_keep:], hidden

    def _reference_topk_forward(self, model, input_ids, attention_mask, logits_to_keep, batch_size, kwargs):
        """The reference forward pass TRL runs (``beta > 0``), for APO: the same pass as a plain forward over the
        vocabulary (TRL's fused LM head returns no top-K; :meth:`_completion_logits`, each prompt once per group
        where ``share_prompt_prefix`` applies), in chunks of ``batch_size`` rows, under no gradient. Returns
        TRL's (log-probs (B, T), entropies (B, T), None) of the T = ``logits_to_keep`` completion tokens at the sampling
        temperature, float32, nats, and keeps in ``_ref_topk`` the reference's ``apo_top_k`` most likely token ids at
        each position (B, T, K) and their probabilities (B, T, K): APO's Safe Manifold.

        Raises:
            ConfigError: multimodal inputs or an MoE auxiliary loss (TRL's own pass handles those).
        """
        if any(value is not None for value in kwargs.values() if value is not False):
            raise ConfigError("policy_loss='apo' supports text-only models without an MoE auxiliary loss")
        logps, entropies, ids, probs = [], [], [], []
        completion = input_ids[:, -logits_to_keep:]
        with torch.no_grad():
            for start, logits, _ in self._completion_logits(
                model, input_ids, attention_mask, logits_to_keep, batch_size
            ):
                logprobs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
                rows = completion[start : start + logits.size(0)]
                logps.append(logprobs.gather(-1, rows.unsqueeze(-1)).squeeze(-1))
                entropies.append(-(logprobs.exp() * logprobs).sum(dim=-1))
                top = logprobs.topk(self.args.apo_top_k, dim=-1)
                ids.append(top.indices)
                probs.append(top.values.exp())
        self._ref_topk = (torch.cat(ids), torch.cat(probs))
        return torch.cat(logps), torch.cat(entropies), None

    def _rollout(self, inputs) -> dict:
        """One round of TRL's rollout, with this process's rewards per function (``sage_rewards_per_func``,
        (B, F)), when the guide reads the reference, the reference entropies (``ref_entropies``), and for APO the
        reference's top-K token ids and probabilities (``ref_topk_ids``, ``ref_topk_probs``, (B, T, K))."""
        self._ref_entropies = None
        self._ref_topk = None
        output = super()._generate_and_score_completions(inputs)
        local = output["completion_ids"].shape[0]
        start = self.accelerator.process_index * local
        output["sage_rewards_per_func"] = self._gathered_rewards_per_func[start : start + local]
        if self._wants_ref_entropy and self._ref_entropies is not None:
            output["ref_entropies"] = self._ref_entropies
        if self._wants_ref_topk:
            if self._ref_topk is None:
                raise ConfigError(
                    "policy_loss='apo' found no reference forward pass in this rollout (TRL runs it only with beta > 0)"
                )
            output["ref_topk_ids"], output["ref_topk_probs"] = self._ref_topk
        output["sage_texts"] = (self._scored_completions, list(inputs))  # this process's rows, popped below
        return output

    def _refill(self, inputs, output: dict, group_size: int) -> tuple[dict, int]:
        """DAPO's refill (:mod:`sagerl.train.refill`): more rounds of prompts until every process has one rollout
        batch of groups whose rewards differ, or ``max_num_gen_batches`` rounds. Returns (merged output, rounds).

        Raises:
            ConfigError: a process's rollout batch is not a whole number of groups.
        """
        local = output["completion_ids"].shape[0]
        if local % group_size:
            raise ConfigError(
                f"max_num_gen_batches refills whole groups: each process's rollout batch "
                f"(per_device_train_batch_size x steps_per_generation = {local}) must be a multiple of "
                f"num_generations={group_size}"
            )
        needed = local // group_size
        outputs, flags = [], []
        limit = self.args.max_num_gen_batches
        while True:
            signal = self._filter_signal(output["sage_rewards_per_func"])
            outputs.append(output)
            flags.append(groups_with_spread(signal, group_size))
            have = torch.tensor(float(sum(sum(f) for f in flags)), device=signal.device)
            short = self.accelerator.reduce(torch.clamp(needed - have, min=0.0), reduction="sum").item()
            if short == 0 or (limit and len(outputs) >= limit):
                break
            output = self._rollout(self._refill_prompts(inputs, len(outputs), needed, group_size))
        chosen, _ = choose_groups(flags, needed)
        try:
            merged = merge_rollouts(outputs, chosen, group_size, self._tokenizer.pad_token_id)
        except ValueError as exc:
            raise ConfigError(f"max_num_gen_batches: {exc}") from exc
        return merged, len(outputs)

    def _weighted_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """(B,) the weighted sum of the (B, F) rewards per function, NaN ignored; NaN where every function
        is NaN (an unscorable completion: advantage 0)."""
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = float("nan")
        return rewards

    def _filter_signal(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """(B,) what DAPO's filter (and the unlikeliness reward's) reads to tell a group with spread: the accuracy,
        as verl's DAPO recipes (``algorithm.filter_groups.metric=acc``, the reward before the overlong penalty)
        and the unlikeliness reward's authors (the number of correct samples) do.

        That is the reward function named ``correctness`` (sagerl's :class:`~sagerl.train.rewards.CorrectnessReward`)
        when there is one; otherwise the weighted total of the reward functions other than DAPO's overlong
        shaping, which sagerl adds itself. NaN where nothing scored the completion.
        """
        names = self.reward_func_names
        if "correctness" in names:
            return rewards_per_func[:, names.index("correctness")]
        if names and names[-1] == "overlong" and self.args.resolved_overlong_buffer_len > 0:  # OverlongReward
            weights = self.reward_weights.to(rewards_per_func.device).clone()
            weights[-1] = 0.0
            task = rewards_per_func[:, :-1]
            signal = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
            signal[torch.isnan(task).all(dim=1)] = float("nan")
            return signal
        return self._weighted_rewards(rewards_per_func)

    def _refill_prompts(self, inputs, round_index: int, groups: int, group_size: int) -> list[dict]:
        """The rows of ``groups`` prompts of the training set, each repeated ``group_size`` times, drawn by a
        generator seeded with (seed, optimizer step, round, process): resumable and the same on every run."""
        seed = sample_seed(
            self.args.seed, "refill", self.state.global_step, round_index, self.accelerator.process_index
        )
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(self.train_dataset), generator=generator)
        picks = [order[i % len(order)].item() for i in range(groups)]
        return [self.train_dataset[i] for i in picks for _ in range(group_size)]

    def _sequence_logps(self, output: dict, mode: str) -> torch.Tensor:
        """(B,) mean log π_old per completion token of this process's rows, nats: TRL's π_old log-probs when it
        computed them (off-policy steps, vLLM), else one no-grad forward pass of the policy (on-policy, π_old is
        the policy). The unlikeliness reward ranks completions by it."""
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        logps = output.get("old_per_token_logps")
        if logps is None:
            input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            batch_size = (
                self.args.per_device_train_batch_size
                if mode == "train"
                else self.args.per_device_eval_batch_size
            )
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    input_ids,
                    attention_mask,
                    output["completion_ids"].size(1),
                    batch_size=batch_size,
                )
        return (logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)

    def _generate_and_score_completions(self, inputs):
        output = self._rollout(inputs)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        rounds = 1
        if mode == "train" and self.args.dynamic_sampling and self.args.max_num_gen_batches != 1:
            output, rounds = self._refill(inputs, output, group_size)

        rewards_per_func = self.accelerator.gather(output.pop("sage_rewards_per_func"))
        texts, rows = output.pop("sage_texts", (None, None))
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = self._weighted_rewards(rewards_per_func)

        estimator = self.args.resolved_advantage_estimator
        params = dict(self.args.advantage_params, scale=self.scale_rewards)
        needs = ADVANTAGE_INPUTS[estimator]
        if estimator in PASSK_ESTIMATORS:
            params["k"] = self._passk_k()
            if mode == "train" and self.args.passk_k_schedule != "constant":
                self._metrics[mode]["passk_k"].append(float(params["k"]))
        if "sequence_logp" in needs:
            params["sequence_logp"] = self.accelerator.gather(self._sequence_logps(output, mode))
        if set(needs) & set(TEXT_INPUTS):
            params.update(self._text_inputs(output, texts, rows, group_size, mode, needs, rewards.device))
        try:
            advantages = compute_advantages(estimator, rewards, group_size, **params)
        except ValueError as exc:
            raise ConfigError(f"advantage_estimator={estimator!r}: {exc}") from exc
        if self.args.multi_objective_aggregation == "normalize_then_sum":
            advantages = normalize_then_sum_advantages(rewards_per_func, weights, group_size)
        if self.args.dynamic_sampling and estimator in SIGNAL_ON_EQUAL_REWARDS:
            # DARLING's and the outcome bonuses' signal lives on groups of equal accuracy too: drop the groups
            # that carry none (all advantages zero), not the groups of equal accuracy
            group_keep = zero_advantage_mask(advantages, group_size)
        elif self.args.dynamic_sampling:
            group_keep = dynamic_sampling_mask(self._filter_signal(rewards_per_func), group_size)
        else:
            group_keep = torch.ones_like(rewards, dtype=torch.bool)
        keep = group_keep
        if self.args.signed_samples_only:  # PSR: the correct completions only; NSR: the wrong ones
            keep = keep & (rewards == (1.0 if estimator == "psr" else 0.0))

        local = output["completion_ids"].shape[0]
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local]
        local_keep = keep[start : start + local]
        output["sage_keep"] = local_keep.to(output["completion_mask"].dtype)
        # Loss tokens and sequences with loss tokens in the generation batch of every process: the
        # normalisers of the loss (see _loss_normalization). Each row's index in that global batch keys
        # its guide noise (see _guide).
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1) * output["sage_keep"].unsqueeze(1)
        counts = torch.stack([loss_mask.sum(), (loss_mask.sum(dim=1) > 0).sum()])
        output["num_items_in_batch"], output["sage_num_seqs"] = (
            self.accelerator.gather(counts).view(-1, 2).sum(dim=0)
        )
        output["sage_rows"] = torch.arange(start, start + local, device=loss_mask.device)
        if self.args.resolved_policy_loss == "simko":  # SimKO raises the top-K of the correct completions
            output["sage_correct"] = (self._filter_signal(rewards_per_func) == 1.0)[start : start + local]
        if self.teacher_model is not None:
            output["teacher_logps"] = self._teacher_logps(output, mode)

        metrics = self._metrics[mode]
        metrics["filtered_groups_share"].append(
            1.0 - group_keep.view(-1, group_size)[:, 0].float().mean().item()
        )
        if mode == "train" and self.args.dynamic_sampling:
            metrics["dynamic_sampling/rounds"].append(float(rounds))
        if "correctness" in self.reward_func_names:
            correct = rewards_per_func[:, self.reward_func_names.index("correctness")]
            metrics["pass_rate"].append(torch.nanmean((correct >= 1.0).float()).item())
        return output

    def _passk_k(self) -> int:
        """The k of pass@k at this optimizer step: ``passk_k``, or ``passk_k_schedule`` from ``passk_k`` at step 0 to
        ``passk_k_end`` at the last rollout (:func:`last_rollout_step`), rounded to an integer
        (:func:`sagerl.objective.integer_at`). A run with one rollout trains with ``passk_k``."""
        args = self.args
        if args.passk_k_schedule == "constant":
            return args.passk_k
        if self._k_schedule is None:
            last = last_rollout_step(
                self.state.max_steps,
                args.steps_per_generation,
                args.gradient_accumulation_steps,
                self.num_iterations,
            )
            self._k_schedule = make_schedule(
                args.passk_k_schedule,
                args.passk_k,
                total_steps=max(last, 1),
                lower=args.passk_k_end,
                switch=args.passk_k_switch,
            )
        return integer_at(self._k_schedule, self.state.global_step)

    def _text_inputs(self, output, texts, rows, group_size: int, mode: str, needs, device) -> dict:
        """The estimator's inputs read off the completions, over every process's rows: ``clusters`` (DARLING's
        partition of each group by ``partition``), ``answers`` (final-answer cluster ids) and ``counts``
        (N(x, a) after this batch, counted in training only).

        Raises:
            ConfigError: the rollout kept no texts (a refill merged several rounds).
        """
        if texts is None or rows is None or len(texts) != output["completion_ids"].shape[0]:
            raise ConfigError(
                f"advantage_estimator={self.args.resolved_advantage_estimator!r} reads the completions' text, which "
                "this rollout did not keep (DAPO's refill merges several rounds): set max_num_gen_batches=1"
            )
        partition = self.args.partition if "clusters" in needs else None
        want_answers = partition == "answer" or "answers" in needs
        local = []
        for text, row, ids, mask in zip(
            texts, rows, output["completion_ids"], output["completion_mask"], strict=True
        ):
            record = {"prompt": prompt_key(row)}
            if want_answers:
                record["answer"] = self._final_answer(text, row)
            if partition == "lexical":
                record["tokens"] = ids[mask.bool()].tolist()
            if partition == "strategy":
                label = read_strategy(text)
                record["strategy"] = None if label == NO_STRATEGY else label
            local.append(record)
        records = local
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            records = gather_object(local)
        out = {}
        metrics = self._metrics[mode]
        if partition is not None:
            if partition == "lexical":
                clusters = lexical_partition(
                    [r["tokens"] for r in records],
                    group_size,
                    n=self.args.partition_ngram,
                    threshold=self.args.partition_threshold,
                )
            else:
                clusters = partition_from_keys([r[partition] for r in records], group_size)
            out["clusters"] = clusters.to(device)
            metrics["partition/clusters_per_group"].append(_distinct_per_group(clusters, group_size))
        if "answers" in needs:
            answers = [r["answer"] for r in records]
            out["answers"] = partition_from_keys(answers, group_size).to(device)
            metrics["outcome/answers_per_group"].append(_distinct_per_group(out["answers"].cpu(), group_size))
            if "counts" in needs:
                prompts = [r["prompt"] for r in records]
                if mode == "train":
                    counts = self._outcome_counts.update(prompts, answers)
                else:
                    keys = [None if a is None else (p, a) for p, a in zip(prompts, answers, strict=True)]
                    counts = self._outcome_counts.lookup(keys)
                out["counts"] = counts.to(device)
                metrics["outcome/bonus"].append(ucb_bonus(counts).mean().item())
        return out

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        """TRL's checkpoint, and first the outcome counts (``sage_outcome_counts.json``): written before the
        Trainer's ``trainer_state.json``, so a checkpoint that sagerl finds complete has them."""
        if self._outcome_counts is not None and self.args.should_save:
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_text(
                folder / OUTCOME_COUNTS_FILE, json.dumps(self._outcome_counts.state_dict()) + "\n"
            )
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """TRL's resume, and the outcome counts of ``checkpoint`` (the hook TRL restores its own state in).

        Raises:
            ConfigError: the checkpoint has no counts file (it was not written by an outcome-counting run).
        """
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._outcome_counts is not None and checkpoint is not None:
            path = Path(checkpoint) / OUTCOME_COUNTS_FILE
            if not path.is_file():
                raise ConfigError(
                    f"{checkpoint} has no {OUTCOME_COUNTS_FILE}: advantage_estimator="
                    f"{self.args.resolved_advantage_estimator!r} resumes its outcome counts from the checkpoint"
                )
            self._outcome_counts.load_state_dict(json.loads(path.read_text(encoding="utf-8")))

    # ------------------------------------------------------------------ loss
    def _guide_strength(self) -> float:
        """Multiplier of the guide strength at this optimizer step (1 for the constant schedule): from 1 at step 0
        to ``guide_schedule_min`` at the last optimizer step, ``max_steps − 1`` (the guide is read at every step)."""
        if self._guide_schedule is None:
            self._guide_schedule = make_schedule(
                self.args.guide_schedule,
                1.0,
                total_steps=max(self.state.max_steps - 1, 1),
                lower=self.args.guide_schedule_min,
                num_restarts=self.args.guide_schedule_restarts,
            )
        return self._guide_schedule(self.state.global_step)

    def _scheduled_guide_params(self) -> GuideParams:
        """The guide parameters with their strengths (γ, α, σ) scaled by the schedule at this step."""
        s = self._guide_strength()
        p = self._guide_params
        if s == 1.0:
            return p
        return replace(
            p, gamma=p.gamma * s, alpha=p.alpha * s, sigma=p.sigma * s, random_sigma=p.random_sigma * s
        )

    def _loss_normalization(
        self, inputs, mode: str, mask: torch.Tensor
    ) -> tuple[torch.Tensor | None, float | torch.Tensor]:
        """(num_tokens for token-mean, divisor of the aggregated loss) for a (B, T) loss ``mask``.

        The loss of an optimizer step does not depend on how its rows are split into processes and
        micro-batches (DDP averages the gradients of the processes, accumulation sums the micro-batches):

        - token-mean (DAPO) divides by the loss tokens of the optimizer step, of every process, as TRL's
          ``dapo`` loss type;
        - the sequence-level modes average over the sequences that have loss tokens: a micro-batch's mean
          over its own n such sequences is scaled by n / (the optimizer step's sequences per process and
          micro-batch), so rows that dynamic sampling dropped (or empty completions) do not weigh up the
          other rows of their micro-batch or process. Without such rows this divisor is the number of
          accumulation steps, as in TRL.

        TRL's ``bnpo`` loss type (no ``loss_agg_mode``) stays what TRL means by it: a token mean per
        micro-batch.
        """
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.args.loss_agg_mode is None and self.loss_type == "bnpo":
            return None, accumulation
        # the share of the generation batch's counts that falls to one micro-batch of one process
        share = accumulation / self.accelerator.num_processes
        if mode == "train":
            share = share / self.args.steps_per_generation
        if self.args.resolved_loss_agg_mode == "token-mean":
            return inputs["num_items_in_batch"].clamp(min=1.0) * share, 1.0
        local_seqs = (mask.sum(dim=1) > 0).sum().clamp(min=1)
        return None, inputs["sage_num_seqs"].clamp(min=1) * share / local_seqs

    def _guide(self, mask: torch.Tensor, rows: torch.Tensor, **tensors) -> torch.Tensor | None:
        """The guide q, (B, T) and detached, of a micro-batch (:func:`sagerl.objective.compute_guide`).

        Args:
            mask: (B, T) loss mask. rows: (B,) each row's index in the global generation batch.
            tensors: the (B, T) inputs of ``compute_guide`` (entropy, logp, ...), or None.

        A guide that draws random numbers (random; token with σ > 0) draws them row by row, each row from a
        generator seeded by (seed, optimizer step, its global row index), at the fixed width
        ``max_completion_length``. A row's noise is then its own: independent of the other rows (the
        processes do not repeat each other's noise), of the number of processes, of the micro-batch it
        lands in and of its padding; N processes compute the q of 1 process on the same global batch, and
        a resumed run draws what an uninterrupted run would.
        """
        name, params = self.args.guide, self._scheduled_guide_params()
        if not _draws_noise(name, params):
            return compute_guide(name, mask, params, **tensors)
        length = mask.shape[1]
        width = max(length, self.max_completion_length or 0)

        def row(x: torch.Tensor | None, i: int) -> torch.Tensor | None:
            return None if x is None else torch.nn.functional.pad(x[i : i + 1], (0, width - length))

        q = []
        for i, index in enumerate(rows.tolist()):
            seed = sample_seed(self.args.seed, "guide", self.state.global_step, index)
            generator = torch.Generator(device=mask.device).manual_seed(seed)
            given = {key: row(value, i) for key, value in tensors.items()}
            q.append(compute_guide(name, row(mask, i), params, generator=generator, **given)[:, :length])
        return torch.cat(q)

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        if "sage_keep" in inputs:
            mask = mask * inputs["sage_keep"].unsqueeze(1)

        forward = {
            "simko": self._simko_forward,
            "flowrl": self._flowrl_forward,
            "apo": self._apo_forward,
        }.get(self.args.resolved_policy_loss)
        if self.args.resolved_policy_loss == "apo":  # the reference's top-K ids, read by _apo_forward
            self._apo_ref_topk_ids = inputs["ref_topk_ids"]
        logps, entropies, aux_loss = (forward or self._get_per_token_logps_and_entropies)(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            pixel_attention_mask=inputs.get("pixel_attention_mask"),
            spatial_shapes=inputs.get("spatial_shapes"),
            num_tiles=inputs.get("num_tiles"),
            image_sizes=inputs.get("image_sizes"),
            token_type_ids=inputs.get("token_type_ids"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            image_position_ids=inputs.get("image_position_ids"),
        )
        ref_logps = inputs.get("ref_per_token_logps")
        from_reference = self.args.guide_entropy_source == "reference"
        q = self._guide(
            mask,
            inputs["sage_rows"],
            entropy=inputs.get("ref_entropies") if from_reference else entropies,
            logp=ref_logps if from_reference else logps,
            ref_logp=ref_logps,
            teacher_logp=inputs.get("teacher_logps"),
        )
        num_tokens, divisor = self._loss_normalization(inputs, mode, mask)
        importance = inputs.get("importance_sampling_ratio") if self.use_vllm else None
        policy_loss, policy_params = self.args.resolved_policy_loss, self.args.resolved_policy_loss_params
        if policy_loss == "vespo":  # VESPO folds the sampler correction into its sequence weight
            policy_params, importance = {**policy_params, "importance_sampling_ratio": importance}, None
        if policy_loss == "simko":  # its per-token inputs, from the forward pass above
            policy_params = {**policy_params, **self._simko_inputs, "correct": inputs["sage_correct"].bool()}
        if policy_loss == "flowrl":  # log Z(x) from the forward pass above, and TRL's reference log-probs
            policy_params = {**policy_params, "log_z": self._flowrl_log_z, "ref_logp": ref_logps}
        if policy_loss == "apo":  # the Safe Manifold's log-probs, from the forward pass above
            manifold = {name: self._apo_inputs[name] for name in ("manifold_logp", "old_manifold_logp")}
            policy_params = {**policy_params, **manifold}
            self._apo_inputs["ref_topk_mass"] = inputs["ref_topk_probs"].sum(dim=-1)
        entropy_mask = self._entropy_mask(entropies, mask)
        importance = self._surrogate_weights(inputs, logps, mask, importance, entropy_mask)
        out = sage_loss(
            logps,
            inputs.get("old_per_token_logps"),
            ref_logps,
            inputs["advantages"],
            mask,
            log_q=None if q is None else torch.log(q),
            beta=self.beta,
            divergence=self.args.divergence,
            kl_estimator=self.args.kl_estimator,
            kl_log_ratio_clip=self.args.kl_log_ratio_clip,
            kl_bias_correction=self.args.use_bias_correction_kl,
            kl_placement=self.args.kl_placement,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            delta=self.args.delta,
            loss_agg_mode=self.args.resolved_loss_agg_mode,
            num_tokens=num_tokens,
            max_len=self.max_completion_length,
            importance_weights=importance,
            policy_loss=policy_loss,
            policy_loss_params=policy_params,
            kl_bias_correction_level=self.importance_sampling_level,
            entropy=entropies,
            **self.args.loss_params,  # the loss options' settings (the entropy advantage's α, κ)
        )
        loss = out.loss / divisor
        if self._entropy_bonus_enabled:
            loss = self._add_entropy_bonus(loss, entropies, mask, entropy_mask, mode)
        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(
                self.accelerator.gather_for_metrics(aux_loss).mean().item()
            )
        self._log_loss_metrics(mode, mask, entropies, out, q, logps, ref_logps)
        return loss

    def _vocabulary_forward(
        self,
        loss_name,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        compute_aux_loss,
        extra,
        prompt_hidden=False,
    ):
        """One forward pass of the policy for a loss that reads the whole next-token distribution (SimKO, APO,
        FlowRL), each prompt once per group where ``share_prompt_prefix`` applies (:meth:`_completion_logits`):
        ``(the prompt's last hidden states (B, P, H) when prompt_hidden else None, log-probs (B, T, V), the sampled
        tokens' log-probs (B, T), entropies (B, T))`` over the T = ``logits_to_keep`` completion positions, at the
        sampling temperature, in float32 (nats).

        Raises:
            ConfigError: multimodal inputs or an MoE auxiliary loss (TRL's own pass handles those).
        """
        if compute_aux_loss or any(value is not None for value in extra.values()):
            raise ConfigError(
                f"policy_loss='{loss_name}' supports text-only models without an MoE auxiliary loss"
            )
        chunks = list(
            self._completion_logits(
                model, input_ids, attention_mask, logits_to_keep, prompt_hidden=prompt_hidden
            )
        )
        logits = torch.cat([c[1] for c in chunks]).float() / self.temperature
        hidden = torch.cat([c[2] for c in chunks]) if prompt_hidden else None
        logprobs = torch.log_softmax(logits, dim=-1)
        logps = logprobs.gather(-1, input_ids[:, -logits_to_keep:].unsqueeze(-1)).squeeze(-1)
        entropies = -(logprobs.exp() * logprobs).sum(dim=-1)
        return hidden, logprobs, logps, entropies

    def _simko_forward(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        compute_entropy=True,
        compute_aux_loss=False,
        **kwargs,
    ):
        """The policy's forward pass of the loss for SimKO: the sampled tokens' log-probs and the entropies, as TRL's
        pass gives them, and from the same logits the log-probs of the ``simko_top_k`` most likely tokens at each
        position (with gradient) and whether the sampled token is the most likely one (kept in ``_simko_inputs``).

        SimKO reads the distribution over the vocabulary, which TRL's fused LM head does not return, so this pass
        keeps the (B, T, V) logits of the completion positions (one forward pass, as TRL's; more memory). On-policy
        training only (``SAGEConfig`` refuses the others): π_old is this pass's policy, so π_old's top-K are these
        tokens and their old log-probs these values, detached.

        Raises:
            ConfigError: multimodal inputs or an MoE auxiliary loss (TRL's own pass handles those).
        """
        _, logprobs, logps, entropies = self._vocabulary_forward(
            "simko", model, input_ids, attention_mask, logits_to_keep, compute_aux_loss, kwargs
        )
        completion_ids = input_ids[:, -logits_to_keep:]
        top = logprobs.detach().topk(self.args.simko_top_k, dim=-1).indices
        topk_logp = logprobs.gather(-1, top)
        self._simko_inputs = {
            "topk_logp": topk_logp,
            "old_topk_logp": topk_logp.detach(),
            "entropy": entropies.detach(),
            "is_top1": completion_ids == top[..., 0],
        }
        return logps, entropies, None

    def _apo_forward(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        compute_entropy=True,
        compute_aux_loss=False,
        **kwargs,
    ):
        """The policy's forward pass of the loss for APO: the sampled tokens' log-probs and the entropies, and from the
        same logits the log-probs of the reference's top-K tokens at each position (the Safe Manifold, with gradient;
        kept in ``_apo_inputs``). On-policy training only (``SAGEConfig`` refuses the others): π_old is this pass's
        policy, so its log-probs of the manifold are these values, detached.

        Raises:
            ConfigError: multimodal inputs or an MoE auxiliary loss (TRL's own pass handles those).
        """
        _, logprobs, logps, entropies = self._vocabulary_forward(
            "apo", model, input_ids, attention_mask, logits_to_keep, compute_aux_loss, kwargs
        )
        manifold = safe_manifold_logp(logprobs, self._apo_ref_topk_ids)
        self._apo_inputs = {"manifold_logp": manifold, "old_manifold_logp": manifold.detach()}
        return logps, entropies, None

    def _flowrl_forward(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        compute_entropy=True,
        compute_aux_loss=False,
        **kwargs,
    ):
        """The policy's forward pass of the loss for FlowRL: the sampled tokens' log-probs and the entropies, and from
        the same pass log Z(x) of each row's prompt (``flowrl_log_z`` of the mean of the prompt's last hidden states,
        with gradient; kept in ``_flowrl_log_z``). TRL's fused LM head returns no hidden states, so this pass is a
        plain forward (one, as TRL's; each prompt once per group where ``share_prompt_prefix`` applies).

        Raises:
            ConfigError: multimodal inputs or an MoE auxiliary loss (TRL's own pass handles those).
        """
        hidden, _, logps, entropies = self._vocabulary_forward(
            "flowrl",
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_aux_loss,
            kwargs,
            prompt_hidden=True,
        )
        prompt_len = input_ids.size(1) - logits_to_keep
        head = self.accelerator.unwrap_model(model).flowrl_log_z
        self._flowrl_log_z = head(
            hidden.to(next(head.parameters()).dtype), attention_mask[:, :prompt_len]
        ).float()
        return logps, entropies, None

    # ------------------------------------------------------------------ TRL's surrogate options
    def _entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """TRL's top-entropy token mask ((B, T) bool, the top ``top_entropy_quantile`` of the tokens of every
        process by entropy; Wang et al. 2025, "Beyond the 80/20 Rule"), or None when it is off."""
        if self.top_entropy_quantile >= 1.0:
            return None
        return self.get_high_entropy_mask(entropies.detach(), mask, 1 - self.top_entropy_quantile)

    def _surrogate_weights(self, inputs, logps, mask, importance, entropy_mask) -> torch.Tensor | None:
        """The detached weights of the surrogate term only: the vLLM correction, TRL's off-policy sequence
        mask (DeepSeek-V3.2) and the top-entropy mask, multiplied. The anchor term is never masked."""
        weights = importance
        if self.off_policy_mask_threshold is not None:
            old = inputs.get("old_per_token_logps")
            old = logps.detach() if old is None else old
            advantages = inputs["advantages"]
            keep = self.get_off_policy_mask(
                advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
                per_token_logps=logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old),
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )
            weights = keep if weights is None else weights * keep
        if entropy_mask is not None:
            em = entropy_mask.to(logps.dtype)
            weights = em if weights is None else weights * em
        return weights

    def _add_entropy_bonus(self, loss, entropies, mask, entropy_mask, mode: str) -> torch.Tensor:
        """``loss − c·H̄``: TRL's entropy bonus (``entropy_coef``), H̄ the mean entropy (nats) of the loss tokens
        of this micro-batch (the top-entropy ones when that mask is on), scaled for gradient accumulation only.

        With ``use_adaptive_entropy`` (Skywork-OR1, He et al. 2025, arXiv 2505.22312) c applies while the
        entropy of the last optimizer step is at most ``entropy_target``, and moves by ``entropy_coef_delta``
        once per optimizer step (up when the step's token-mean entropy over every process is below the
        target, down otherwise) within [entropy_coef_min, entropy_coef_max]: TRL's controller and its state
        (``self.entropy_coef``, checkpointed by TRL).
        """
        effective = mask if entropy_mask is None else mask * entropy_mask.to(mask.dtype)
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        tokens = effective.sum()
        mean_entropy = (entropies * effective).sum() / tokens.clamp(min=1.0)
        coef = self.entropy_coef
        if self.use_adaptive_entropy and self._last_world_entropy > self.args.entropy_target:
            coef = 0.0
        policy_term = loss
        loss = loss - coef * mean_entropy / accumulation
        m = self._metrics[mode]
        m["policy_loss"].append(self.accelerator.gather(policy_term.detach() * accumulation).nanmean().item())
        if self.use_adaptive_entropy and mode == "train":
            stats = torch.stack([(entropies * effective).sum(), tokens]).detach().float()
            self._entropy_window_stats = (
                stats if self._entropy_window_stats is None else (self._entropy_window_stats + stats)
            )
            if self.accelerator.sync_gradients:
                total = self.accelerator.reduce(self._entropy_window_stats, reduction="sum")
                step_entropy = (total[0] / total[1].clamp(min=1.0)).item()
                step = (
                    self.args.entropy_coef_delta
                    if step_entropy <= self.args.entropy_target
                    else -(self.args.entropy_coef_delta)
                )
                self.entropy_coef = min(
                    max(self.entropy_coef + step, self.args.entropy_coef_min), self.args.entropy_coef_max
                )
                self._last_world_entropy = step_entropy
                self._entropy_window_stats = None
        if mode == "train" and self.accelerator.sync_gradients:
            m["entropy_coef"].append(self.entropy_coef)
        return loss

    def _log_loss_metrics(self, mode, mask, entropies, out, q, logps, ref_logps) -> None:
        """Log per-step diagnostics: ``kl`` is the anchor divergence in the loss (shaped when there is a
        guide), ``kl/reference`` the plain reverse KL(π‖π_ref) (k3), comparable across every preset."""
        mask = mask.bool()
        surrogate = out.surrogate

        def global_mean(x: torch.Tensor) -> float:
            local = torch.stack([torch.where(mask, x.float(), 0.0).sum(), mask.sum().float()])
            total = self.accelerator.reduce(local, reduction="sum")
            return (total[0] / total[1].clamp(min=1.0)).item()

        m = self._metrics[mode]
        if out.kl is not None:
            m["kl"].append(global_mean(out.kl))
        if ref_logps is not None:
            m["kl/reference"].append(global_mean(shaped_kl(logps.detach(), ref_logps, None, "k3")))
        m["entropy"].append(global_mean(entropies.detach()))
        m["clip_ratio/low_mean"].append(global_mean(surrogate.clipped_low.float()))
        m["clip_ratio/high_mean"].append(global_mean(surrogate.clipped_high.float()))
        m["clip_ratio/region_mean"].append(
            global_mean((surrogate.clipped_low | surrogate.clipped_high).float())
        )
        if surrogate.covariance_masked is not None:
            m["covariance/token_share"].append(global_mean(surrogate.covariance_masked.float()))
        if self.args.resolved_policy_loss == "apo":  # the Safe Manifold's mass: the policy's, the reference's
            mass = torch.logsumexp(self._apo_inputs["manifold_logp"].detach(), dim=-1).exp()
            m["apo/manifold_mass"].append(global_mean(mass))
            m["apo/ref_topk_mass"].append(global_mean(self._apo_inputs["ref_topk_mass"]))
        if q is not None:
            m["q/mean"].append(global_mean(q))
            m["q/frac_above_1"].append(global_mean((q > 1.0).float()))
            m["q/frac_below_1"].append(global_mean((q < 1.0).float()))
            m["guide/strength"].append(self._guide_strength())
