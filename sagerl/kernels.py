"""Canonical kernels: one set of CPU kernels for float32 work that must give the same bytes on every x86-64 CPU.

torch picks its CPU kernels by the instruction set it finds: ATen's vectorised operations dispatch to
``AVX512`` or ``AVX2`` code (``torch.backends.cpu.get_cpu_capability()``), oneDNN and MKL (the BLAS of the
PyPI wheels, ``torch.__config__.show()``) to AVX-512, AMX or AVX2 code. Each rounds its reductions in
another order, so the same seeded float32 run gives other bytes on an AVX-512 CPU than on an AVX2-only one.
Two modes (:data:`MODES`):

- ``canonical``: every kernel library capped at AVX2 (:data:`CANONICAL_ENV`): ATen's dispatch
  (``ATEN_CPU_CAPABILITY=avx2``), oneDNN (``ONEDNN_MAX_CPU_ISA=AVX2``), MKL's dispatch
  (``MKL_ENABLE_INSTRUCTIONS=AVX2``) and MKL's Conditional Numerical Reproducibility mode on the one code
  path it runs on Intel and AMD CPUs alike (``MKL_CBWR=COMPATIBLE``), with ``dtype: auto`` meaning float32
  (``SAGERL_DTYPE=float32``). Every x86-64 CPU with AVX2 and FMA (Intel since 2013, AMD since 2015) runs the
  same kernels then (checked so far on an Intel Xeon with AMX only: ``docs/planted.md``). The default of
  the planted benchmark: its builds (``sagerl planted build``), every study run on a planted model and
  ``sagerl train`` / ``sagerl eval`` of one (a 0.1 M-parameter model: the cap costs little,
  ``benchmarks/kernels_cost.py``).
- ``native``: sagerl sets nothing; torch runs the kernels it picks for the CPU (and the environment's caps,
  if the user exported any). The default for real LMs, where bfloat16 and the fastest kernels are the point.

The variables act only when set before torch (and its MKL, oneDNN and OpenMP) is loaded, in the process
that does the work, so they are never a shell export of the user's: a study runs its runs in worker
processes started with them (:mod:`sagerl.study.runner`), and a ``sagerl`` command sets them before its
first ``import torch`` (:func:`apply`), or starts itself again with them (``os.execve`` of the same
command line) when torch was imported already. The thread count is fixed too (:mod:`sagerl.determinism`):
a reduction split over 2 threads rounds otherwise than over 1.

What ran is recorded, measured rather than requested: :func:`active_mode` (``canonical`` when every
variable of :data:`CANONICAL_ENV` has its value in this process) goes into the machine record
(:func:`sagerl.determinism.machine_record`: ``kernel_mode``, with ``kernels``, torch's capability, ``AVX2``
under the cap) and into an evaluation's engine (:data:`sagerl.eval.samples.ENGINE_KEYS`).

``canonical`` on a CPU without AVX2 and FMA, or not x86-64, cannot run those kernels: one
:class:`KernelModeWarning` says the numbers will not match the published ones, and the run goes on natively.
Where each CPU kind was checked: ``docs/planted.md`` (section "Canonical kernels"); the cross-CPU check
is ``tests/test_kernels.py``, whose fingerprint SHA-256s were recorded on an Intel Xeon with AMX.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sagerl.errors import ConfigError

CANONICAL = "canonical"
NATIVE = "native"
MODES = (CANONICAL, NATIVE)
"""The kernel modes, as ``kernels:`` of a study file and ``--kernels`` of the commands take them."""

CANONICAL_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_CBWR": "COMPATIBLE",
    "SAGERL_DTYPE": "float32",
}
"""The environment of the canonical mode: each kernel library torch's CPU wheel links, capped at AVX2, MKL in
its Conditional Numerical Reproducibility mode on the ``COMPATIBLE`` branch (SSE2: the one branch besides
``AUTO`` that MKL runs on non-Intel CPUs, so Intel and AMD CPUs run the same MKL code; its ``AVX2`` branch
falls back to ``AUTO``, AMD's own kernels, there; OpenBLAS, which some builds link instead, has no such mode), and
``dtype: auto`` resolved to float32 (:mod:`sagerl.precision`: bfloat16 would be emulated under the cap, and
is not reproducible across CPUs)."""

REQUIRED_FLAGS = ("avx2", "fma")
"""The CPU flags (``/proc/cpuinfo``) the canonical kernels need; torch's AVX2 kernels use FMA too."""

CANONICAL_THREADS = 1
"""The threads of a command run with canonical kernels when ``OMP_NUM_THREADS`` does not say (a reduction split
over 2 threads rounds otherwise than over 1; a study gives its own ``threads``)."""

REEXEC_MARK = "SAGERL_KERNELS_REEXEC"
"""Set in the environment of a command started again by :func:`apply` (so it never loops)."""

_warned = False


class KernelModeWarning(UserWarning):
    """``canonical`` kernels asked for on a CPU that cannot run them: the run goes on natively."""


def check_mode(mode: object, where: str = "--kernels") -> str:
    """``mode`` if it is one of :data:`MODES`.

    Raises:
        ConfigError: any other value, one line naming ``where`` and the modes.
    """
    if mode not in MODES:
        raise ConfigError(f"{where} {mode!r}: choose one of {', '.join(MODES)}")
    return str(mode)


PLANTED_PREFIX = "planted-"
"""What the names of the shipped planted models begin with (:data:`sagerl.tasks.planted_model.PREFIX` is this
constant; kept here so that choosing a mode, which happens before torch loads, imports no task code)."""


def default_mode(model: str | None) -> str:
    """The mode of a run of ``model`` when none is given: ``canonical`` for a planted model (a name
    ``planted-...``), ``native`` for everything else (a real LM)."""
    return CANONICAL if model is not None and str(model).startswith(PLANTED_PREFIX) else NATIVE


def cpu_flags() -> set[str] | None:
    """The CPU's flags from ``/proc/cpuinfo`` (Linux), or ``machdep.cpu`` of ``sysctl`` (macOS), lower case;
    None where neither says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return {f.lower().replace(".", "_") for f in out.split()} or None
    return None


def canonical_supported() -> tuple[bool, str]:
    """Whether this CPU can run the canonical kernels, and why not: ``(True, "")``, or ``(False, reason)``
    for a CPU that is not x86-64 or lacks one of :data:`REQUIRED_FLAGS`. A CPU whose flags cannot be read
    (neither Linux nor macOS) is taken to have them: its record says which kernels ran."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return False, f"the CPU is {platform.machine() or 'unknown'}, not x86-64"
    flags = cpu_flags()
    if flags is None:
        return True, ""
    missing = [f for f in REQUIRED_FLAGS if f not in flags]
    if missing:
        return False, f"the CPU has no {' or '.join(f.upper() for f in missing)}"
    return True, ""


def effective_mode(mode: str, where: str = "--kernels") -> str:
    """The mode a run asked to use ``mode`` gets on this CPU: ``mode``, or ``native`` with one
    :class:`KernelModeWarning` (once per process) when ``canonical`` cannot run here.

    Raises:
        ConfigError: ``mode`` is not one of :data:`MODES`.
    """
    global _warned
    check_mode(mode, where)
    if mode == NATIVE:
        return NATIVE
    ok, why = canonical_supported()
    if ok:
        return CANONICAL
    if not _warned:
        _warned = True
        warnings.warn(
            f"{where} canonical: {why}, so it cannot run the canonical (AVX2) kernels; the run goes on with "
            "its native kernels and its numbers will not match the published ones",
            KernelModeWarning,
            stacklevel=2,
        )
    return NATIVE


def active_mode(environ: Mapping[str, str] | None = None) -> str:
    """The mode this process (or ``environ``) runs: ``canonical`` when every variable of
    :data:`CANONICAL_ENV` has its value (set before torch was loaded, as :func:`apply` and the study
    workers do), else ``native``."""
    env = os.environ if environ is None else environ
    return CANONICAL if all(env.get(k) == v for k, v in CANONICAL_ENV.items()) else NATIVE


def environment(
    mode: str, threads: int | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a process that is to run ``mode``'s kernels with ``threads`` threads: ``base``
    (default ``os.environ``) with :data:`CANONICAL_ENV` for ``canonical`` (unchanged for ``native``), and
    ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to ``threads`` when given.

    Raises:
        ConfigError: ``mode`` is not one of :data:`MODES`.
    """
    check_mode(mode)
    env = dict(os.environ if base is None else base)
    if mode == CANONICAL:
        env.update(CANONICAL_ENV)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def _is_command_line() -> bool:
    """Whether this process is a ``sagerl`` command (the console script or ``python -m sagerl.cli``), which
    :func:`apply` may start again, rather than a library caller (a test, a notebook)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in ("sagerl.cli.__main__", "sagerl.cli"):
        return True
    return bool(sys.argv) and Path(sys.argv[0]).name == "sagerl"


def apply(mode: str, where: str = "--kernels") -> str:
    """Make this process run ``mode``'s kernels, before it does any work; returns the mode in effect.

    ``native``, or a process that runs the canonical kernels already, changes nothing. For ``canonical``:
    before torch is imported the variables of :data:`CANONICAL_ENV` are set in this process's environment
    (torch, MKL and oneDNN read them when they load), with ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` at
    ``OMP_NUM_THREADS`` if the user set it, else :data:`CANONICAL_THREADS`; after, a ``sagerl`` command replaces itself with the
    same command line under them (``os.execve`` of ``sys.executable`` and ``sys.orig_argv``, marked with
    :data:`REEXEC_MARK` so it happens once), and a library caller gets an error, since its torch runs the
    kernels it loaded with.

    Raises:
        ConfigError: an unknown ``mode``; or ``canonical`` asked for in a process that imported torch with
            other kernels and is not a ``sagerl`` command (start a new process, e.g. ``sagerl ...``, or use
            :func:`environment` for a subprocess).
    """
    mode = effective_mode(mode, where)
    if mode == NATIVE or active_mode() == CANONICAL:
        return mode
    threads = os.environ.get("OMP_NUM_THREADS") or str(CANONICAL_THREADS)
    if "torch" not in sys.modules:
        os.environ.update(environment(CANONICAL, threads=int(threads) if threads.isdigit() else None))
        return CANONICAL
    if _is_command_line() and os.environ.get(REEXEC_MARK) != "1":
        env = environment(CANONICAL, threads=int(threads) if threads.isdigit() else None)
        env[REEXEC_MARK] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    raise ConfigError(
        f"{where} canonical: torch was loaded in this process before its kernels could be capped; run the work "
        f"in a new process (the sagerl command, or a subprocess with sagerl.kernels.environment('canonical'))"
    )


def cpu_kind(record: Mapping[str, object]) -> str:
    """A CPU's kind as this project tells them apart, from a :func:`sagerl.determinism.machine_record`: its
    name and its widest floating-point unit, ``AMX``, ``AVX-512 BF16``, ``AVX-512``, ``AVX2`` or ``no AVX2``
    (``"AMD EPYC (AVX-512 BF16)"``)."""
    isa = set(record.get("isa") or [])  # type: ignore[arg-type]
    units = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
    unit = next((name for flag, name in units if flag in isa), "no AVX2")
    return f"{record.get('cpu')} ({unit})"


CANONICAL_BUILDS: dict[str, dict[str, Any]] = {
    "reference/1": {
        "files": {
            "model.safetensors": "5442f8a1bae7ec8fc0b45affd85e1a4beb24567fcb559abdb3f7b9fe0df8be9d",
            "planted.json": "866be85e4ea1db38b5e59b4ea7b7746d0b880d20dcfe8f2d8094c49685ddc813",
        },
        "cpu": "Intel(R) Xeon(R) Processor (AMX), torch 2.13.0+cpu, 2026-12-04",
    },
}
"""The planted builds made under canonical kernels (``"<role>/<build seed>"``): the SHA-256 of each file that
differs from a native build and the CPU kind it was made on; what ``sagerl planted build --check`` compares a
canonical build with. The shipped builds (``sagerl/tasks/planted_models``) were made natively on an AMD EPYC
with AVX-512 BF16 and stay the benchmark's files: every published table was run from them."""
