"""TRL's vLLM rollouts (``use_vllm=True``) under :class:`~sagerl.train.SAGETrainer`: checks and the CPU weight sync.

Generation stays TRL's (``trl.generation.vllm_generation.VLLMGeneration``); this module adds two things.

- :func:`check_vllm_training` (before TRL builds anything): vLLM must be installed (else one line naming
  ``make setup-vllm``); on vLLM's CPU engine the KV cache gets a fixed size (``VLLM_CPU_KVCACHE_SPACE``,
  :data:`~sagerl.eval.vllm_backend.DEFAULT_CPU_KV_CACHE_GIB` GiB when unset; ``vllm_gpu_memory_utilization``
  is then unused) and memory and cores are checked (:func:`sagerl.eval.vllm_backend.check_cpu_resources`).
- :func:`cpu_engine_settings`: the colocated CPU engine runs in the policy checkpoint's dtype (vLLM would
  downcast float32 to bfloat16 there), and eagerly (``enforce_eager=True``, as the evaluation backend's engine:
  vLLM's start-up ``torch.compile`` took the 3-step test run from 71 s to 165 s on 2 cores).
- :func:`install_cpu_weight_sync` (colocate mode on the CPU engine): TRL pushes the trained weights into vLLM
  with ``model.load_weights`` on the live vLLM model. On CPU that fails ("'Parameter' object has no attribute
  'weight_loader'"): after loading, vLLM's CPU linear layers repack their weights for oneDNN and drop the
  original parameters. The replacement goes through vLLM's layerwise reload (``model_runner.reload_weights``,
  which restores each layer, loads and repacks it), then re-ties the output embeddings to the input
  embeddings (the reload re-creates the embedding parameter, and the LM head kept the old one and its packed
  copy), then resets the prefix cache, as TRL does.

Tested here (tests/integrations/vllm/test_train_vllm.py, CPU, fp32 with ``bf16=False``; TRL's default bf16 autocast makes
the trainer differ from the float32 engine by bfloat16 rounding): the embedded SmolLM2 trains for several steps in
colocate mode, and at each rollout the log-probs vLLM reports for a fixed completion equal the trainer's
policy (the policy after the previous optimizer step) within the tolerance given there; with TRL's
``vllm_importance_sampling_correction`` (on by default) the SAGE loss equals TRL's loss on the same batch
(plain GRPO) and weights only the surrogate term, as TRL does. GPU only, not run here: the CUDA engine, sleep
mode, tensor parallelism, ``vllm_mode="server"`` (TRL 1.16 syncs weights to ``trl vllm-serve`` through vLLM's
NCCL weight-transfer engine and raises NotImplementedError on a non-CUDA device; sagerl refuses it at once
without CUDA; see docs/vllm.md).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

from sagerl.errors import ConfigError
from sagerl.eval.vllm_backend import DEFAULT_CPU_KV_CACHE_GIB, check_cpu_resources, vllm_installed


def check_vllm_training(args: Any) -> None:
    """Refuse ``use_vllm`` settings that cannot work here, with one line each; set the CPU KV cache size.

    Args:
        args: the trainer's ``GRPOConfig`` / ``SAGEConfig``.

    Raises:
        ConfigError: vLLM is not installed (naming ``make setup-vllm``); server mode without CUDA; CPU memory
            or cores.
    """
    if not getattr(args, "use_vllm", False):
        return
    if not vllm_installed():
        raise ConfigError(
            "use_vllm=True needs vLLM in this environment: run `make setup-vllm` and train with "
            ".venv-vllm/bin/sagerl (CPU), or `pip install 'sagerl[vllm]'` on a GPU machine"
        )
    import torch

    if args.vllm_mode == "server" and not torch.cuda.is_available():
        raise ConfigError(
            "vllm_mode='server' needs a CUDA device: TRL sends the trained weights to `trl vllm-serve` through "
            "vLLM's NCCL weight-transfer engine; without a GPU use vllm_mode='colocate'"
        )
    if args.vllm_mode != "colocate":
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(DEFAULT_CPU_KV_CACHE_GIB))
    try:
        check_cpu_resources(int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * 2**30, None)
    except ValueError:
        raise ConfigError(
            f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']!r} must be a whole number of GiB"
        ) from None


@contextmanager
def cpu_engine_settings(args: Any):
    """While TRL builds its colocated vLLM engine on the CPU, give it the policy checkpoint's dtype and eager mode.

    TRL calls ``vllm.LLM(model=...)`` without a dtype, and vLLM's ``"auto"`` downcasts a float32 checkpoint
    to bfloat16 on CPU (``_resolve_auto_dtype`` in vllm/config/model.py), while the trainer computes in
    float32: the sampler and the policy then differ by bfloat16 rounding (0.2 nats on the tiny test model).
    Inside this context TRL's ``LLM`` gets ``dtype`` = ``model_init_kwargs["dtype"]`` when set, else the
    checkpoint's own, and ``enforce_eager=True`` (TRL passes none; vLLM's CPU engine would compile the model
    first, minutes on 2 cores). A caller's explicit dtype or ``enforce_eager`` is kept; nothing changes on a GPU
    engine or in server mode.
    """
    if not (getattr(args, "use_vllm", False) and args.vllm_mode == "colocate" and vllm_installed()):
        yield
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        yield
        return
    import trl.generation.vllm_generation as trl_vllm

    real = trl_vllm.LLM
    wanted = (args.model_init_kwargs or {}).get("dtype")

    def llm(*pos, **kwargs):
        if "dtype" not in kwargs:
            dtype = wanted if wanted not in (None, "auto") else _checkpoint_dtype(kwargs.get("model"))
            kwargs["dtype"] = str(dtype).removeprefix("torch.")
        kwargs.setdefault("enforce_eager", True)
        return real(*pos, **kwargs)

    trl_vllm.LLM = llm
    try:
        yield
    finally:
        trl_vllm.LLM = real


def _checkpoint_dtype(path: str | None) -> str:
    from transformers import AutoConfig

    dtype = getattr(AutoConfig.from_pretrained(path), "dtype", None) if path else None
    return str(dtype or "float32")


def install_cpu_weight_sync(trainer: Any) -> bool:
    """Replace TRL's colocate weight sync by :class:`CPUWeightSync` when vLLM runs on its CPU engine.

    Returns:
        whether it was installed (False: no vLLM, server mode, or a GPU engine, where TRL's sync stays).
    """
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None or generation.mode != "colocate":
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    generation.sync_weights = CPUWeightSync(generation)
    return True


class CPUWeightSync:
    """Push the training model's weights into a colocated vLLM CPU engine (module docstring).

    Args:
        generation: TRL's ``VLLMGeneration`` (its ``llm`` and ``_iter_named_params``: names as vLLM expects,
            PEFT adapters merged, FSDP/DeepSpeed gathered).
    """

    def __init__(self, generation: Any) -> None:
        self.generation = generation

    def __call__(self) -> None:
        import torch

        generation = self.generation
        runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
        # Copies: under PEFT the merged values live only while TRL's iterator is open.
        with torch.no_grad():
            weights = [(name, param.detach().clone()) for name, param in generation._iter_named_params()]
        runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        model = runner.get_model()
        head, inner = getattr(model, "lm_head", None), getattr(model, "model", None)
        embed = getattr(inner, "embed_tokens", None)
        tied = getattr(runner.model_config.hf_config, "tie_word_embeddings", False)
        if tied and head is not None and embed is not None:
            # the LM head computes with its own packed copy (cpu_linear), packed from the old weights
            head.weight = embed.weight
            head.quant_method.process_weights_after_loading(head)
        generation.llm.reset_prefix_cache()
