"""Fixed thread counts and deterministic kernels, for results that must reproduce.

A float result on a CPU depends on the order of its reductions, and torch's CPU kernels split a reduction
over the threads they are given: the same seeded run with 1 and with 2 threads gives other weights (a
planted model built with 1 and with 2 threads hashes differently). So everything whose numbers sagerl
publishes runs with a thread count fixed by the job itself, never inherited from the process that starts
it: the planted models' builds (:mod:`sagerl.tasks.planted_model`, 1 thread) and every run of a study
(``threads`` of the study file, 1 by default), whether it runs alone or in a worker of ``--jobs N``.

What this guarantees: the same bytes on the same kind of machine (CPU model, torch build) with the same
thread count and dtype. Not across CPUs: another instruction set (AVX2 instead of AVX-512/AMX) selects other
kernels, which round differently, and ``dtype: auto`` resolves to bfloat16 on a CPU with bfloat16 units,
float32 elsewhere (:mod:`sagerl.precision`). A CPU with more extensions can run the kernels of one with
fewer: ``SAGERL_DTYPE=float32 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``
on an AVX-512 EPYC gave the SmolLM2 evaluation an AVX2-only EPYC gave, to every printed digit
(docs/real-lm.md#reproduction-the-same-machine-and-another). That cap is sagerl's *canonical* kernel mode
(:mod:`sagerl.kernels`), the default of the planted benchmark; :func:`machine_record` records the mode and
which kernels ran.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def fixed_threads(threads: int) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(threads)``; the caller's count is restored after.

    Raises:
        ValueError: ``threads`` is not a positive integer.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r}: expected a positive integer")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def deterministic(threads: int = 1) -> Iterator[None]:
    """:func:`fixed_threads` plus ``torch.use_deterministic_algorithms(True)`` for the body (an operation
    without a deterministic implementation raises instead of running); the caller's settings are restored
    after."""
    import torch

    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    with fixed_threads(threads):
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(was, warn_only=warn_only)


def cpu_kernels() -> str:
    """The kernels torch dispatches to on this CPU: ``torch.backends.cpu.get_cpu_capability()`` (``AVX512``,
    ``AVX2``..., capped by ``ATEN_CPU_CAPABILITY``)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def machine_record() -> dict[str, Any]:
    """What a run's bytes depend on besides its inputs, thread count and dtype: the CPU, its vector and
    matrix extensions (``avx*``, ``amx*``, ``fma``, from ``/proc/cpuinfo`` where there is one), the kernels
    torch dispatches to (``kernels``: ``torch.backends.cpu.get_cpu_capability()``, e.g. ``AVX512``, or
    ``AVX2`` under ``ATEN_CPU_CAPABILITY=avx2``), the kernel mode this process runs (``kernel_mode``:
    ``canonical`` or ``native``, :func:`sagerl.kernels.active_mode`), the torch and transformers versions."""
    import torch
    import transformers

    from sagerl.kernels import active_mode

    cpu, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine(), platform.processor()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = sorted(
                    f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx", "fma"))
                )
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "isa": flags,
        "kernels": cpu_kernels(),
        "kernel_mode": active_mode(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def source_revision(root: Path) -> dict[str, Any] | None:
    """The git revision of the checkout at ``root`` whose ``sagerl/`` package runs: ``{"revision": the commit's
    first 12 hex digits, "modified": whether tracked files under ``sagerl/`` differ from it}``; ``None`` where
    ``root`` is no git checkout (an installed wheel) or git cannot be run. Documentation, tests and study files
    do not count as modified: only the code that computes."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if not (root / ".git").exists():
        return None
    revision = git("rev-parse", "--short=12", "HEAD")
    if not revision:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "sagerl")
    return {"revision": revision, "modified": None if changed is None else bool(changed)}


@functools.lru_cache(maxsize=1)
def code_record() -> dict[str, Any]:
    """Which sagerl ran a result: ``{"sagerl": version, "revision": commit or None, "modified": bool or
    None}`` (:func:`source_revision` of the checkout the package is imported from; both ``None`` for an
    installed wheel). Recorded beside :func:`machine_record` in every study run's ``cell.json`` and every
    evaluation's ``eval_config.json``, so that a study resumed over sittings at several commits says which
    code ran each run. Read once per process."""
    import sagerl

    found = source_revision(Path(sagerl.__file__).resolve().parents[1])
    return {"sagerl": sagerl.__version__, **(found or {"revision": None, "modified": None})}
