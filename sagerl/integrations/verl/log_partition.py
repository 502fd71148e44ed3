"""FlowRL's log Z(x) in verl: its head trained inside verl's actor, fed by the training forward's own hidden states.

FlowRL (:mod:`sagerl.objective.flowrl`) learns log Z(x) with a small head (:class:`~sagerl.objective.flowrl.
LogPartitionHead`, the authors' ``ProjZModule``) on the mean of the prompt's last hidden states, trained with the
policy. In verl the actor is one module with its FSDP wrapper, its optimizer and its checkpoints, and its engine
returns log-probs, not hidden states. So, for an actor whose policy term is ``flowrl``, :func:`install` (called by
:class:`~sagerl.integrations.verl.worker.SAGETrainingWorker` when it gets its loss, in ``init_model``):

- has the engine build its model again, with the head as the submodule ``flowrl_log_z`` (the TRL adapter's name)
  added before FSDP wraps it and before the optimizer is made: FSDP shards it and starts every rank from rank 0's
  values, the optimizer and its learning-rate schedule hold it, verl's checkpoints save and resume it. verl builds
  the actor before it hands it its loss, so the first build (without the head) is dropped: one more model load at
  start-up, for FlowRL only;
- puts a forward pre-hook on the LM head: its input is the last hidden states (after the final norm), and during a
  training forward (inside FSDP's forward, where the head's parameters are gathered) the hook computes log Z of
  each sequence's prompt, with gradient, from the prompt's positions that the engine's ``forward_step`` records
  for the micro-batch (:func:`prompt_hidden`: verl's packed layout or its padded one);
- keeps it in :data:`LOG_Z`, from which SAGE's loss takes it (:func:`~sagerl.integrations.verl.loss.sage_ppo_loss`);
- leaves the head out of the weights verl sends to its rollout engine (vLLM and SGLang know the policy's only).

The head's dropout (the authors' 0.1) is active in training forwards, as in the authors' code and the TRL adapter.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial, wraps

import torch
from verl.utils import tensordict_utils as tu

from sagerl.errors import ConfigError
from sagerl.objective.flowrl import LogPartitionHead

HEAD = "flowrl_log_z"
"""The head's attribute on the policy (as :class:`sagerl.train.SAGETrainer` names it)."""


@dataclass(frozen=True)
class PromptLayout:
    """Where each sequence's prompt lies in a micro-batch's model input.

    Attributes:
        prompt_lens: (B,) prompt tokens of each sequence (the first tokens of the sequence).
        seq_lens: (B,) prompt + response tokens of each sequence.
        packed: True for verl's packed layout (one row of all sequences, ``use_remove_padding``), False for its
            padded one (a row per sequence, right-padded).
    """

    prompt_lens: torch.Tensor
    seq_lens: torch.Tensor
    packed: bool

    @classmethod
    def of(cls, micro_batch) -> PromptLayout:
        """The layout of one of verl's micro-batches (a TensorDict with nested ``input_ids``, ``prompts`` nested or
        left-padded with ``attention_mask``), as verl's ``no_padding_2_padding`` reads it."""
        input_ids, prompts = micro_batch["input_ids"], micro_batch["prompts"]
        if prompts.is_nested:
            prompt_lens = prompts.offsets().diff()
        else:
            prompt_lens = micro_batch["attention_mask"][:, : prompts.shape[1]].sum(dim=1)
        return cls(
            prompt_lens=prompt_lens.long().cpu(),
            seq_lens=input_ids.offsets().diff().long().cpu(),
            packed=bool(tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True)),
        )


def prompt_hidden(hidden: torch.Tensor, layout: PromptLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's prompt hidden states, (B, P, H), and their mask (B, P), from the LM head's input.

    Args:
        hidden: (1, N, H) in the packed layout (N ≥ the sequences' total length: verl may pad the end) or (B, S, H)
            in the padded one.
        layout: the micro-batch's :class:`PromptLayout`.

    Raises:
        ConfigError: ``hidden`` does not hold the layout's sequences (a sequence-parallel split, or a model whose
            LM head does not see every position).
    """
    b = layout.seq_lens.numel()
    if layout.packed:
        starts = (layout.seq_lens.cumsum(0) - layout.seq_lens).tolist()
        fits = hidden.dim() == 3 and hidden.shape[0] == 1 and hidden.shape[1] >= int(layout.seq_lens.sum())
        rows = [hidden[0, s : s + p] for s, p in zip(starts, layout.prompt_lens.tolist(), strict=True)]
    else:
        fits = hidden.dim() == 3 and hidden.shape[0] == b and hidden.shape[1] >= int(layout.seq_lens.max())
        rows = [hidden[i, :p] for i, p in enumerate(layout.prompt_lens.tolist())]
    if not fits:
        raise ConfigError(
            f"FlowRL: the LM head's input {tuple(hidden.shape)} does not hold the micro-batch's {b} sequences of "
            f"{layout.seq_lens.tolist()} tokens ({'packed' if layout.packed else 'padded'}): log Z needs every "
            "prompt position (no sequence parallelism)"
        )
    padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    mask = torch.arange(padded.shape[1], device=hidden.device) < layout.prompt_lens.to(hidden.device)[:, None]
    return padded, mask


class LogZStore:
    """This process's log Z of the micro-batch in the actor's training forward.

    Attributes:
        layout: the micro-batch's :class:`PromptLayout` while its forward step runs, else None.
    """

    def __init__(self) -> None:
        self.layout: PromptLayout | None = None
        self._log_z: torch.Tensor | None = None

    def put(self, log_z: torch.Tensor) -> None:
        self._log_z = log_z

    def clear(self) -> None:
        self.layout, self._log_z = None, None

    def take(self, batch_size: int) -> torch.Tensor:
        """The (B,) log Z (float32, with gradient) of the current training forward, once.

        Raises:
            ConfigError: no log Z was computed in this forward (the head is not installed, or the hook did not run),
                or it is for another number of sequences.
        """
        log_z, self._log_z = self._log_z, None
        if log_z is None:
            raise ConfigError(
                "FlowRL: the actor's training forward computed no log Z (is SAGETrainingWorker the actor's worker, "
                "and the forward a training one?)"
            )
        if log_z.shape != (batch_size,):
            raise ConfigError(
                f"FlowRL: log Z {tuple(log_z.shape)} for a micro-batch of {batch_size} sequences"
            )
        return log_z


LOG_Z = LogZStore()
"""The store SAGE's loss reads (filled by the LM head's pre-hook of this process's FlowRL actor)."""


def _log_z_hook(model: torch.nn.Module, lm_head: torch.nn.Module, args: tuple) -> None:
    """The LM head's forward pre-hook: log Z of each prompt of the micro-batch, in a forward with gradient.

    The head is looked up on the model at each call (FSDP1 may have wrapped it in a unit of its own) and called on
    the hidden states as they come: it was built in the model's dtype, and verl runs the forward under autocast
    whenever FSDP's parameter dtype is not float32 (FSDP1 without ``use_orig_params`` leaves no parameters on the
    module to read a dtype from during the forward)."""
    layout = LOG_Z.layout
    if layout is None or not torch.is_grad_enabled():
        return
    hidden, mask = prompt_hidden(args[0], layout)
    LOG_Z.put(getattr(model, HEAD)(hidden, mask).float())


def hf_model(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside verl's FSDP module (FSDP1 wraps it; FSDP2 shards it in place)."""
    return getattr(module, "_fsdp_wrapped_module", module)


def with_head(build):
    """verl's ``_build_module`` that adds the log Z head (and its hook on the LM head) to the model it builds."""

    @wraps(build)
    def build_with_head():
        module = build()
        dtype = next(module.parameters()).dtype
        head = LogPartitionHead(module.config.get_text_config().hidden_size).to(dtype=dtype)
        module.add_module(HEAD, head)
        module.get_output_embeddings().register_forward_pre_hook(partial(_log_z_hook, module))
        return module

    return build_with_head


def _recording_layout(forward_step):
    """verl's ``forward_step`` that records its micro-batch's :class:`PromptLayout` for the hook while it runs."""

    @wraps(forward_step)
    def recording(micro_batch, loss_function, forward_only):
        LOG_Z.layout = PromptLayout.of(micro_batch)
        try:
            return forward_step(micro_batch, loss_function, forward_only)
        finally:
            LOG_Z.clear()

    return recording


def _without_head(get_params):
    """One of verl's weight exports (``(name, ...)`` items and a PEFT config) with the head's weights left out."""

    @wraps(get_params)
    def export(*args, **kwargs):
        params, extra = get_params(*args, **kwargs)
        return (item for item in params if f"{HEAD}." not in item[0]), extra

    return export


def install(worker) -> None:
    """Give a SAGE actor (verl's ``TrainingWorker`` on its FSDP engine) FlowRL's log Z head (module docstring):
    its engine builds the model with the head from now on, and builds it again now if it was built already;
    idempotent.

    Raises:
        ConfigError: an engine other than verl's FSDP one (Megatron, VeOmni), a LoRA actor (PEFT freezes every
            weight but the adapters', the head's too), or Ulysses sequence parallelism.
    """
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    engine = worker.engine
    if getattr(engine, "_sage_log_z", False):
        return
    if not isinstance(engine, FSDPEngine):
        raise ConfigError(
            f"policy_term=flowrl needs verl's FSDP engine (actor strategy fsdp or fsdp2), got {type(engine).__name__}"
        )
    if getattr(engine, "_is_lora", False):
        raise ConfigError(
            "policy_term=flowrl with a LoRA actor: PEFT would freeze FlowRL's log Z head; train the full model"
        )
    if getattr(engine, "use_ulysses_sp", False):
        raise ConfigError(
            "policy_term=flowrl with Ulysses sequence parallelism: it splits a prompt's hidden states over ranks; "
            "set actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=1"
        )
    engine._build_module = with_head(engine._build_module)
    engine.forward_step = _recording_layout(engine.forward_step)
    for name in ("get_per_tensor_param", "get_per_tensor_param_shard"):
        setattr(engine, name, _without_head(getattr(engine, name)))
    engine._sage_log_z = True
    if getattr(engine, "module", None) is not None:  # built without the head: build again
        engine.module = engine.optimizer = engine.lr_scheduler = engine.checkpoint_manager = None
        gc.collect()
        engine.initialize()
