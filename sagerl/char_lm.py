"""Tiny character-level causal language models, trained from scratch in minutes on a CPU, and cached.

For synthetic tasks whose reference policy must have *known* behaviour (the planted-strategy task): the
model is a small Llama (transformers) over a character vocabulary, trained with ``transformers.Trainer``
on (prompt, completion) pairs with the loss on completion tokens only, so what it learns is the planted
distribution of completions given a prompt. Which completion tokens carry the loss is set per example
(:data:`LOSS_SCOPES`), so a training set can teach how to carry out a choice apart from how often to make
it; training may also run in phases. The result is an ordinary Hugging Face model folder (model +
tokenizer) that every sagerl command takes as ``--model``.

Cache: :func:`cached_char_lm` stores each model under ``<cache>/char_lm/<name>-<hash>``, the hash covering
the training phases and the :class:`CharLMConfig`, and writes it into a temporary folder first, so an
interrupted build never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sagerl.atomic_files import build_folder
from sagerl.models import cache_root
from sagerl.random_state import preserved_rng

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
    """Size and optimiser settings of a character-level model (defaults: ~0.1 M parameters)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 192
    max_length: int = 64
    """Longest prompt + completion, in characters."""
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 0


LOSS_SCOPES = ("completion", "first_token", "after_first_token")
"""Which completion tokens of an example carry the loss: all of them (and ``<eos>``), only the first, or
all but the first. Masking the first token of some examples teaches what follows a choice without
changing how often the model makes it."""


@dataclass(frozen=True)
class Example:
    """One training example: the prompt (never in the loss), the completion, the loss scope."""

    prompt: str
    completion: str
    loss_on: str = "completion"


@dataclass(frozen=True)
class Phase:
    """One training phase: examples and optimizer steps (a fresh AdamW run with a cosine schedule)."""

    examples: tuple[Example, ...]
    steps: int


def _rows(tokenizer, phase: Phase, max_length: int) -> dict[str, list[list[int]]]:
    rows: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for ex in phase.examples:
        p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(ex.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(p) + len(c) > max_length:
            raise ValueError(f"example of {len(p) + len(c)} tokens exceeds max_length={max_length}")
        pad = max_length - len(p) - len(c)
        if ex.loss_on == "completion":
            target = c
        elif ex.loss_on == "first_token":
            target = c[:1] + [-100] * (len(c) - 1)
        else:
            target = [-100] + c[1:]
        rows["input_ids"].append(p + c + [tokenizer.pad_token_id] * pad)
        rows["attention_mask"].append([1] * (len(p) + len(c)) + [0] * pad)
        rows["labels"].append([-100] * len(p) + target + [-100] * pad)
    return rows


def train_char_lm(phases: Sequence[Phase], config: CharLMConfig, out_dir: str | Path) -> Path:
    """Train a model from scratch through ``phases``; save model and tokenizer to ``out_dir``.

    Each example is the prompt's characters, the completion's, then ``<eos>``; the loss covers the tokens
    its ``loss_on`` names, never the prompt. Each phase is a fresh AdamW run with a cosine schedule
    (warm-up 10%) over its steps, continuing from the weights the previous phase left.

    Raises:
        ValueError: no phase, a phase without examples or steps, an unknown ``loss_on``, or an example
            longer than ``max_length``.
    """
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    if not phases or any(not p.examples or p.steps < 1 for p in phases):
        raise ValueError("train_char_lm needs at least one phase, each with examples and steps >= 1")
    scopes = {ex.loss_on for p in phases for ex in p.examples}
    if not scopes <= set(LOSS_SCOPES):
        raise ValueError(f"loss_on must be one of {LOSS_SCOPES}, got {sorted(scopes - set(LOSS_SCOPES))}")
    tokenizer = char_tokenizer()
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
    for index, phase in enumerate(phases):
        steps = phase.steps
        dataset = Dataset.from_dict(_rows(tokenizer, phase, config.max_length))
        with tempfile.TemporaryDirectory() as scratch:
            args = TrainingArguments(
                output_dir=scratch,
                max_steps=steps,
                per_device_train_batch_size=config.batch_size,
                learning_rate=config.learning_rate,
                lr_scheduler_type="cosine",
                warmup_steps=max(1, steps // 10),
                weight_decay=0.0,
                logging_steps=max(1, steps // 5),
                save_strategy="no",
                report_to="none",
                seed=config.seed + index,
                use_cpu=not torch.cuda.is_available(),
                dataloader_num_workers=0,
                disable_tqdm=True,
            )
            trainer = Trainer(model=model, args=args, train_dataset=dataset)
            trainer.remove_callback(PrinterCallback)  # no loss dicts on stdout while a model builds
            trainer.train()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cached_char_lm(
    name: str, phases: Callable[[], Sequence[Phase]] | Sequence[Phase], config: CharLMConfig = CharLMConfig()
) -> Path:
    """The model ``name`` trained through ``phases`` with ``config``, from the cache or built once.

    Args:
        name: a readable prefix of the cache folder.
        phases: the training phases (:class:`Phase`), or a function returning them.
        config: :class:`CharLMConfig`.

    Returns:
        the model folder (``config.json``, weights, tokenizer).
    """
    phases = list(phases() if callable(phases) else phases)
    digest = hashlib.sha256(
        json.dumps({"phases": [asdict(p) for p in phases], "config": asdict(config)}, sort_keys=True).encode()
    ).hexdigest()[:16]
    target = cache_root() / "char_lm" / f"{name}-{digest}"
    if (target / "config.json").is_file():
        return target
    with preserved_rng():  # training reseeds every generator (sagerl.random_state)
        return build_folder(target, lambda folder: train_char_lm(phases, config, folder))
