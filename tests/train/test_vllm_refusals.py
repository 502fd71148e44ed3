"""``use_vllm`` settings that cannot work here are refused in one line before TRL builds anything."""

from __future__ import annotations

import importlib.util

import pytest

from sagerl.errors import ConfigError
from sagerl.train import SAGEConfig
from sagerl.train.vllm_rollouts import check_vllm_training


def config(**kw) -> SAGEConfig:
    return SAGEConfig(output_dir="/tmp/unused", use_cpu=True, report_to="none", **kw)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_use_vllm_without_vllm_names_the_make_target():
    with pytest.raises(ConfigError, match=r"use_vllm=True needs vLLM.*make setup-vllm") as err:
        check_vllm_training(config(use_vllm=True))
    assert "\n" not in str(err.value)


def test_without_use_vllm_nothing_is_checked():
    check_vllm_training(config())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_server_mode_without_cuda_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU machine: server mode can run")
    with pytest.raises(ConfigError, match=r"vllm_mode='server' needs a CUDA device.*vllm_mode='colocate'"):
        check_vllm_training(config(use_vllm=True, vllm_mode="server"))
