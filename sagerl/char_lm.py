"""Tiny character-level causal language models, trained from scratch in minutes on a CPU, and cached.

For synthetic tasks whose reference policy must have *known* behaviour (the planted-strategy task): the
model is a small Llama (transformers) over a character vocabulary, trained with ``transformers.Trainer``
on (prompt, completion) pairs with the loss on completion tokens only, so what it learns is the planted
distribution of completions given a prompt. The result is an ordinary Hugging Face model folder (model +
tokenizer) that every sagerl command takes as ``--model``.

Cache: :func:`cached_char_lm` stores each model under ``<cache>/char_lm/<name>-<hash>``, the hash covering
the training pairs and the :class:`CharLMConfig`, and writes it into a temporary folder first, so an
interrupted build never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sagerl.models import cache_root

ALPHABET = " 0123456789abcdefghijklmnopqrstuvwxyz.,:;=?!+-*/()[]{}<>|\\'\""
"""Characters of the vocabulary (anything else maps to ``<unk>``)."""
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


def char_tokenizer(alphabet: str = ALPHABET):
    """A ``PreTrainedTokenizerFast`` with one token per character of ``alphabet`` plus ``<pad>``, ``<eos>``,
    ``<unk>``; no BOS and no chat template, so a prompt is encoded exactly as its characters."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in dict.fromkeys(alphabet):
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


@dataclass(frozen=True)
class CharLMConfig:
    """Size and training schedule of a character-level model (defaults: ~0.1 M parameters)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 192
    max_length: int = 64
    """Longest prompt + completion, in characters."""
    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0


def train_char_lm(pairs: Sequence[tuple[str, str]], config: CharLMConfig, out_dir: str | Path) -> Path:
    """Train a model from scratch on (prompt, completion) pairs; save model and tokenizer to ``out_dir``.

    Each example is the prompt's characters, the completion's, then ``<eos>``; the loss covers the
    completion and ``<eos>`` only. AdamW with a cosine schedule for ``config.steps`` optimizer steps.

    Raises:
        ValueError: no pairs, or an example longer than ``config.max_length``.
    """
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    if not pairs:
        raise ValueError("train_char_lm needs at least one (prompt, completion) pair")
    tokenizer = char_tokenizer()
    rows: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(p) + len(c) > config.max_length:
            raise ValueError(f"example of {len(p) + len(c)} tokens exceeds max_length={config.max_length}")
        pad = config.max_length - len(p) - len(c)
        rows["input_ids"].append(p + c + [tokenizer.pad_token_id] * pad)
        rows["attention_mask"].append([1] * (len(p) + len(c)) + [0] * pad)
        rows["labels"].append([-100] * len(p) + c + [-100] * pad)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_length,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    out = Path(out_dir)
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(
            output_dir=scratch,
            max_steps=config.steps,
            per_device_train_batch_size=config.batch_size,
            learning_rate=config.learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=min(100, config.steps // 10),
            weight_decay=0.0,
            logging_steps=max(1, config.steps // 10),
            save_strategy="no",
            report_to="none",
            seed=config.seed,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        Trainer(model=model, args=args, train_dataset=Dataset.from_dict(rows)).train()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cached_char_lm(
    name: str,
    pairs: Callable[[], Sequence[tuple[str, str]]] | Sequence[tuple[str, str]],
    config: CharLMConfig = CharLMConfig(),
    after_build: Callable[[Path], None] | None = None,
) -> Path:
    """The model ``name`` trained on ``pairs`` with ``config``, from the cache or built once.

    Args:
        name: a readable prefix of the cache folder.
        pairs: the training pairs, or a function returning them (called only to build or to hash).
        config: :class:`CharLMConfig`.
        after_build: called with the new folder before it is moved into place (to add files, such as
            measurements of the built model).

    Returns:
        the model folder (``config.json``, weights, tokenizer).
    """
    data = list(pairs() if callable(pairs) else pairs)
    digest = hashlib.sha256(
        json.dumps({"pairs": data, "config": asdict(config)}, sort_keys=True).encode()
    ).hexdigest()[:16]
    target = cache_root() / "char_lm" / f"{name}-{digest}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        train_char_lm(data, config, tmp)
        if after_build is not None:
            after_build(tmp)
        if target.exists():  # a concurrent build won the race
            shutil.rmtree(tmp)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
