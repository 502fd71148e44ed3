"""Helpers of the fault suite's subprocess tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def subprocess_env() -> dict[str, str]:
    """The environment of a ``sagerl`` subprocess: one torch thread, offline, this checkout first."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


SAGERL = [sys.executable, "-m", "sagerl.cli"]
