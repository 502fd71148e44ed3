"""Compute precision: the ``dtype`` setting of ``sagerl train``, ``sagerl eval`` and study files.

- ``float32``: everything in float32.
- ``bfloat16``: training runs the forward and backward passes under bfloat16 autocast over float32 master
  weights (TRL's ``bf16=True``: the optimizer and the weights stay float32); sampling uses bfloat16 weights
  (the HF sampler, vLLM) or bfloat16 autocast (TRL's rollouts with transformers). The log-probabilities,
  their ratios and the KL terms are float32: autocast runs ``log_softmax`` in float32, and
  :mod:`sagerl.objective` computes in the dtype of the log-probs it is given (tests/train/test_precision.py
  checks both).
- ``auto`` (the default): ``bfloat16`` where the hardware has bfloat16 matrix units, ``float32`` elsewhere.
  On a CPU that means AMX (``amx_bf16``) or AVX-512 BF16 (``avx512_bf16``), read from ``/proc/cpuinfo``; on
  CUDA, ``torch.cuda.is_bf16_supported()``.

The environment variable ``SAGERL_DTYPE`` (``float32`` or ``bfloat16``) replaces what ``auto`` resolves to, in
this process and the ones it starts: the test suite sets ``SAGERL_DTYPE=float32`` so that its numbers do not
depend on the CPU it runs on (tests/conftest.py).

Asking for ``bfloat16`` on a CPU without bfloat16 matrix units works, but is much slower than float32 there
(the matmuls are emulated: a 4096×576 @ 576×1536 matmul ran at 0.73 GFLOP/s in bfloat16 against 41 in float32,
one thread of an AVX2-only AMD EPYC, 2026-12-02): a warning says so and names the switch back
(``dtype=float32``).
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

from sagerl.errors import ConfigError

DTYPES = ("auto", "float32", "bfloat16")
"""The values of a ``dtype`` setting."""
ENV_VAR = "SAGERL_DTYPE"
"""What ``auto`` resolves to when set (``float32``, ``bfloat16``; ``auto`` or unset: the machine decides)."""
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags (``/proc/cpuinfo``) of bfloat16 matrix instructions."""


def check_dtype(value: object, where: str = "dtype") -> str:
    """``value`` if it is one of :data:`DTYPES`.

    Raises:
        ConfigError: one line naming ``where``, the value and the allowed ones.
    """
    if value not in DTYPES:
        raise ConfigError(f"{where}={value!r}: expected one of {', '.join(DTYPES)}")
    return str(value)


@functools.cache
def cpu_bf16_flags() -> tuple[str, ...]:
    """The bfloat16 matrix flags this CPU reports (empty where there is no ``/proc/cpuinfo``)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return tuple(f for f in CPU_BF16_FLAGS if f in flags)
    return ()


def bf16_supported(device: str = "cpu") -> bool:
    """Whether ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:0"`` ...) has bfloat16 matrix units."""
    if str(device).startswith("cuda"):
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return bool(cpu_bf16_flags())


def resolve_dtype(requested: str, device: str = "cpu") -> str:
    """The dtype a run uses on ``device``: ``auto`` resolved (:func:`bf16_supported`), the others as given.

    Raises:
        ConfigError: an unknown dtype (or an unknown ``SAGERL_DTYPE``).

    Warns:
        UserWarning: ``bfloat16`` on a CPU without bfloat16 matrix units (slower than float32 there).
    """
    check_dtype(requested)
    if requested == "auto" and os.environ.get(ENV_VAR, "auto") != "auto":
        requested = check_dtype(os.environ[ENV_VAR], ENV_VAR)
    if requested == "auto":
        return "bfloat16" if bf16_supported(device) else "float32"
    if requested == "bfloat16" and not str(device).startswith("cuda") and not bf16_supported(device):
        warnings.warn(
            "dtype=bfloat16 on a CPU without bfloat16 matrix units (no amx_bf16 or avx512_bf16 in "
            "/proc/cpuinfo): the matmuls are emulated, up to ~50x slower than float32 (a bfloat16 matmul ran 57x "
            "slower on an AVX2 CPU, docs/performance.md); set dtype=float32 (or auto) to switch back",
            stacklevel=2,
        )
    return requested


def default_device() -> str:
    """``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
