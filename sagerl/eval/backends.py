"""The sampling backend by name: ``make_sampler("hf" | "static" | "vllm", model)``.

:class:`~sagerl.eval.samplers.HFSampler` (transformers) and :class:`~sagerl.eval.static_sampler.StaticSampler`
(its static decode loop, Llama family, CPU) are always there; :class:`~sagerl.eval.vllm_backend.VLLMSampler`
needs vLLM (``make setup-vllm``) and is imported only when asked for.
"""

from __future__ import annotations

from typing import Any

from sagerl.errors import ConfigError
from sagerl.eval.samplers import HFSampler, Sampler
from sagerl.eval.static_sampler import StaticSampler

BACKENDS = ("hf", "static", "vllm")
"""The sampling backends: transformers (``hf``), sagerl's static decode loop over a transformers model on the CPU
(``static``, Llama family: :class:`~sagerl.eval.static_sampler.StaticSampler`), vLLM (``vllm``)."""


def make_sampler(
    backend: str,
    model: str | None,
    *,
    batch_size: int | None = None,
    dtype: str = "auto",
    seed: int = 0,
    vllm_args: dict[str, Any] | None = None,
) -> Sampler:
    """Build the sampler for ``backend`` (``"hf"``, ``"static"`` or ``"vllm"``), loading the model once.

    Args:
        vllm_args: extra ``vllm.LLM`` keyword arguments (vllm backend only).

    Raises:
        ConfigError: unknown backend, or vllm_args given to another backend.
        SagerlError: vLLM missing (the message names ``make setup-vllm``).
        ModelLoadError: the model does not load.
        EngineError: vLLM's engine did not start.
    """
    if backend == "hf":
        if vllm_args:
            raise ConfigError("vllm_args (--vllm-arg) are for --backend vllm")
        return HFSampler(model, dtype=dtype, batch_size=batch_size)
    if backend == "static":
        if vllm_args:
            raise ConfigError("vllm_args (--vllm-arg) are for --backend vllm")
        return StaticSampler(model, dtype=dtype, batch_size=batch_size)
    if backend == "vllm":
        from sagerl.eval.vllm_backend import VLLMSampler

        return VLLMSampler(model, dtype=dtype, seed=seed, chunk_size=batch_size, **(vllm_args or {}))
    raise ConfigError(f"unknown backend {backend!r} (choose {', '.join(BACKENDS)})")
