"""Fixtures of the fault suite: a tiny data set (the tiny model and offline settings: tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def tiny_jsonl(tmp_path: Path) -> Path:
    """Eight one-line addition problems."""
    path = tmp_path / "tiny.jsonl"
    rows = [{"id": f"p{i}", "problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
