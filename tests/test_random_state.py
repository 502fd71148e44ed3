"""Building a cached model leaves the caller's random generators as they were (sagerl.random_state): a run
draws the same numbers whether the model it needs was cached or built on the way."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from sagerl.char_lm import CharLMConfig, Example, Phase, cached_char_lm
from sagerl.random_state import preserved_rng


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_generators_are_restored_after_reseeding_and_on_error():
    seed_all(1)
    expected = draws()
    seed_all(1)
    with preserved_rng():
        seed_all(99)
        draws()
    assert draws() == expected
    seed_all(1)
    with pytest.raises(RuntimeError), preserved_rng():
        torch.rand(10)
        raise RuntimeError("a failed build")
    assert draws() == expected


def test_building_a_char_lm_does_not_move_the_callers_generators(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGERL_CACHE", str(tmp_path))
    phases = [Phase(examples=(Example(prompt="1 2 = ", completion="3"),) * 4, steps=2)]
    config = CharLMConfig(hidden_size=16, num_heads=2, intermediate_size=32, batch_size=4)
    seed_all(5)
    expected = draws()
    seed_all(5)
    folder = cached_char_lm("tiny", phases, config)  # built here: trains with transformers.Trainer
    assert (folder / "config.json").is_file()
    assert draws() == expected
    seed_all(5)
    assert cached_char_lm("tiny", phases, config) == folder  # from the cache
    assert draws() == expected
