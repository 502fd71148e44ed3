"""Test-only support for running verl's actor on CPU (never part of the plugin).

- :class:`CpuPlatform`: verl resolves its device through a platform registry and otherwise falls back to
  "nvidia" (CUDA calls). This registers a CPU platform: torch.cpu for the device module, no-op memory stats,
  gloo for collectives.
- :func:`compose`: verl's own ``ppo_trainer.yaml`` composed with command-line overrides, as
  ``python -m verl.trainer.main_ppo`` does.
- :func:`tiny_model`: a 2-layer random Qwen2 (vocabulary 128) saved as a checkpoint.
- :data:`CPU_OVERRIDES`: the settings a one-process CPU actor needs (FSDP2, sdpa attention, fp32, no compile).
"""

from __future__ import annotations

import contextlib
import os
import shlex
from pathlib import Path

import torch
import verl
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


class _CpuDeviceModule:
    """torch.cpu, plus zeros for the torch.cuda-style memory queries verl makes."""

    def __getattr__(self, name):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name == "mem_get_info":
            return lambda *args, **kwargs: (0, 0)
        if name == "get_device_name":
            return lambda *args, **kwargs: "cpu"
        if name in ("get_rng_state", "set_rng_state"):  # verl's checkpoints save and restore it
            return getattr(torch, name)
        if name.startswith(("memory_", "max_memory", "reset_", "empty_cache", "ipc_collect")):
            return lambda *args, **kwargs: 0
        raise AttributeError(name)


@PlatformRegistry.register(platform="cpu")
class CpuPlatform(PlatformBase):
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = _CpuDeviceModule()

    def is_available(self):
        return True

    def current_device(self):
        return "cpu"  # verl uses it as a .to() target

    def device_count(self):
        return 1

    def set_device(self, device_index):
        pass

    def synchronize(self, device_index=None):
        pass

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        pass

    def empty_cache(self):
        pass

    def get_device_capability(self, device_index=0):
        return (None, None)

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg):
        yield

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    def ray_resource_name(self):
        return "CPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def cudart(self):
        return None


def use_cpu_platform() -> None:
    set_platform(CpuPlatform())


def compose(overrides: list[str]):
    """verl's ``ppo_trainer.yaml`` composed with ``overrides`` (hydra's command-line syntax)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


def command_overrides(command: str) -> list[str]:
    """The ``key=value`` arguments of a ``python -m verl.trainer.main_ppo ...`` shell command (a backslash at the
    end of a line joins it to the next as the shell does: removed, so a quoted word may continue there)."""
    words = shlex.split(command.replace("\\\n", ""))
    start = words.index("verl.trainer.main_ppo") + 1
    return [w for w in words[start:] if "=" in w]


def tiny_model(out_dir: Path, seed: int = 0, initializer_range: float = 0.02) -> Path:
    """A 2-layer random Qwen2 (hidden size 32, vocabulary 128) saved to ``out_dir``, without a tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(out_dir)
    return out_dir


def cpu_overrides(model_dir: Path, batch_size: int, micro_batch_size: int) -> list[str]:
    """Overrides that make the actor run in one CPU process: FSDP2, sdpa attention, fp32, no torch.compile."""
    actor = "actor_rollout_ref.actor"
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        f"{actor}.strategy=fsdp2",
        f"{actor}.fsdp_config.strategy=fsdp2",
        f"{actor}.fsdp_config.use_torch_compile=False",
        f"{actor}.use_torch_compile=False",
        f"+{actor}.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{actor}.optim.total_training_steps=1",
        f"{actor}.optim.lr=1e-2",
        f"{actor}.ppo_mini_batch_size={batch_size}",
        f"{actor}.ppo_micro_batch_size_per_gpu={micro_batch_size}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch_size}",
        "actor_rollout_ref.rollout.n=1",
    ]
