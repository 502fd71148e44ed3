"""Fixtures of the fault suite: a tiny random model, a tiny data set, and the environment of subprocesses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SAGERL_DATA_DIR", os.environ.get("SAGERL_DATA_DIR", str(DATA_DIR)))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer, saved once per session."""
    from sagerl.models import save_tiny_random_model

    return save_tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, initializer_range=1.0)


@pytest.fixture
def tiny_jsonl(tmp_path: Path) -> Path:
    """Eight one-line addition problems."""
    path = tmp_path / "tiny.jsonl"
    rows = [{"id": f"p{i}", "problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
