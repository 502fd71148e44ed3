"""glibc's malloc told to keep the memory torch frees, for the next step's tensors, instead of unmapping it.

Why: torch on a CPU allocates a step's large tensors anew every step (activations, logits, gradients, the
rollout decoder's packed weights: :class:`sagerl.eval.static_decoder.StaticDecoder`), and glibc's malloc serves
each block above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and unmaps it when it is freed. The
next step's tensor of the same size then costs the kernel one page fault and one zeroed 4 KiB page per page
touched: a SmolLM2-135M decode snapshot (538 MB of float32 weights copied and packed) took 0.42-0.57 s a rollout
that way and 0.18 s with the memory kept (the AVX2-only AMD EPYC, 2026-12-07). :func:`keep_freed_memory` sets,
in the running process, the two knobs that keep it: no ``mmap`` for allocations (``M_MMAP_MAX`` 0: every block
comes from the heap) and no trimming of the heap's top below 2 GiB free (``M_TRIM_THRESHOLD``). It is what the
PyTorch CPU performance guides get from jemalloc or tcmalloc through ``LD_PRELOAD``, with glibc's own
``mallopt`` and nothing to install. Measured side by side: ``benchmarks/step_profile.py`` (a variant with the
``+sysmalloc`` suffix runs without it; docs/performance.md).

No number changes: torch's CPU allocator aligns every tensor to 64 bytes either way, and the kernels see the same
bytes. What it costs: the process keeps its peak heap (its resident size does not fall after the peak).

Applied by sagerl's entry points (the ``sagerl`` command, ``make demo``, a study's worker processes), not by
importing sagerl. ``SAGERL_MALLOC=system`` leaves glibc's defaults; elsewhere than Linux with glibc it does
nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

MALLOC_ENV = "SAGERL_MALLOC"
"""``system``: leave glibc's malloc as it is (:func:`keep_freed_memory` does nothing)."""
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
"""glibc's ``mallopt`` parameter numbers (``malloc.h``)."""
TRIM_THRESHOLD = 2**31 - 1
"""The heap's top is given back to the OS only when more than this is free there (bytes; the largest C int)."""

_applied = False


def keep_freed_memory() -> bool:
    """Set this process's glibc malloc to serve every allocation from its heap and keep what is freed (see the
    module's docstring); once per process. Returns whether it is in effect: False with ``SAGERL_MALLOC=system``,
    off Linux, or without glibc (musl's malloc has no ``mallopt``). Never raises."""
    global _applied
    if _applied:
        return True
    if os.environ.get(MALLOC_ENV, "").strip().lower() == "system" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has no such symbol)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied
